"""One request's speculative counts, as each engine reports them (pure Python, no torch).

The runner counts per request: `steps` verification steps, `accepted` drafts in all (the bonus or
recovered token excluded), and `accepted_per_pos[i]` = steps that accepted at least i+1 drafts.
Every step counts in full, even the tokens past EOS or max_tokens that the output drops.
"""

from __future__ import annotations


def exact_histogram(steps: int, accepted_per_pos: list[int]) -> list[int]:
    """[j] = steps that accepted exactly j drafts, j = 0..K (vLLM's `acceptance_histogram`)."""
    at_least = [steps, *accepted_per_pos, 0]  # at_least[j] = steps with >= j accepted
    return [at_least[j] - at_least[j + 1] for j in range(len(accepted_per_pos) + 1)]


def grown_histogram(steps: int, accepted_per_pos: list[int]) -> list[int]:
    """SGLang's `spec_correct_drafts_histogram`: grown on demand to the largest j seen, so its
    length is max(j) + 1 (not K + 1), and [] for a request without verification steps."""
    hist = exact_histogram(steps, accepted_per_pos)
    while hist and hist[-1] == 0:
        hist.pop()
    return hist


def acceptance_length(steps: int, accepted: int) -> float:
    """1 + accepted / steps (the prefill token excluded); 1.0 without steps, as vLLM reports it."""
    return 1.0 + accepted / steps if steps else 1.0
