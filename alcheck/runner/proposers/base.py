"""The proposer protocol the runners call, and the base every head's proposer builds on.

A proposer supplies the per-head part of drafting:
    extend(ctx, batch, ids, features) -> hidden rows   step 0 over committed tokens, target features
    step(ctx, batch, tokens, hidden) -> hidden         one draft step from (token, previous hidden)
    logits(ctx, hidden) -> logits over TARGET ids
and the chain and tree loops that use them are written once, in runner/drafting.py. Drafts are
TARGET token ids [B, K], and sampled draft distributions are over the target vocabulary, so
verification never sees a head's own ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alcheck.runner.drafting import propose_chain, propose_tree

if TYPE_CHECKING:  # types only
    import torch

    from alcheck.runner.context import DraftContext
    from alcheck.runner.tree import DraftTrees


class Proposer:
    """Shared by every head kind: the head, its attention layers, and the two loops."""

    # target layers whose INPUT residual states the head reads as features (EAGLE-3); () means
    # the target's final-norm hidden state (EAGLE-1). The runner asks the target for these.
    aux_layers: tuple[int, ...] = ()
    # where the extend's first token sits relative to EAGLE's x_{p+1}-at-p: a draft LM (which
    # consumes x_p at p) sets 1; the static runner's device step places its rows by it
    position_shift: int = 0

    def __init__(self, head):
        self.head = head

    @property
    def attention_layers(self) -> list:
        """The head's attention layers: the runner binds their KV cache to the shared block table
        (a proposer with none, such as the tests' oracle drafters, has no draft KV)."""
        return self.head.attention_layers

    def propose(
        self,
        ctx: DraftContext,
        reqs,
        inputs: list[list[int]],
        features: torch.Tensor,
        starts: list[int],
        k: int,
    ):
        """inputs[b]: tokens x_{p+1} for positions starts[b].. ; features: target rows aligned
        with them. Returns (drafts [B, K] long, draft probs [B, K, V] or None when greedy)."""
        return propose_chain(self, ctx, reqs, inputs, features, starts, k)

    def propose_tree(
        self, ctx: DraftContext, reqs, inputs, features, starts, steps: int, topk: int, num_draft_tokens: int
    ) -> DraftTrees:
        """The same inputs -> DraftTrees (runner/tree.py) of num_draft_tokens nodes per request."""
        return propose_tree(self, ctx, reqs, inputs, features, starts, steps, topk, num_draft_tokens)

    def check_k(self, k: int) -> None:
        """One-line AlcheckError when this head cannot draft K tokens (Medusa: one head per position)."""

    # -- the per-head part (runner/drafting.py calls these) --------------------------------------

    def extend(self, ctx: DraftContext, batch, ids, features):
        raise NotImplementedError

    def step(self, ctx: DraftContext, batch, tokens, hidden):
        raise NotImplementedError

    def logits(self, ctx: DraftContext, hidden):
        raise NotImplementedError

    def draft(self, ctx: DraftContext, hidden):
        """A chain step's draft token per row and its distribution (None when greedy): the
        context's sampling rule over logits(); a head may take a shortcut with the same result."""
        return ctx.draft_sample(self.logits(ctx, hidden))
