"""Draft proposers. The EAGLE-1 proposer follows EAGLE-NOTES section 4:

step 0 re-runs the head over this step's committed tokens with the TARGET's hidden states
(overwriting draft KV built from draft-predicted features), then K-1 single-token steps feed the
head's own output back as the feature, one position further each.
"""

from __future__ import annotations

import torch

from alcheck.models.eagle import EagleHead


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
