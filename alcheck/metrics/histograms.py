"""A request's speculative counts and the acceptance histograms engines report, both ways (pure Python).

The runner counts per request: `steps` verification steps, `accepted` drafts in all (the bonus or
recovered token excluded), and `accepted_per_pos[i]` = steps that accepted at least i+1 drafts.
Every step counts in full, even the tokens past EOS or max_tokens that the output drops.

Engines report h[j] = steps that accepted exactly j drafts. From it:
  steps = sum h[j],  accepted = sum j * h[j],  accepted_per_pos[i] = sum_{j > i} h[j]
AL = 1 + accepted/steps, the prefill token excluded - never SGLang's `spec_accept_length`, which
counts it. `alcheck serve` writes histograms (counts -> histogram); the engine client reads them
(histogram -> counts).
"""

from __future__ import annotations

from alcheck.errors import AlcheckError


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


def from_histogram(hist: list, k: int, where: str) -> tuple[int, int, list[int]]:
    """(steps, accepted, accepted_per_pos of length k) from an exact-count histogram.

    SGLang grows its histogram only to the largest j seen, so it may be shorter than k + 1; a
    longer one means the server drafts more than k tokens per step."""
    if not isinstance(hist, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hist
    ):
        raise AlcheckError(
            f"{where}: the acceptance histogram {hist!r} is not a list of counts: "
            "is this really the engine named by --engine?"
        )
    if len(hist) > k + 1 and any(hist[k + 1 :]):
        raise AlcheckError(
            f"{where}: a step accepted {max(j for j, h in enumerate(hist) if h)} drafts, "
            f"more than --ks {k}: the server drafts more tokens per step; pass its K to --ks"
        )
    hist = list(hist[: k + 1]) + [0] * max(0, k + 1 - len(hist))
    steps = sum(hist)
    accepted = sum(j * h for j, h in enumerate(hist))
    per_pos = [sum(hist[i + 1 :]) for i in range(k)]
    return steps, accepted, per_pos


def per_step(values, steps: int, accepted: int, k: int, where: str) -> list[int] | None:
    """A server's per-step accepted counts, checked against its totals; None when it sent none."""
    if values is None:
        return None
    if not isinstance(values, list) or not all(
        isinstance(a, int) and not isinstance(a, bool) and 0 <= a <= k for a in values
    ):
        raise AlcheckError(
            f"{where}: per_step_accepted {str(values)[:80]} is not a list of counts 0..{k}: "
            "is this really the engine named by --engine?"
        )
    if len(values) != steps or sum(values) != accepted:
        raise AlcheckError(
            f"{where}: per_step_accepted has {len(values)} steps accepting {sum(values)} drafts but "
            f"the acceptance histogram {steps} steps accepting {accepted}: the server's counts disagree"
        )
    return list(values)
