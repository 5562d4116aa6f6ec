"""The built-in runners under --method draft_model against an independent oracle (float32 CPU).

The oracle (`oracle_rows`) is written here and shares nothing with the proposer or the runners:
transformers' own models (AutoModelForCausalLM) for the target AND the draft recompute every
logit from scratch over the whole sequence at every step (no KV cache); the draft proposes K
tokens by its greedy argmax over the committed tokens plus its own drafts, the target's argmax
after the root and after each draft is compared by hand, and the longest agreeing prefix plus
the target's token is emitted. Per question, steps, accepted and accepted_per_pos must equal the
runner's on a Llama and a Qwen3 target, K=1..5, and the output must equal plain greedy decoding.

The draft is the target's first layer as a model of its own, on a target whose second layer is
damped: it agrees with the target often but not always. With draft == target every draft is
accepted (AL = K+1 on every step).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from chain_oracle import argmax_all, greedy_chain, lossless_p_value, method_rows, random_prompts

from alcheck.runner.config import RunnerConfig

MAX_TOKENS = 20
FAMILIES = ["llama", "qwen3"]


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """family -> dict(target folder, draft folder, alcheck Target, both transformers models)."""
    from transformers import AutoModelForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny import damp_target_layers, make_tiny_target
    from alcheck.testing.tiny_arch import make_tiny_arch_target
    from alcheck.testing.tiny_draft import make_tiny_draft_lm

    cache = {}

    def get(family):
        if family not in cache:
            root = tmp_path_factory.mktemp(family)
            if family == "llama":
                folder = make_tiny_target(root / "t", num_layers=2, unit_rms_embeddings=True)
            else:  # "qwen3-tied": the lm_head is the embedding (Qwen3-0.6B's layout), no lm_head tensor
                tied = family.endswith("-tied")
                arch = family.removesuffix("-tied")
                folder = make_tiny_arch_target(root / "t", arch, num_layers=2, tie_word_embeddings=tied)
            damp_target_layers(folder, 1, 0.3)
            draft = make_tiny_draft_lm(root / "d", folder, num_layers=1)

            def ref(path):
                return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()

            cache[family] = dict(
                target_dir=folder,
                draft_dir=draft,
                target=load_target(str(folder)),
                ref=ref(folder),
                ref_draft=ref(draft),
            )
        return cache[family]

    return get


def oracle_rows(ref, ref_draft, eos, prompt, k):
    """{steps, accepted, accepted_per_pos, output}: the draft's greedy argmax over the committed
    tokens plus its own drafts, K times, in the shared loop."""

    def propose(tokens, k):
        draft = []
        for _ in range(k):
            draft.append(argmax_all(ref_draft, tokens + draft)[-1])
        return draft

    return greedy_chain(prompt, eos, k, MAX_TOKENS, partial(argmax_all, ref), propose)


def runner_rows(target, draft_dir, prompts, k, runner="paged", **cfg):
    from alcheck.methods.draft_model import DRAFT_MODEL

    return method_rows(DRAFT_MODEL, draft_dir, target, prompts, k, MAX_TOKENS, runner, **cfg)


def _greedy(target, prompts):
    from alcheck.runner.paged import PagedRunner

    cfg = RunnerConfig(num_spec_tokens=0, block_size=4)
    runner = PagedRunner(target.model, None, target.eos_token_ids, cfg)
    return [r.output_ids for r in runner.generate(prompts, MAX_TOKENS)]


@pytest.mark.parametrize("family", FAMILIES)
def test_runner_rows_equal_the_oracle(families, family):
    f = families(family)
    target = f["target"]
    eos = frozenset(target.eos_token_ids)
    prompts = random_prompts(target.model.config.vocab_size)
    greedy = _greedy(target, prompts)
    accepted = rejected = 0
    for k in range(1, 6):
        got = runner_rows(target, f["draft_dir"], prompts, k, audit_slots=True)
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            assert row == oracle_rows(f["ref"], f["ref_draft"], eos, prompt, k), f"{family} K={k} prompt {i}"
            assert row["output"] == greedy[i], f"{family} K={k} prompt {i}: not plain greedy decoding"
            accepted += row["accepted"]
            rejected += row["steps"] - row["accepted_per_pos"][-1]
    assert accepted > 0 and rejected > 0  # the draft's tokens were accepted, and rejected


def test_a_tied_draft_model_equals_the_oracle(families):
    f = families("qwen3-tied")
    target = f["target"]
    eos = frozenset(target.eos_token_ids)
    prompts = random_prompts(target.model.config.vocab_size, n=3, seed=6)
    for k in (2, 4):
        for i, (prompt, row) in enumerate(zip(prompts, runner_rows(target, f["draft_dir"], prompts, k))):
            assert row == oracle_rows(f["ref"], f["ref_draft"], eos, prompt, k), f"K={k} prompt {i}"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_target_as_its_own_draft_accepts_every_draft(families, family):
    f = families(family)
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, seed=1)
    greedy = _greedy(target, prompts)
    for k in (1, 3, 5):
        for i, row in enumerate(runner_rows(target, f["target_dir"], prompts, k)):
            assert row["accepted"] == k * row["steps"], f"{family} K={k} prompt {i}"
            assert row["accepted_per_pos"] == [row["steps"]] * k
            assert row["output"] == greedy[i]


def test_every_runner_and_batching_gives_the_same_rows(families):
    """The contiguous and static runners, small batches with preemption, and a KV pool too small
    for everything at once all give the paged runner's rows."""
    f = families("llama")
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=2)
    want = runner_rows(target, f["draft_dir"], prompts, 3)
    assert runner_rows(target, f["draft_dir"], prompts, 3, "contiguous") == want
    assert runner_rows(target, f["draft_dir"], prompts, 3, "static") == want
    assert runner_rows(target, f["draft_dir"], prompts, 3, max_batch_size=2, num_blocks=20) == want


def test_no_kv_lookahead_reproduces_the_bug_for_the_draft(families):
    """Without lookahead slots the draft's own KV writes past the allocated blocks land in block 0
    (the audit counts them) and, block 0 being a real block, corrupt some request's KV."""
    f = families("llama")
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=3)
    want = runner_rows(target, f["draft_dir"], prompts, 4)
    from alcheck.methods.draft_model import DRAFT_MODEL
    from alcheck.runner.paged import PagedRunner

    head = DRAFT_MODEL.load(f["draft_dir"], target, torch.float32, "cpu")
    config = RunnerConfig(num_spec_tokens=4, block_size=4, kv_lookahead=False, audit_slots=True)
    runner = PagedRunner(target.model, DRAFT_MODEL.proposer(head), target.eos_token_ids, config)
    got = runner.generate(prompts, MAX_TOKENS)
    assert runner.slot_violations > 0
    assert [(r.steps, r.accepted) for r in got] != [(w["steps"], w["accepted"]) for w in want]


@pytest.mark.parametrize(
    "runner,draft_sampling",
    [("paged", "onehot"), ("paged", "sampled"), ("static", "onehot"), ("contiguous", "sampled")],
)
def test_sampling_is_lossless(families, runner, draft_sampling):
    """At temperature 1 the runner's outputs (greedy one-hot drafts, or drafts sampled from the
    draft's distribution) pass the two-sample test against target-only samples; the static
    runner's device step draws from its own stream, so this is its oracle too. Four such tests
    at alpha 0.05 would fail by chance one time in five, so each must reach p >= 0.01; the same
    runner sampling at temperature 0.6 fails it (p < 0.001): the test has power here."""
    from alcheck.methods.draft_model import DRAFT_MODEL

    f = families("llama")
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=4)

    def p_value(temperature):
        return lossless_p_value(
            DRAFT_MODEL,
            f["draft_dir"],
            target,
            prompts,
            MAX_TOKENS,
            runner,
            temperature,
            draft_sampling=draft_sampling,
        )

    p, line = p_value(1.0)
    assert p >= 0.01, line
    if (runner, draft_sampling) == ("paged", "onehot"):
        p, line = p_value(0.6)
        assert p < 0.001, line


def test_a_gpu_pool_counts_the_draft_models_kv(families, monkeypatch):
    """On a (fake) GPU the pool's bytes per block are the target's layers plus every layer of the
    draft model (here the target itself as draft: two layers), and a tight pool preempts with the
    same rows."""
    from alcheck.methods.draft_model import DRAFT_MODEL
    from alcheck.runner import kv_budget
    from alcheck.runner.paged import PagedRunner

    f = families("qwen3")
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=5)
    want = runner_rows(target, f["target_dir"], prompts, 2)
    head = DRAFT_MODEL.load(f["target_dir"], target, torch.float32, "cpu")
    layers = [*target.model.attention_layers, *head.attention_layers]
    assert len(layers) == 4
    per_block = sum(kv_budget.block_bytes(1, 4, a.num_kv_heads, a.head_dim, 4) for a in layers)
    total, blocks = 10 << 30, 24
    monkeypatch.setattr(kv_budget, "sizes_from_memory", lambda device: True)
    monkeypatch.setattr(
        kv_budget, "device_memory", lambda d: (total - int(0.9 * total) + blocks * per_block, total)
    )
    runner = PagedRunner(
        target.model,
        DRAFT_MODEL.proposer(head),
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=2, block_size=4),
    )
    results = runner.generate(prompts, MAX_TOKENS)
    assert runner.kv_pool["bytes_per_block"] == per_block and runner.kv.num_blocks == blocks
    assert sum(r.preemptions for r in results) > 0
    got = [
        dict(steps=r.steps, accepted=r.accepted, accepted_per_pos=r.accepted_per_pos, output=r.output_ids)
        for r in results
    ]
    assert got == want


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_context_bound_covers_the_draft_models_writes(families, monkeypatch, k):
    """A draft LM writes one position past an EAGLE head; every position it or the target touches
    still lies inside prompt + max_tokens + K - 1 (models/compat.positions_needed), the bound
    the context check uses."""
    from alcheck.methods.draft_model import DRAFT_MODEL
    from alcheck.models.compat import positions_needed
    from alcheck.runner.paged import PagedRunner

    f = families("llama")
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=4, seed=7)
    seen: dict[tuple[int, str], int] = {}
    real = PagedRunner.attn_batch

    def spy(self, reqs, starts, lens, layer, **kw):
        for r, s, n in zip(reqs, starts, lens):
            seen[r.request_id, layer] = max(seen.get((r.request_id, layer), -1), s + n - 1)
        return real(self, reqs, starts, lens, layer, **kw)

    monkeypatch.setattr(PagedRunner, "attn_batch", spy)
    head = DRAFT_MODEL.load(f["draft_dir"], target, torch.float32, "cpu")
    config = RunnerConfig(num_spec_tokens=k, block_size=4)
    results = PagedRunner(target.model, DRAFT_MODEL.proposer(head), [], config).generate(prompts, 17)
    for i, (prompt, r) in enumerate(zip(prompts, results)):
        assert len(r.output_ids) == 17
        assert max(seen[i, "target"], seen[i, "draft"]) + 1 <= positions_needed(len(prompt), 17, k)
