"""The built-in runner under --method ngram against an independent oracle (float32 CPU).

The oracle (`oracle_rows`) is written here and shares nothing with the runner: transformers' own
model (AutoModelForCausalLM) recomputes every logit from scratch over the whole sequence at every
step (no KV cache), the draft comes from tests/test_ngram_rules.py's brute-force rule, and the
longest agreeing prefix is counted by hand. Per question, steps, drafted_steps, accepted and
accepted_per_pos must equal the runner's, on a Llama and a Qwen3 target, K=1..5; the output must
equal plain greedy decoding token for token. Prompts repeat short patterns, so matches, overlaps,
ties and misses all occur (the rule's edge cases are pinned one by one in test_ngram_rules.py).
"""

from __future__ import annotations

import random

import pytest
import torch
from test_ngram_rules import oracle_spec_bench, oracle_transformers, oracle_vllm

from alcheck.runner.config import RunnerConfig
from alcheck.runner.proposers.ngram import NgramProposer
from alcheck.runner.proposers.ngram_rules import NgramSettings

MAX_TOKENS = 24
FAMILIES = ["llama-markov", "qwen3"]


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """family -> (target folder, alcheck Target, transformers model), built once per module.
    "llama-markov": a Llama whose layers write nothing to the residual, so its next token is a
    function of the current one and greedy decoding falls into cycles the rule then copies (long
    accepted runs); the raw targets accept little and often find no match."""
    from transformers import AutoModelForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny import damp_target_layers, make_tiny_target
    from alcheck.testing.tiny_arch import make_tiny_arch_target

    cache = {}

    def get(family):
        if family not in cache:
            root = tmp_path_factory.mktemp(family)
            if family.startswith("llama"):
                folder = make_tiny_target(root / "t", num_layers=1, unit_rms_embeddings=True)
                if family == "llama-markov":
                    damp_target_layers(folder, 0, 0.0)
            else:
                folder = make_tiny_arch_target(root / "t", family, num_layers=2)
            ref = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
            cache[family] = (folder, load_target(str(folder)), ref)
        return cache[family]

    return get


def echo_prompts(target, n: int = 3, seed: int = 0) -> list[list[int]]:
    """X + the target's own greedy continuation of X + X again: after the second X the rule
    proposes the continuation, which the target accepts as far as it repeats itself."""
    rng = random.Random(seed)
    vocab = target.model.config.vocab_size
    base = [[rng.randrange(5, vocab) for _ in range(rng.randint(4, 10))] for _ in range(n)]
    return [b + g.output_ids[:12] + b for b, g in zip(base, _greedy(target, base))]


def patterned_prompts(vocab: int, n: int = 3, seed: int = 0) -> list[list[int]]:
    """Prompts made of a few short motifs repeated with noise: the n-gram rule finds matches."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        motifs = [[rng.randrange(5, vocab) for _ in range(rng.randint(2, 4))] for _ in range(3)]
        p = []
        while len(p) < rng.randint(8, 24):
            p += rng.choice(motifs) if rng.random() < 0.8 else [rng.randrange(5, vocab)]
        prompts.append(p)
    return prompts


@torch.no_grad()
def _argmax_all(ref, tokens: list[int]) -> list[int]:
    """The target's greedy next token after every prefix of `tokens`, from scratch (no cache)."""
    return ref(torch.tensor([tokens])).logits[0].argmax(-1).tolist()


def oracle_rows(ref, eos, prompt, k, lo, hi, rule="vllm"):
    """{steps, drafted_steps, accepted, accepted_per_pos, output}: the loop written out."""

    def propose(t):
        if rule == "vllm":
            return oracle_vllm(t, lo, hi, k)
        if rule == "spec-bench":
            return oracle_spec_bench(t, lo, hi, k)
        return [] if MAX_TOKENS - (len(t) - len(prompt)) <= 1 else oracle_transformers(t, lo, hi, k, eos)

    tokens, out = list(prompt), []
    steps = drafted_steps = accepted = 0
    per_pos = [0] * k

    def emit(new):
        for t in new:
            out.append(t)
            tokens.append(t)
            if t in eos or len(out) >= MAX_TOKENS:
                return True
        return False

    if rule == "vllm":  # the prefill emits one token and is no step
        if emit([_argmax_all(ref, tokens)[-1]]):
            return dict(steps=0, drafted_steps=0, accepted=0, accepted_per_pos=per_pos, output=out)
    while True:
        draft = propose(tokens)
        argmax = _argmax_all(ref, tokens + draft)[len(tokens) - 1 :]  # after the root, after each draft
        a = 0
        while a < len(draft) and draft[a] == argmax[a]:
            a += 1
        steps, drafted_steps, accepted = steps + 1, drafted_steps + bool(draft), accepted + a
        for i in range(a):
            per_pos[i] += 1
        if emit(draft[:a] + [argmax[a]]):
            break
    return dict(
        steps=steps, drafted_steps=drafted_steps, accepted=accepted, accepted_per_pos=per_pos, output=out
    )


def runner_rows(target, prompts, k, settings, runner="paged", **cfg):
    from alcheck.runner.table import runner_class

    proposer = NgramProposer(settings, target.eos_token_ids)
    config = RunnerConfig(num_spec_tokens=k, block_size=4, **cfg)
    results = runner_class(runner)(target.model, proposer, target.eos_token_ids, config).generate(
        prompts, MAX_TOKENS
    )
    return [
        dict(
            steps=r.steps,
            drafted_steps=r.drafted_steps,
            accepted=r.accepted,
            accepted_per_pos=r.accepted_per_pos,
            output=r.output_ids,
        )
        for r in results
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_runner_rows_equal_the_oracle(families, family):
    _, target, ref = families(family)
    eos = frozenset(target.eos_token_ids)
    prompts = patterned_prompts(target.model.config.vocab_size) + echo_prompts(target)
    greedy = [r.output_ids for r in _greedy(target, prompts)]
    undrafted = accepted = rejected = 0
    for k in range(1, 6):
        lo, hi = (1, 3) if k % 2 else (2, 2)  # min < max and min == max
        got = runner_rows(target, prompts, k, NgramSettings("vllm", lo, hi))
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            want = oracle_rows(ref, eos, prompt, k, lo, hi)
            assert row == want, f"{family} K={k} prompt {i}"
            assert row["output"] == greedy[i], f"{family} K={k} prompt {i}: not plain greedy decoding"
            undrafted += row["steps"] - row["drafted_steps"]
            accepted += row["accepted"]
            rejected += row["drafted_steps"] - row["accepted_per_pos"][0]
    assert accepted > 0 and rejected > 0  # the rule's drafts were accepted, and rejected
    assert undrafted > 0  # and some steps found no match at all


def _greedy(target, prompts):
    from alcheck.runner.paged import PagedRunner

    cfg = RunnerConfig(num_spec_tokens=0, block_size=4)
    return PagedRunner(target.model, None, target.eos_token_ids, cfg).generate(prompts, MAX_TOKENS)


def test_every_runner_and_batching_gives_the_same_rows(families):
    _, target, _ = families("llama")
    prompts = patterned_prompts(target.model.config.vocab_size, seed=1)
    settings = NgramSettings("vllm", 1, 3)
    want = runner_rows(target, prompts, 3, settings)
    assert runner_rows(target, prompts, 3, settings, "contiguous") == want
    assert runner_rows(target, prompts, 3, settings, "static") == want
    assert runner_rows(target, prompts, 3, settings, max_batch_size=2, num_blocks=24) == want


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rule,lo,hi", [("transformers", 1, 2), ("spec-bench", 1, 3)])
def test_other_rules_rows_equal_the_oracle(families, family, rule, lo, hi):
    """transformers' and Spec-Bench's loops: the prefill verifies drafts from the prompt and
    counts as a step; Spec-Bench verifies a dummy token when nothing matches."""
    _, target, ref = families(family)
    eos = frozenset(target.eos_token_ids)
    prompts = patterned_prompts(target.model.config.vocab_size, seed=2) + echo_prompts(target, seed=2)
    for k in (1, 4):
        got = runner_rows(target, prompts, k, NgramSettings(rule, lo, hi))
        assert runner_rows(target, prompts, k, NgramSettings(rule, lo, hi), "contiguous") == got
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            assert row == oracle_rows(ref, eos, prompt, k, lo, hi, rule), f"{family} {rule} K={k} prompt {i}"


@pytest.mark.parametrize("k", [2, 5])
def test_transformers_rule_matches_transformers_generate(families, k):
    """generate(prompt_lookup_num_tokens=K, max_matching_ngram_size=2): the same tokens and the
    same number of target forwards (counted by a hook on its model) as the runner's steps."""
    _, target, ref = families("llama-markov")
    eos = list(target.eos_token_ids)
    prompts = patterned_prompts(target.model.config.vocab_size, seed=3) + echo_prompts(target, seed=3)
    rows = runner_rows(target, prompts, k, NgramSettings("transformers", 1, 2))
    calls = []
    hook = ref.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        for i, (prompt, row) in enumerate(zip(prompts, rows)):
            calls.clear()
            out = ref.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=MAX_TOKENS,
                prompt_lookup_num_tokens=k,
                max_matching_ngram_size=2,
                eos_token_id=eos,
                pad_token_id=eos[0],
            )[0, len(prompt) :].tolist()
            assert out == row["output"], f"K={k} prompt {i}: tokens differ from transformers' generate"
            assert len(calls) == row["steps"], (
                f"K={k} prompt {i}: {len(calls)} forwards vs {row['steps']} steps"
            )
    finally:
        hook.remove()
    assert any(r["steps"] < len(r["output"]) for r in rows)  # some forwards emitted several tokens
