"""Per-request counts from what engines report (pure Python).

Both engines' histograms count steps by how many drafts they accepted: h[j] = steps that accepted
exactly j drafts (the bonus or recovered token excluded). From it:
  steps = sum h[j],  accepted = sum j * h[j],  accepted_per_pos[i] = sum_{j > i} h[j]
(steps that accepted more than i drafts, the runner's per-position count). AL = 1 + accepted/steps,
the prefill token excluded - never SGLang's `spec_accept_length`, which counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.backends.base import RequestCounts
from alcheck.errors import AlcheckError


@dataclass(slots=True)
class EngineCounts(RequestCounts):
    """RequestCounts plus the per-step trace an engine may report (vLLM's `per_step_accepted` with
    --per-request-spec-decode-metrics detailed): accepted drafts of each verification step, in
    order; None when the server gives totals only. (Phase 2 moves the field into RequestCounts.)"""

    per_step_accepted: list[int] | None = None


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


def per_step(values, steps: int, accepted: int, k: int, where: str) -> list[int] | None:
    """A server's per-step accepted counts, checked against its totals; None when it sent none."""
    if values is None:
        return None
    if not isinstance(values, list) or not all(isinstance(a, int) and not isinstance(a, bool) and 0 <= a <= k
                                               for a in values):
        raise AlcheckError(f"{where}: per_step_accepted {str(values)[:80]} is not a list of counts 0..{k}: "
                           "is this really the engine named by --engine?")
    if len(values) != steps or sum(values) != accepted:
        raise AlcheckError(f"{where}: per_step_accepted has {len(values)} steps accepting {sum(values)} drafts but "
                           f"the acceptance histogram {steps} steps accepting {accepted}: the server's counts disagree")
    return list(values)
