"""Issue 6 `--runner contiguous`: the plain one-request-at-a-time runner (per-request contiguous
KV, no blocks, no batching) must give the paged runner's per-question counts and tokens exactly
in float32, for K = 0..5 on the copy-layer pair (partial acceptance, some prompts hit EOS)."""

from __future__ import annotations

import pytest
from conftest import MAX_TOKENS, pooled_al, run_contiguous


def _key(r):
    return (
        r.request_id,
        r.prompt_tokens,
        r.output_ids,
        r.steps,
        r.drafted,
        r.accepted,
        r.accepted_per_pos,
        r.finish_reason,
    )


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 5])
def test_contiguous_equals_paged_per_question(pair, prompts, spec_results, greedy, k):
    target, head = pair
    results = run_contiguous(target.model, head, target.eos_token_ids, prompts, MAX_TOKENS, k)
    paged = spec_results(k) if k else greedy
    for got, want in zip(results, paged):
        assert _key(got) == _key(want), f"question {got.request_id}"
    if k:
        assert 1.0 < pooled_al(results) < k + 1


def test_contiguous_sampling_is_seeded(pair, prompts):
    target, head = pair
    args = (target.model, head, target.eos_token_ids, prompts[:4], 20, 3)
    a = run_contiguous(*args, temperature=0.8, seed=1)
    b = run_contiguous(*args, temperature=0.8, seed=1)
    c = run_contiguous(*args, temperature=0.8, seed=2)
    assert [_key(r) for r in a] == [_key(r) for r in b]
    assert [r.output_ids for r in a] != [r.output_ids for r in c]
    for r in a:
        assert r.steps + r.accepted >= len(r.output_ids) - 1
        assert sum(r.accepted_per_pos) == r.accepted


def test_contiguous_rejects_bad_input(pair):
    target, head = pair
    with pytest.raises(ValueError):
        run_contiguous(target.model, None, [], [[1, 2]], 5, k=2)
    with pytest.raises(ValueError):
        run_contiguous(target.model, head, [], [[]], 5, k=2)
