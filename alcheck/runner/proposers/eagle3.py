"""EAGLE-3's proposer (EAGLE3-NOTES section 4): the features are the target's auxiliary states
[N, 3 * H_target] (the runner captures the layers named by `aux_layers`); step 0 maps them through
fc, later steps feed back the head's pre-norm output; logits come from the head's own lm_head over
its draft vocabulary, mapped to target ids (-inf outside the ids d2t maps to)."""

from __future__ import annotations

from alcheck.runner.proposers.base import Proposer


class Eagle3Proposer(Proposer):
    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.head.aux_layers

    def extend(self, ctx, batch, ids, features):
        return self.head(self.head.embed(ctx.target, ids), self.head.combine(features), batch)

    def step(self, ctx, batch, tokens, hidden):
        return self.head(self.head.embed(ctx.target, tokens), hidden, batch)

    def logits(self, ctx, hidden):
        return self.head.compute_logits(hidden)
