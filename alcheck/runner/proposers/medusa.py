"""Medusa's proposer (vLLM's MedusaProposer): every draft comes from ONE hidden state, the
target's final-norm h_p at the last committed position; head i's argmax is draft i+1. No token is
fed back and there is no draft KV.

It still speaks the chain loop's protocol (runner/drafting.draft_chain), so the paged, contiguous
and static runners drive it unchanged: `extend` hands back the target's rows, and the "hidden"
the loop carries says which head is next by its shape:
    [B, H]     after extend: head 0 is next;
    [B, m, H]  after a step: the same h_p repeated m times, head N-m is next.
Shapes are fixed per step, so the static runner's captured step stays one shape per draft step.
"""

from __future__ import annotations

from alcheck.models.medusa import check_k
from alcheck.runner.drafting import propose_chain
from alcheck.runner.proposers.base import Proposer


class MedusaProposer(Proposer):
    def check_k(self, k: int) -> None:
        check_k(k, self.head.num_heads, self.head.path)

    def propose(self, ctx, reqs, inputs, features, starts, k):
        self.check_k(k)
        return propose_chain(self, ctx, reqs, inputs, features, starts, k)

    def propose_tree(self, ctx, reqs, inputs, features, starts, steps, topk, num_draft_tokens):
        raise ValueError("Medusa heads draft chains here (vLLM's top-1 Medusa): topk must be 1")

    def extend(self, ctx, batch, ids, features):
        return features  # the heads read the target's own state: nothing to run per token

    def step(self, ctx, batch, tokens, hidden):
        base, left = (hidden, self.head.num_heads) if hidden.dim() == 2 else (hidden[:, 0], hidden.shape[1])
        return base[:, None].expand(base.shape[0], left - 1, base.shape[-1])

    def logits(self, ctx, hidden):
        if hidden.dim() == 2:
            return self.head.head_logits(0, hidden)
        return self.head.head_logits(self.head.num_heads - hidden.shape[1], hidden[:, 0])
