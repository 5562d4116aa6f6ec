"""EAGLE-1's proposer (EAGLE-NOTES section 4): step 0 re-runs the head over this step's committed
tokens with the TARGET's final-norm hidden states (overwriting draft KV built from predicted
features), then K-1 single-token steps feed the head's own output back, one position further each.
Logits come from the target's own lm_head."""

from __future__ import annotations

from alcheck.runner.proposers.base import Proposer


class EagleProposer(Proposer):
    def extend(self, ctx, batch, ids, features):
        return self.head(ctx.target.embed(ids), features, batch)

    def step(self, ctx, batch, tokens, hidden):
        return self.head(ctx.target.embed(tokens), hidden, batch)

    def logits(self, ctx, hidden):
        return ctx.target.compute_logits(hidden)
