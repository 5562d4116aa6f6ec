"""The proposer contract of a drafting method with no model (n-gram, suffix decoding).

Such a proposer reads only the committed tokens: the runner gives it no target features, binds
no draft KV (it has no attention layers) and never asks the target for auxiliary layers.

    start_generation()                           called when a runner's generate() begins (its
                                                 request ids start again at 0)
    propose_tokens(reqs, k) -> list[list[int]]   called after a request's prefill and after
                                                 each of its verification steps
    request_finished(req)                        called once, when a request ends (EOS or
                                                 max_tokens), in the order requests end

Drafts are ragged: request b may get any number of tokens from 0 to k. The runner verifies
1 + len(drafts[b]) tokens for it, so a request with no drafts takes a plain decoding step (one
target token, counted as a step that drafted nothing: `Request.drafted_steps`). Greedy drafts
mean a one-hot q, so at temperature > 0 acceptance is the onehot rule (runner/sampling.py)
whatever --draft-sampling says: under one-hot q the two rules are the same rule.

With `drafts_at_prefill` (transformers' and Spec-Bench's loops), propose_tokens is also asked
before the prefill, on the prompt alone, and the prefill forward verifies those drafts. That
forward then counts as a step: steps are target forwards, their accounting. Without it (vLLM's
loop) the prefill emits one token and is not a step.

Model-free proposers draft chains only (no trees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only
    from alcheck.runner.request import Request


class ModelFreeProposer:
    """The base of every model-free proposer; subclasses implement propose_tokens."""

    model_free = True  # what the runners test (getattr(proposer, "model_free", False))
    aux_layers: tuple[int, ...] = ()  # no target features wanted
    attention_layers: list = []  # no draft KV  # noqa: RUF012 (read-only, never mutated)
    drafts_at_prefill = False  # the prefill verifies drafts proposed from the prompt (see above)

    def start_generation(self) -> None:
        """A runner's generate() begins: one pass of a sweep (one K, repeat and turn). Methods with
        history across requests start it afresh, so a pass's drafts depend on its own requests
        alone (not on which passes ran before it in this process, nor on a resume); the default
        keeps nothing."""

    def propose_tokens(self, reqs: list[Request], k: int) -> list[list[int]]:
        """Up to k draft tokens per request, from req.token_ids (prompt + committed output,
        the token the target just emitted included). Fewer, or none, is allowed."""
        raise NotImplementedError

    def request_finished(self, req: Request) -> None:
        """A request ended (req.token_ids is final). Methods with history across requests
        (suffix decoding's global tree) learn from it here; the default keeps nothing."""


def is_model_free(proposer) -> bool:
    return getattr(proposer, "model_free", False)
