"""MTP layers' proposer (METHODS-NOTES section 4, vLLM's mtp through its EAGLE loop): EAGLE's
alignment (token x_{p+1} at position p with the trunk's state h_p), but the state is the trunk's
last-layer output BEFORE the final norm, asked for as the residual stream "entering" layer
num_hidden_layers. Step 0 re-runs the MTP layer over this step's committed tokens; the K-1 steps
after feed its own final-norm output back, one position further each, through the layer
models/mimo_mtp.draft_layer names. Logits come from the target's lm_head."""

from __future__ import annotations

from alcheck.models.mimo_mtp import draft_layer
from alcheck.runner.proposers.base import Proposer


class MTPProposer(Proposer):
    @property
    def aux_layers(self) -> tuple[int, ...]:
        return (self.head.config.num_hidden_layers,)  # the last layer's output, pre-norm

    def extend(self, ctx, batch, ids, features):
        return self.head(ctx.target.embed(ids), features, batch, draft_layer(0, self.head.num_layers))

    def step(self, ctx, batch, tokens, hidden):
        # every later step: vLLM's rule (draft_layer) names layer 0 whatever the step, so no step
        # counter is kept here (the static runner replays this call)
        return self.head(ctx.target.embed(tokens), hidden, batch, draft_layer(1, self.head.num_layers))

    def logits(self, ctx, hidden):
        return ctx.target.compute_logits(hidden)
