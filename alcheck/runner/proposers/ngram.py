"""The n-gram proposer: the batching around one matching rule (proposers/ngram_rules.py).

No model and no state: each call reads every request's committed tokens (prompt + output, the
token just emitted included) and applies the rule. transformers' rule also stops drafting when a
single token is left to generate (its `max_length == input_length + 1` check) and cuts drafts at
EOS, so it is given the request's EOS ids and what it has left.
"""

from __future__ import annotations

from alcheck.methods.ngram_options import TRANSFORMERS_RULE
from alcheck.runner.proposers.model_free import ModelFreeProposer
from alcheck.runner.proposers.ngram_rules import NgramSettings, propose


class NgramProposer(ModelFreeProposer):
    def __init__(self, settings: NgramSettings, eos_ids=()):
        self.settings = settings
        self.eos_ids = frozenset(eos_ids)
        self.drafts_at_prefill = settings.drafts_at_prefill

    def propose_tokens(self, reqs, k: int) -> list[list[int]]:
        out = []
        for r in reqs:
            if self.settings.rule == TRANSFORMERS_RULE and r.max_tokens - r.num_output_tokens <= 1:
                out.append([])
                continue
            out.append(propose(self.settings, r.token_ids, k, self.eos_ids))
        return out
