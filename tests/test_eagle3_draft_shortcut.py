"""EAGLE-3's greedy draft shortcut (runner/proposers/eagle3.py): the argmax over the draft
vocabulary, mapped through d2t, is the token the argmax over the spread target-vocabulary logits
gives; the runner's results are the same with and without it."""

from __future__ import annotations

import pytest
import torch
from conftest import MAX_TOKENS
from eagle3_pair import load_eagle_head_pair

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner


@pytest.fixture(scope="module")
def eagle3_pair(tmp_path_factory):
    return load_eagle_head_pair(tmp_path_factory.mktemp("eagle3"))


def key(results):
    return [(r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos)) for r in results]


@pytest.mark.parametrize("cfg", [{}, {"temperature": 0.9, "seed": 4}], ids=["greedy", "onehot-sampled"])
def test_the_shortcut_changes_no_result(eagle3_pair, prompts, cfg):
    target, head = eagle3_pair
    fast = proposer_for(head)
    assert fast.order_kept  # the tiny head's d2t drops ids but keeps their order
    slow = proposer_for(head)
    slow.order_kept = False
    runs = [
        PagedRunner(target.model, p, target.eos_token_ids, RunnerConfig(num_spec_tokens=3, **cfg)).generate(
            prompts, MAX_TOKENS
        )
        for p in (fast, slow)
    ]
    assert key(runs[0]) == key(runs[1])


def test_the_shortcut_gives_the_spread_argmax_even_on_ties_and_nan(eagle3_pair):
    target, head = eagle3_pair
    proposer = proposer_for(head)

    class Greedy:
        greedy_drafts = True

        def draft_sample(self, logits):
            return logits.argmax(-1), None

    hidden = torch.randn(6, head.config.hidden_size)
    logits = head.draft_logits(hidden)
    rows = head.draft_logits  # patch the logits to hold ties and a NaN
    tied = logits.clone()
    tied[1, [3, 9]] = tied[1].max() + 1  # a tie: the first draft id wins, as the first target id
    tied[2, 5] = float("nan")
    head.draft_logits = lambda h: tied
    try:
        fast, _ = proposer.draft(Greedy(), hidden)
        proposer.order_kept = False
        spread, _ = proposer.draft(Greedy(), hidden)
    finally:
        head.draft_logits = rows
    assert torch.equal(fast, spread)


def test_a_reordering_d2t_turns_the_shortcut_off(eagle3_pair):
    _, head = eagle3_pair
    saved = head.draft_to_target.clone()
    try:
        head.draft_to_target.copy_(saved.flip(0))
        assert not proposer_for(head).order_kept
    finally:
        head.draft_to_target.copy_(saved)
