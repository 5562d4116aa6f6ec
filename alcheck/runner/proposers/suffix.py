"""The suffix decoding proposer: the runner's model-free contract (proposers/model_free.py) around
one SuffixCache (proposers/suffix_cache.py), fed as vLLM's SuffixDecodingProposer feeds arctic's.

- Each runner generate() (one pass) starts with an empty cache: the runner's request ids start
  again at 0, and a pass's drafts depend on its own requests alone.
- A request's first call (after its prefill) starts it with its prompt.
- Each call commits the tokens the request committed since the last (the prefill's token, then
  each step's accepted drafts and target token), then drafts from its last max_tree_depth tokens.
- Requests are handled in the order the runner lists them, so within one step a request sees the
  tokens committed just before by the requests listed ahead of it (through the global tree).
- When a request ends, its last step's tokens go in and it stops (its prompt tree goes; its
  response stays in the global tree). vLLM also feeds in the tokens its last step sampled past a
  stop or max_tokens; here the response is what the request emitted.
"""

from __future__ import annotations

from alcheck.runner.proposers.model_free import ModelFreeProposer
from alcheck.runner.proposers.suffix_cache import SuffixCache, SuffixOptions


class SuffixProposer(ModelFreeProposer):
    def __init__(self, options: SuffixOptions):
        self.options = options
        self.start_generation()

    def start_generation(self) -> None:
        self.cache = SuffixCache(self.options)
        self._seen: dict[int, int] = {}  # running request -> tokens of it the cache holds

    def _catch_up(self, req) -> None:
        if req.request_id not in self._seen:
            prompt = req.token_ids[: req.num_prompt_tokens]
            self.cache.start(req.request_id, prompt)
            self._seen[req.request_id] = len(prompt)
        new = req.token_ids[self._seen[req.request_id] :]
        if new:
            self.cache.commit(req.request_id, new)
            self._seen[req.request_id] = len(req.token_ids)

    def propose_tokens(self, reqs, k: int) -> list[list[int]]:
        out = []
        for req in reqs:
            self._catch_up(req)
            out.append(self.cache.draft(req.request_id, k).token_ids[:k])
        return out

    def request_finished(self, req) -> None:
        self._catch_up(req)
        self.cache.stop(req.request_id)
        del self._seen[req.request_id]
