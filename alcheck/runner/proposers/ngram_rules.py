"""The n-gram matching rules (METHODS-NOTES section 2): pure functions over a token list.

Each rule reads the committed context (prompt + output so far) and returns the draft: up to k
tokens, possibly none. "n-gram AL" depends on the rule, so every rule engines ship is here:

- vllm (vLLM v1, `_find_longest_matched_ngram_and_propose_tokens`): the longest n in
  [min_n, max_n] whose last-n suffix occurs earlier; ties go to the earliest occurrence; the
  copy may overlap the suffix but may not be the suffix itself; the next min(k, what is left)
  tokens, also cut so the sequence stays within max_model_len; none without a match.
- transformers (`PromptLookupCandidateGenerator`): n from min(max_n, len - 1) down to min_n
  (transformers itself goes down to 1); the earliest match that has at least one following
  token; up to k of them, cut before the first EOS (a draft cut to nothing is no draft).
- spec-bench (Spec-Bench's PLD, `find_candidate_pred_tokens`): n from max_n down to min_n; the
  earliest match with a FULL k-token continuation that ends before the suffix starts; with no
  match, one dummy token (id 100) is verified anyway.

Torch-free; numpy for the window comparisons (a rule runs on every request at every step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alcheck.methods.ngram_options import SPEC_BENCH_RULE, TRANSFORMERS_RULE, VLLM_RULE

SPEC_BENCH_DUMMY = 100  # the token Spec-Bench verifies when nothing matches


@dataclass(frozen=True, slots=True)
class NgramSettings:
    """One rule and its options, as the run config and the fingerprint record them."""

    rule: str = VLLM_RULE  # methods/ngram_options.py RULES (--ngram-rule)
    min_n: int = 5  # --prompt-lookup-min (vLLM's default when neither is given)
    max_n: int = 5  # --prompt-lookup-max
    max_model_len: int | None = None  # vllm: no draft past it (None: no cap)

    @property
    def drafts_at_prefill(self) -> bool:
        """transformers and Spec-Bench verify drafts proposed from the prompt in their first
        forward (the prefill is a step); vLLM drafts only after the first token."""
        return self.rule != VLLM_RULE


def _occurrences(tokens: np.ndarray, n: int, last_start: int) -> np.ndarray:
    """Starts s in [0, last_start] with tokens[s:s+n] == tokens[-n:], ascending."""
    if last_start < 0:
        return np.empty(0, dtype=np.int64)
    total = tokens.shape[0]
    hit = np.ones(last_start + 1, dtype=bool)
    for j in range(n):
        hit &= tokens[j : j + last_start + 1] == tokens[total - n + j]
    return np.flatnonzero(hit)


def vllm_rule(tokens, min_n: int, max_n: int, k: int, max_model_len: int | None = None) -> list[int]:
    total = len(tokens)
    if total < min_n:
        return []
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if k <= 0:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        # a copy starting at s is followed by token s+n, which must exist (s <= total-1-n), so
        # it is never the suffix itself (at total-n) but may overlap it
        found = _occurrences(arr, n, total - 1 - n)
        if found.size:
            start = int(found[0]) + n
            return arr[start : start + min(k, total - start)].tolist()
    return []


def transformers_rule(tokens, min_n: int, max_n: int, k: int, eos_ids=frozenset()) -> list[int]:
    total = len(tokens)
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        found = _occurrences(arr, n, total - 1 - n)  # the earliest with >= 1 following token
        if found.size:
            start = int(found[0]) + n
            draft = arr[start : start + k].tolist()
            for i, t in enumerate(draft):
                if t in eos_ids:
                    return draft[:i]
            return draft
    return []


def spec_bench_rule(tokens, min_n: int, max_n: int, k: int) -> list[int]:
    total = len(tokens)
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(max_n, total), min_n - 1, -1):
        # start_idx = s + n must be < total - n, and s + n + k <= total
        last = min(total - 2 * n - 1, total - n - k)
        found = _occurrences(arr, n, last)
        if found.size:
            start = int(found[0]) + n
            return arr[start : start + k].tolist()
    return [SPEC_BENCH_DUMMY]


def propose(settings: NgramSettings, tokens, k: int, eos_ids=frozenset()) -> list[int]:
    """The draft for one context under settings.rule."""
    if settings.rule == VLLM_RULE:
        return vllm_rule(tokens, settings.min_n, settings.max_n, k, settings.max_model_len)
    if settings.rule == TRANSFORMERS_RULE:
        return transformers_rule(tokens, settings.min_n, settings.max_n, k, eos_ids)
    if settings.rule == SPEC_BENCH_RULE:
        return spec_bench_rule(tokens, settings.min_n, settings.max_n, k)
    raise ValueError(f"unknown n-gram rule {settings.rule!r}")
