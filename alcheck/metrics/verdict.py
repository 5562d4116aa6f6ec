"""Verdicts: a run against a published reference value, and run A against run B.

Run vs reference (docs/design.md), per K:
    diff = al_mean - ref, spread = max(al_repeats) - min(al_repeats)
    "below"  when ref > al_ci95[1] and |diff| > spread
    "above"  when ref < al_ci95[0] and |diff| > spread
    "within noise" otherwise (also when the run has no CI)

Run A vs run B (`alcheck compare`), from the paired bootstrap CI of diff = AL(B) - AL(A):
    "B higher" when the CI lies entirely above 0, "A higher" when entirely below 0,
    "no detectable change" otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

WITHIN_NOISE = "within noise"
BELOW = "below"
ABOVE = "above"

NO_CHANGE = "no detectable change"
A_HIGHER = "A higher"
B_HIGHER = "B higher"


def _finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def repeat_spread(al_repeats: Sequence[float | None] | None) -> float:
    values = [float(x) for x in (al_repeats or []) if _finite(x)]
    return max(values) - min(values) if values else 0.0


def reference_verdict(
    al_mean: float, al_ci95: Sequence[float | None] | None,
    al_repeats: Sequence[float | None] | None, ref: float,
) -> str:
    """`within noise` / `below` / `above` for one K (see module docstring)."""
    if not _finite(al_mean) or not _finite(ref):
        return WITHIN_NOISE
    diff = float(al_mean) - float(ref)
    spread = repeat_spread(al_repeats)
    lo, hi = (list(al_ci95) + [None, None])[:2] if al_ci95 is not None else (None, None)
    if _finite(hi) and ref > hi and abs(diff) > spread:
        return BELOW
    if _finite(lo) and ref < lo and abs(diff) > spread:
        return ABOVE
    return WITHIN_NOISE


def compare_verdict(diff_ci95: Sequence[float | None] | None) -> str:
    """Verdict from the CI of diff = AL(B) - AL(A)."""
    if diff_ci95 is None:
        return NO_CHANGE
    lo, hi = diff_ci95
    if _finite(lo) and lo > 0:
        return B_HIGHER
    if _finite(hi) and hi < 0:
        return A_HIGHER
    return NO_CHANGE
