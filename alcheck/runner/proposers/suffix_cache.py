"""Suffix decoding's two kinds of tree and when each is fed: arctic-inference's
SuffixDecodingCache, driven the way vLLM's SuffixDecodingProposer drives it.

- A local tree per active request: its prompt when the request starts, then every token it
  commits. Dropped when the request ends.
- One global tree of responses: each request's committed tokens (not its prompt) go in as they
  are committed, so a request's own response and those of requests running beside it count at
  once. It keeps the responses of the last max_cached_requests requests started: starting one
  more evicts the oldest (first in, first out). max_cached_requests 0: no global tree.
- A draft is the better of the two trees' drafts by score (the local tree wins ties), from the
  last max_tree_depth tokens of prompt + response.

Because of the global tree a request's drafts depend on which requests ran before it and beside
it: a measurement states that order, or turns the global tree off. Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.runner.proposers.suffix_tree import Draft, SuffixTree


@dataclass(frozen=True)
class SuffixOptions:
    """vLLM's speculative_config suffix_decoding_* settings, with its defaults."""

    max_tree_depth: int = 24
    max_cached_requests: int = 10000  # 0: the global tree is off
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1

    def problems(self) -> list[str]:
        """What is wrong with the values, each as 'name value: why' (vLLM's own bounds)."""
        out = []
        if self.max_tree_depth < 1:
            out.append(f"max tree depth {self.max_tree_depth}: must be >= 1")
        if self.max_cached_requests < 0:
            out.append(
                f"max cached requests {self.max_cached_requests}: must be >= 0 (0 turns the global tree off)"
            )
        if not self.max_spec_factor >= 0:  # also NaN
            out.append(f"max spec factor {self.max_spec_factor}: must be >= 0")
        if not 0 <= self.min_token_prob <= 1:
            out.append(f"min token prob {self.min_token_prob}: must be in [0, 1]")
        return out

    def as_dict(self) -> dict:
        return {
            "max_tree_depth": self.max_tree_depth,
            "max_cached_requests": self.max_cached_requests,
            "max_spec_factor": self.max_spec_factor,
            "min_token_prob": self.min_token_prob,
        }


class SuffixCache:
    """Requests by any hashable id. Call start (prompt), then commit (tokens) and draft per step,
    then stop. A request id may start again once stopped: its old response leaves the global tree."""

    def __init__(self, options: SuffixOptions):
        self.options = options
        self._global = SuffixTree(options.max_tree_depth)
        self._local: dict = {}  # active request -> its SuffixTree
        self._context: dict = {}  # active request -> its last max_tree_depth tokens
        self._cached: dict = {}  # request -> global sequence id, oldest first
        self._next_seq = 0

    @property
    def active(self) -> set:
        return set(self._local)

    @property
    def cached(self) -> list:
        """Requests whose responses the global tree holds, oldest first."""
        return list(self._cached)

    def start(self, req, prompt) -> None:
        if req in self._local:
            raise ValueError(f"request {req!r} is already active")
        prompt = [int(t) for t in prompt]
        tree = SuffixTree(self.options.max_tree_depth)
        tree.extend(0, prompt)
        self._local[req] = tree
        self._context[req] = prompt[-self.options.max_tree_depth :]
        if self.options.max_cached_requests == 0:
            return
        if req in self._cached:
            self._evict(req)
        self._cached[req] = self._next_seq
        self._next_seq += 1
        while len(self._cached) > self.options.max_cached_requests:
            self._evict(next(iter(self._cached)))  # the oldest; never the one just started (max >= 1)

    def commit(self, req, tokens) -> None:
        """Tokens the request has just committed (accepted drafts and the target's own token)."""
        tokens = [int(t) for t in tokens]
        self._local[req].extend(0, tokens)
        if req in self._cached:  # it may have been evicted while still running
            self._global.extend(self._cached[req], tokens)
        depth = self.options.max_tree_depth
        self._context[req] = (self._context[req] + tokens)[-depth:]

    def draft(self, req, max_spec_tokens: int) -> Draft:
        o = self.options
        context = self._context[req]
        local = self._local[req].speculate(context, max_spec_tokens, o.max_spec_factor, o.min_token_prob)
        shared = self._global.speculate(context, max_spec_tokens, o.max_spec_factor, o.min_token_prob)
        return local if local.score >= shared.score else shared

    def stop(self, req) -> None:
        """The request is done: its prompt goes; its response stays in the global tree."""
        del self._local[req]
        del self._context[req]

    def _evict(self, req) -> None:
        self._global.remove(self._cached.pop(req))
