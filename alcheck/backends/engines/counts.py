"""Per-request counts from what engines report (pure Python).

Both engines' histograms count steps by how many drafts they accepted: h[j] = steps that accepted
exactly j drafts (the bonus or recovered token excluded). From it:
  steps = sum h[j],  accepted = sum j * h[j],  accepted_per_pos[i] = sum_{j > i} h[j]
(steps that accepted more than i drafts, the runner's per-position count). AL = 1 + accepted/steps,
the prefill token excluded - never SGLang's `spec_accept_length`, which counts it.
"""

from __future__ import annotations

from alcheck.errors import AlcheckError


def from_histogram(hist: list, k: int, where: str) -> tuple[int, int, list[int]]:
    """(steps, accepted, accepted_per_pos of length k) from an exact-count histogram.

    SGLang grows its histogram only to the largest j seen, so it may be shorter than k + 1; a
    longer one means the server drafts more than k tokens per step."""
    if not isinstance(hist, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hist):
        raise AlcheckError(f"{where}: the acceptance histogram {hist!r} is not a list of counts: "
                           "is this really the engine named by --engine?")
    if len(hist) > k + 1 and any(hist[k + 1:]):
        raise AlcheckError(f"{where}: a step accepted {max(j for j, h in enumerate(hist) if h)} drafts, "
                           f"more than --ks {k}: the server drafts more tokens per step; pass its K to --ks")
    hist = list(hist[: k + 1]) + [0] * max(0, k + 1 - len(hist))
    steps = sum(hist)
    accepted = sum(j * h for j, h in enumerate(hist))
    per_pos = [sum(hist[i + 1:]) for i in range(k)]
    return steps, accepted, per_pos
