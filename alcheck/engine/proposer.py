"""Draft proposers. The EAGLE-1 proposer follows EAGLE-NOTES section 4, the EAGLE-3 one
EAGLE3-NOTES section 4:

step 0 re-runs the head over this step's committed tokens with the TARGET's hidden states
(overwriting draft KV built from draft-predicted features), then K-1 single-token steps feed the
head's own output back as the feature, one position further each.

Both return drafts as TARGET token ids [B, K] and, when sampling, draft distributions over the
target vocabulary [B, K, V] (an EAGLE-3 head's reduced vocabulary is mapped through d2t, with
zero probability outside the mapped ids), so verification code never sees draft ids.
"""

from __future__ import annotations

import torch

from alcheck.models.eagle import EagleHead
from alcheck.models.eagle3 import Eagle3Head


class EagleProposer:
    def __init__(self, head: EagleHead):
        self.head = head

    @property
    def attention_layers(self):
        return self.head.attention_layers

    def propose(self, runner, reqs, inputs: list[list[int]], features: torch.Tensor, starts: list[int], k: int):
        """inputs[b]: tokens x_{p+1} for positions starts[b].. ; features: target hidden rows aligned
        with them. Returns (drafts [B, K] long, draft probs [B, K, V] or None when greedy)."""
        target = runner.target
        lens = [len(x) for x in inputs]
        ids = torch.tensor([t for x in inputs for t in x], device=runner.device)
        hidden = self.head(target.embed(ids), features, runner.attn_batch(reqs, starts, lens, "draft"))
        last = torch.tensor(lens, device=runner.device).cumsum(0) - 1
        h = hidden[last]
        positions = [s + n for s, n in zip(starts, lens)]
        tokens, dists = [], []
        for step in range(k):
            token, dist = runner.draft_sample(target.compute_logits(h))
            tokens.append(token)
            dists.append(dist)
            if step == k - 1:
                break
            batch = runner.attn_batch(reqs, positions, [1] * len(reqs), "draft")
            h = self.head(target.embed(token), h, batch)
            positions = [p + 1 for p in positions]
        drafts = torch.stack(tokens, dim=1)
        return drafts, (torch.stack(dists, dim=1) if dists[0] is not None else None)


class Eagle3Proposer:
    """`features` are the target's auxiliary states [N, 3 * H_target] (the runner captures the
    layers named by `aux_layers`); step 0 maps them through fc, later steps feed back the head's
    pre-norm output."""

    def __init__(self, head: Eagle3Head):
        self.head = head

    @property
    def attention_layers(self):
        return self.head.attention_layers

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.head.aux_layers

    def propose(self, runner, reqs, inputs: list[list[int]], features: torch.Tensor, starts: list[int], k: int):
        head, target = self.head, runner.target
        lens = [len(x) for x in inputs]
        ids = torch.tensor([t for x in inputs for t in x], device=runner.device)
        y = head(head.embed(target, ids), head.combine(features), runner.attn_batch(reqs, starts, lens, "draft"))
        last = torch.tensor(lens, device=runner.device).cumsum(0) - 1
        h = y[last]
        positions = [s + n for s, n in zip(starts, lens)]
        tokens, dists = [], []
        for step in range(k):
            token, dist = runner.draft_sample(head.compute_logits(h))  # target ids / target-vocab q
            tokens.append(token)
            dists.append(dist)
            if step == k - 1:
                break
            batch = runner.attn_batch(reqs, positions, [1] * len(reqs), "draft")
            h = head(head.embed(target, token), h, batch)
            positions = [p + 1 for p in positions]
        drafts = torch.stack(tokens, dim=1)
        return drafts, (torch.stack(dists, dim=1) if dists[0] is not None else None)


def make_proposer(head):
    """The proposer for a loaded head: EAGLE-3 heads get Eagle3Proposer, EAGLE-1 heads EagleProposer."""
    return Eagle3Proposer(head) if isinstance(head, Eagle3Head) else EagleProposer(head)
