"""Oracles 2 and 3 for targets run through transformers' modeling code, per architecture and head
kind (EAGLE-1, EAGLE-3 with a reduced draft vocabulary), float32 CPU, block size 4:

- target-only greedy through the paged runner equals transformers' generate(do_sample=False);
- speculative output equals target-only greedy token for token: chains K=1 and K=3 and a tree
  (K=3, topk 2, 6 tokens), also with a KV pool small enough to preempt, with every KV write
  audited (no violation);
- per question, steps, accepted counts and tokens equal the contiguous reference runner's
  (runner/contiguous.py: one request at a time, no block manager), so AL does too.
"""

from __future__ import annotations

import pytest
import torch
from arch_pairs import ARCHS, MAX_TOKENS, arch_loaded, arch_pair, arch_prompts  # noqa: F401 - fixtures
from conftest import pooled_al, run_contiguous, run_spec

SHAPES = {"K1": dict(k=1), "K3": dict(k=3), "tree": dict(k=3, topk=2, num_draft_tokens=6)}
AL_SEEN: dict[str, float] = {}  # printed with -s: the ALs of this file's runs


@pytest.fixture(scope="module")
def greedy(arch_loaded):  # noqa: F811
    cache = {}

    def get(arch):
        if arch not in cache:
            target = arch_loaded(arch)[0]
            prompts = arch_prompts(target.model.config.vocab_size)
            cache[arch] = (
                prompts,
                run_spec(target.model, None, target.eos_token_ids, prompts, MAX_TOKENS, k=0)[0],
            )
        return cache[arch]

    return get


def _key(r):
    return r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason


@pytest.mark.parametrize("arch", ARCHS)
def test_target_only_equals_transformers_generate(arch, arch_pair, arch_loaded, greedy):  # noqa: F811
    from transformers import AutoModelForCausalLM

    prompts, results = greedy(arch)
    assert {r.finish_reason for r in results} >= {"length"}
    ref = AutoModelForCausalLM.from_pretrained(str(arch_pair(arch)["target"]), dtype=torch.float32).eval()
    eos = arch_loaded(arch)[0].eos_token_ids
    for i in (0, 3):
        with torch.no_grad():
            out = ref.generate(
                torch.tensor([prompts[i]]),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos[0],
            )
        assert out[0, len(prompts[i]) :].tolist() == results[i].output_ids, f"prompt {i}"


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("method", ["eagle", "eagle3"])
@pytest.mark.parametrize("arch", ARCHS)
def test_speculative_equals_greedy_and_contiguous(arch, method, shape, arch_loaded, greedy):  # noqa: F811
    target, eagle, eagle3 = arch_loaded(arch)
    head = eagle if method == "eagle" else eagle3
    prompts, expected = greedy(arch)
    cfg = SHAPES[shape]
    results, runner = run_spec(
        target.model, head, target.eos_token_ids, prompts, MAX_TOKENS, audit_slots=True, **cfg
    )
    assert [r.output_ids for r in results] == [r.output_ids for r in expected]
    assert runner.auditor.violations == 0
    al = pooled_al(results)
    AL_SEEN[f"{arch} {method} {shape}"] = al
    assert 1.0 < al < cfg["k"] + 1  # some drafts accepted, not all: the pair is a real test
    reference = run_contiguous(
        target.model,
        head,
        target.eos_token_ids,
        prompts,
        MAX_TOKENS,
        cfg["k"],
        topk=cfg.get("topk", 1),
        num_draft_tokens=cfg.get("num_draft_tokens"),
    )
    assert [_key(r) for r in results] == [_key(r) for r in reference]


@pytest.mark.parametrize("shape", ["K3", "tree"])
@pytest.mark.parametrize("arch", ARCHS)
def test_preemption_changes_nothing(arch, shape, arch_loaded, greedy):  # noqa: F811
    target, eagle, eagle3 = arch_loaded(arch)
    prompts, expected = greedy(arch)
    cfg = SHAPES[shape]
    # a request needs at most cdiv(30 + 40 + 6 + 3 + 2 * 2, 4) = 21 blocks: 30 hold about one and a half
    full, _ = run_spec(target.model, eagle3, target.eos_token_ids, prompts, MAX_TOKENS, **cfg)
    small, runner = run_spec(
        target.model,
        eagle3,
        target.eos_token_ids,
        prompts,
        MAX_TOKENS,
        num_blocks=30,
        audit_slots=True,
        **cfg,
    )
    assert sum(r.preemptions for r in small) > 0
    assert runner.auditor.violations == 0
    assert [r.output_ids for r in small] == [r.output_ids for r in expected]
    assert [_key(r) for r in small] == [_key(r) for r in full]


def teardown_module(module):
    if AL_SEEN:
        print(
            "\nAL (pooled, 8 prompts, 40 new tokens):", {k: round(v, 3) for k, v in sorted(AL_SEEN.items())}
        )
