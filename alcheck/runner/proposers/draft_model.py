"""A draft language model's proposer (METHODS-NOTES section 4, vLLM's draft_model).

The draft keeps its own paged KV through the request's block table, and its KV must equal its
own plain decoding's: token x_p at position p, from the prompt's first token on. The runners hand
every proposer EAGLE's alignment (token x_{p+1} at position p, with the target's feature h_p), so
this proposer shifts it by one position:

- prefill (start 0): x_0..x_n at positions 0..n: the prompt plus the target's first token;
- step: the verified drafts plus the target's token (vLLM's re-feed of the verified tokens and
  the bonus token) at the positions they now hold, n..n+a, after x_{n-1} at n-1 went in last step;
- then K-1 single-token steps feed its own argmax back, one position further each.

Its writes reach one position further than an EAGLE head's: n+a+K-1 at most, inside the
lookahead the runners allocate (1+K new tokens plus K). The target's features are not used.
Chains only: a tree would need the same shift in its scratch layout.
"""

from __future__ import annotations

from alcheck.runner.drafting import propose_chain
from alcheck.runner.proposers.base import Proposer


class DraftModelProposer(Proposer):
    # a draft LM consumes x_p at p: its draft positions sit one after an EAGLE head's (the static
    # runner's device step reads this; runner/static/chain.py)
    position_shift = 1

    def propose(self, ctx, reqs, inputs, features, starts, k):
        inputs = [[_first_token(r), *x] if s == 0 else list(x) for r, x, s in zip(reqs, inputs, starts)]
        starts = [0 if s == 0 else s + 1 for s in starts]
        return propose_chain(self, ctx, reqs, inputs, features, starts, k)

    def propose_tree(self, ctx, reqs, inputs, features, starts, steps, topk, num_draft_tokens):
        raise ValueError("a draft model drafts chains: topk must be 1")

    def extend(self, ctx, batch, ids, features):
        return self.head(ids, batch)

    def step(self, ctx, batch, tokens, hidden):
        return self.head(tokens, batch)

    def logits(self, ctx, hidden):
        return self.head.compute_logits(hidden)


def _first_token(req) -> int:
    # the KV budget's warm-up drafts for placeholder requests (None) over dummy tokens
    return 0 if req is None else req.token_ids[0]
