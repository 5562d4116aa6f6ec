"""EAGLE-3's proposer (EAGLE3-NOTES section 4): the features are the target's auxiliary states
[N, 3 * H_target] (the runner captures the layers named by `aux_layers`); step 0 maps them through
fc, later steps feed back the head's pre-norm output; logits come from the head's own lm_head over
its draft vocabulary, mapped to target ids (-inf outside the ids d2t maps to)."""

from __future__ import annotations

from alcheck.runner.proposers.base import Proposer


class Eagle3Proposer(Proposer):
    def __init__(self, head):
        super().__init__(head)
        d2t = head.draft_to_target
        # draft ids map to increasing target ids (EAGLE-3's d2t keeps the vocabulary's order), so
        # the first maximum over draft ids is the first maximum over the mapped target ids
        self.order_kept = bool((d2t[1:] > d2t[:-1]).all()) if d2t.numel() > 1 else True

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.head.aux_layers

    def extend(self, ctx, batch, ids, features):
        return self.head(self.head.embed(ctx.target, ids), self.head.combine(features), batch)

    def step(self, ctx, batch, tokens, hidden):
        return self.head(self.head.embed(ctx.target, tokens), hidden, batch)

    def logits(self, ctx, hidden):
        return self.head.compute_logits(hidden)

    def draft(self, ctx, hidden):
        """Greedy drafts: argmax over the draft vocabulary, mapped, without first spreading the
        logits over the target's (-inf elsewhere): the same token, NaN rows included."""
        if self.order_kept and getattr(ctx, "greedy_drafts", False):
            return self.head.draft_to_target[self.head.draft_logits(hidden).argmax(-1)], None
        return super().draft(ctx, hidden)
