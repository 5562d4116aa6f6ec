"""One decision rule for gate, compare and the verdict against a published reference.

Per K there is a difference d (run B - run A, run - baseline, or run - reference) and its
run-to-run noise (metrics/noise.py: se and degrees of freedom, or deterministic). Then:

1. p-value of "no change" from t = d / se against Student's t (normal when df is None).
   Deterministic measurements (se == 0): p = 0 when |d| > NUMERIC_TOL, else 1.
2. Holm's step-down over the Ks of one comparison (all gated Ks; all Ks of compare; all Ks of
   one reference), so the family-wise false-alarm rate across Ks is <= ALPHA.
3. A change is REPORTED only when it is credible (Holm rejects "no change") AND larger than
   the tolerance. Credible but smaller than the tolerance is "within tolerance"; not credible
   is "within noise" / "no detectable change" / pass.

The gate tests one side (a drop: d < 0); compare and the reference verdict test both.
Measured error rates of this rule: bench/bench_stats.py -> results/bench-stats.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from alcheck.metrics.distributions import t_cdf, t_quantile
from alcheck.metrics.noise import Noise
from alcheck.metrics.stats import MIN_QUESTIONS
from alcheck.options import DEFAULT_TOLERANCE

ALPHA = 0.05  # family-wise false-alarm rate across the Ks of one comparison
NUMERIC_TOL = 1e-9  # differences below this are float noise in a ratio of integer counts
SIDES = ("two-sided", "less", "greater")

# reference verdicts
WITHIN_NOISE = "within noise"
WITHIN_TOLERANCE = "within tolerance"
BELOW = "below"
ABOVE = "above"
NO_NOISE = "no noise estimate"
NOT_COMPARABLE = "not comparable"  # the reference was measured with other settings
# no noise estimate because one question (and one repeat) shows neither run-to-run noise nor the spread
# between prompts
TOO_FEW_QUESTIONS = "too few questions to judge"
# compare verdicts
NO_CHANGE = "no detectable change"
A_HIGHER = "A higher"
B_HIGHER = "B higher"


@dataclass(frozen=True)
class Decision:
    diff: float
    noise: Noise | None
    p_value: float
    credible: bool  # Holm rejects "no change" at the family-wise ALPHA
    beyond_tolerance: bool  # the difference exceeds the tolerance in the tested direction

    @property
    def reported(self) -> bool:
        return self.credible and self.beyond_tolerance

    def ci95(self) -> tuple[float, float] | None:
        """d ± t(97.5%) se: the 95% interval of the difference under run-to-run noise."""
        return noise_interval(self.diff, self.noise)


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def noise_interval(diff: float, noise: Noise | None, level: float = 0.95) -> tuple[float, float] | None:
    if noise is None or not _finite(diff):
        return None
    half = t_quantile(0.5 + level / 2.0, noise.df) * noise.se
    return (diff - half, diff + half)


def p_value(diff: float, noise: Noise | None, side: str = "two-sided") -> float:
    """p-value of "no change" for one K (see the module docstring)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    if noise is None or not _finite(diff) or not _finite(noise.se):
        return 1.0
    if noise.se == 0:
        toward = {"two-sided": abs(diff), "less": -diff, "greater": diff}[side]
        return 0.0 if toward > NUMERIC_TOL else 1.0
    t = diff / noise.se
    if side == "less":
        return t_cdf(t, noise.df)
    if side == "greater":
        return t_cdf(-t, noise.df)
    return min(1.0, 2.0 * t_cdf(-abs(t), noise.df))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def _beyond(diff: float, tolerance: float, side: str) -> bool:
    if not _finite(diff):
        return False
    if side == "less":
        return diff < -tolerance
    if side == "greater":
        return diff > tolerance
    return abs(diff) > tolerance


def decide(
    diffs: Sequence[float],
    noises: Sequence[Noise | None],
    *,
    tolerance: float | Sequence[float] = DEFAULT_TOLERANCE,
    side: str = "two-sided",
    alpha: float = ALPHA,
) -> list[Decision]:
    """The decision for every K of one comparison (Holm across them)."""
    if len(diffs) != len(noises):
        raise ValueError("one noise estimate per difference")
    # one tolerance for all, or one per difference (a relative tolerance, AL rows beside position rows)
    tolerances = list(tolerance) if isinstance(tolerance, Sequence) else [tolerance] * len(diffs)
    if len(tolerances) != len(diffs):
        raise ValueError("one tolerance per difference")
    for t in tolerances:
        if not (_finite(t) and t >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {t!r}")
    pvals = [p_value(d, n, side) for d, n in zip(diffs, noises)]
    credible = holm(pvals, alpha)
    return [
        Decision(float(d) if _finite(d) else float("nan"), n, p, c, _beyond(d, t, side))
        for d, n, p, c, t in zip(diffs, noises, pvals, credible, tolerances)
    ]


def too_few_questions(noise: Noise | None, n_questions: int | None) -> bool:
    """No noise estimate, and too few questions for one (None: the count is not known)."""
    return noise is None and n_questions is not None and n_questions < MIN_QUESTIONS


def reference_verdict(decision: Decision, n_questions: int | None = None) -> str:
    """below / above / within tolerance / within noise (run - reference)."""
    if too_few_questions(decision.noise, n_questions):
        return TOO_FEW_QUESTIONS
    if decision.noise is None:
        return NO_NOISE
    if not decision.credible:
        return WITHIN_NOISE
    if not decision.beyond_tolerance:
        return WITHIN_TOLERANCE
    return BELOW if decision.diff < 0 else ABOVE


def compare_verdict(decision: Decision, n_questions: int | None = None) -> str:
    """B higher / A higher / within tolerance / no detectable change (diff = B - A)."""
    if too_few_questions(decision.noise, n_questions):
        return TOO_FEW_QUESTIONS
    if decision.noise is None or not decision.credible:
        return NO_CHANGE
    if not decision.beyond_tolerance:
        return WITHIN_TOLERANCE
    return B_HIGHER if decision.diff > 0 else A_HIGHER
