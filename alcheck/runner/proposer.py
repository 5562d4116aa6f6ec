"""Draft proposers: the per-head part of drafting (extend, one step, logits over target ids);
the chain and tree loops that use it are written once, in runner/drafting.py. The EAGLE-1
proposer follows EAGLE-NOTES section 4, the EAGLE-3 one EAGLE3-NOTES section 4:

step 0 re-runs the head over this step's committed tokens with the TARGET's hidden states
(overwriting draft KV built from draft-predicted features), then K-1 single-token steps feed the
head's own output back as the feature, one position further each.

Both return drafts as TARGET token ids [B, K] and, when sampling, draft distributions over the
target vocabulary [B, K, V] (an EAGLE-3 head's reduced vocabulary is mapped through d2t, with
zero probability outside the mapped ids), so verification code never sees draft ids.
"""

from __future__ import annotations

import torch

from alcheck.runner.drafting import propose_chain, propose_tree
from alcheck.models.eagle import EagleHead
from alcheck.models.eagle3 import Eagle3Head


class _Drafter:
    """What both head kinds share: the head, its attention layers, and the two loops."""

    def __init__(self, head):
        self.head = head

    @property
    def attention_layers(self):
        return self.head.attention_layers

    def propose(self, runner, reqs, inputs: list[list[int]], features: torch.Tensor, starts: list[int], k: int):
        """inputs[b]: tokens x_{p+1} for positions starts[b].. ; features: target rows aligned
        with them. Returns (drafts [B, K] long, draft probs [B, K, V] or None when greedy)."""
        return propose_chain(self, runner, reqs, inputs, features, starts, k)

    def propose_tree(self, runner, reqs, inputs, features, starts, steps: int, topk: int, num_draft_tokens: int):
        """The same inputs -> DraftTrees (runner/tree.py) of num_draft_tokens nodes per request."""
        return propose_tree(self, runner, reqs, inputs, features, starts, steps, topk, num_draft_tokens)


class EagleProposer(_Drafter):
    """EAGLE-1: features are the target's final-norm hidden states; logits from the target's lm_head."""

    def __init__(self, head: EagleHead):
        super().__init__(head)

    def extend(self, runner, batch, ids, features):
        return self.head(runner.target.embed(ids), features, batch)

    def step(self, runner, batch, tokens, hidden):
        return self.head(runner.target.embed(tokens), hidden, batch)

    def logits(self, runner, hidden):
        return runner.target.compute_logits(hidden)


class Eagle3Proposer(_Drafter):
    """`features` are the target's auxiliary states [N, 3 * H_target] (the runner captures the
    layers named by `aux_layers`); step 0 maps them through fc, later steps feed back the head's
    pre-norm output; logits come from the head's own lm_head, mapped to target ids."""

    def __init__(self, head: Eagle3Head):
        super().__init__(head)

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.head.aux_layers

    def extend(self, runner, batch, ids, features):
        return self.head(self.head.embed(runner.target, ids), self.head.combine(features), batch)

    def step(self, runner, batch, tokens, hidden):
        return self.head(self.head.embed(runner.target, tokens), hidden, batch)

    def logits(self, runner, hidden):
        return self.head.compute_logits(hidden)  # target ids; -inf outside the ids d2t maps to


def make_proposer(head):
    """The proposer for a loaded head: EAGLE-3 heads get Eagle3Proposer, EAGLE-1 heads EagleProposer."""
    return Eagle3Proposer(head) if isinstance(head, Eagle3Head) else EagleProposer(head)
