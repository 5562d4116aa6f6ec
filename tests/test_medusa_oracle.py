"""The built-in runners under --method medusa against an independent oracle (float32 CPU).

The oracle shares nothing with models/medusa.py or the proposer: the target is transformers' own
LlamaForCausalLM run from scratch over the whole sequence (no KV cache), its final-norm state at
the position that chose the last committed token read from `model.model(...)`, and each head
written out here in plain torch from the safetensors tensors (x + silu(x W^T + b) per layer, then the head's
lm_head). Head i's argmax is draft i+1. Per question, steps, accepted and accepted_per_pos must
equal the runner's, K=1..4.
"""

from __future__ import annotations

import pytest
import torch
from chain_oracle import argmax_all, greedy_chain, lossless_p_value, method_rows, random_prompts

from alcheck.errors import AlcheckError
from alcheck.runner.config import RunnerConfig

MAX_TOKENS = 20
HEADS = 4


@pytest.fixture(scope="module")
def medusa(tmp_path_factory):
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny_medusa import make_medusa_target, make_tiny_medusa

    root = tmp_path_factory.mktemp("medusa")
    target_dir = make_medusa_target(root / "t")
    heads = make_tiny_medusa(root / "m", target_dir, HEADS, num_layers=2)
    return dict(
        target_dir=target_dir,
        heads=heads,
        legacy=make_tiny_medusa(root / "legacy", target_dir, HEADS, num_layers=2, legacy=True),
        target=load_target(str(target_dir)),
        hf=LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval(),
        state=load_file(str(heads / "model.safetensors")),
    )


def oracle_rows(f, eos, prompt, k):
    s, hf = f["state"], f["hf"]

    @torch.no_grad()
    def propose(tokens, k):
        # the state that chose the last committed token (the bonus): position len(tokens) - 2
        h = hf.model(torch.tensor([tokens])).last_hidden_state[0, -2]
        draft = []
        for i in range(k):
            x, j = h, 0
            while f"blocks.{i}.layers.{j}.weight" in s:
                w, b = s[f"blocks.{i}.layers.{j}.weight"], s[f"blocks.{i}.layers.{j}.bias"]
                x = x + torch.nn.functional.silu(x @ w.T + b)
                j += 1
            draft.append(int((x @ s[f"lm_heads.{i}.weight"].T).argmax()))
        return draft

    return greedy_chain(prompt, eos, k, MAX_TOKENS, lambda tokens: argmax_all(hf, tokens), propose)


def runner_rows(f, prompts, k, runner="paged", source=None, **cfg):
    from alcheck.methods.medusa import MEDUSA

    return method_rows(MEDUSA, source or f["heads"], f["target"], prompts, k, MAX_TOKENS, runner, **cfg)


def test_runner_rows_equal_the_oracle(medusa):
    target = medusa["target"]
    eos = frozenset(target.eos_token_ids)
    prompts = random_prompts(target.model.config.vocab_size, n=5, seed=1)
    accepted = rejected = 0
    for k in range(1, HEADS + 1):
        got = runner_rows(medusa, prompts, k, audit_slots=True)
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            assert row == oracle_rows(medusa, eos, prompt, k), f"K={k}, prompt {i}"
            accepted += row["accepted"]
            rejected += row["steps"] - row["accepted_per_pos"][-1]
    assert accepted > 0 and rejected > 0  # the heads' drafts were accepted, and rejected


def test_fasterdecoding_layout_reads_as_the_same_heads(medusa):
    prompts = random_prompts(medusa["target"].model.config.vocab_size, n=3, seed=5)
    assert runner_rows(medusa, prompts, 3, source=medusa["legacy"]) == runner_rows(medusa, prompts, 3)


def test_every_runner_and_batching_gives_the_same_rows(medusa):
    prompts = random_prompts(medusa["target"].model.config.vocab_size, n=6, seed=2)
    for k in (1, 3):
        want = runner_rows(medusa, prompts, k)
        assert runner_rows(medusa, prompts, k, "contiguous") == want
        assert runner_rows(medusa, prompts, k, "static") == want
        assert runner_rows(medusa, prompts, k, max_batch_size=2, num_blocks=24) == want


def test_k_above_the_heads_is_refused_before_any_step(medusa):
    from alcheck.methods.medusa import MEDUSA
    from alcheck.runner.table import runner_class

    head = MEDUSA.load(medusa["heads"], medusa["target"], torch.float32, "cpu")
    for runner in ("paged", "static"):
        with pytest.raises(AlcheckError, match=rf"K={HEADS + 1} with --method medusa: .* has {HEADS} head"):
            runner_class(runner)(
                medusa["target"].model,
                MEDUSA.proposer(head),
                medusa["target"].eos_token_ids,
                RunnerConfig(num_spec_tokens=HEADS + 1, block_size=4),
            )


@pytest.mark.parametrize("runner", ["paged", "static"])
def test_sampling_is_lossless(medusa, runner):
    """At temperature 1 the runner's outputs (one-hot Medusa drafts) pass the two-sample test
    against target-only samples (p >= 0.01)."""
    from alcheck.methods.medusa import MEDUSA

    prompts = random_prompts(medusa["target"].model.config.vocab_size, n=6, seed=4)
    p, line = lossless_p_value(MEDUSA, medusa["heads"], medusa["target"], prompts, MAX_TOKENS, runner)
    assert p >= 0.01, line
