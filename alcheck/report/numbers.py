"""Numbers as the reports read and print them: a stored value counts as a number only when it is a
finite int or float (never a bool, NaN or inf), and a p-value prints as a dash when there is none.
A leaf of report/: table, compare, speedup and gate all read these."""

from __future__ import annotations

import math

DASH = "–"  # a value that is not there


def finite_number(x) -> float | None:
    """x as a float when it is a finite int or float; None for anything else (bool, NaN, inf, text)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def fmt_p(p) -> str:
    """A p-value to three places, <0.001 below that; a dash when there is none (None or NaN)."""
    if finite_number(p) is None:
        return DASH
    return "<0.001" if p < 0.001 else f"{p:.3f}"
