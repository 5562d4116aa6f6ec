"""`alcheck gate --per-position` and `--relative-tolerance`: what the gate adds to its K rows.

--per-position: per gated (dataset, K), the conditional acceptance at each draft position
(metrics/positions.py: accepted there among the steps that reached it), run − baseline on the
questions both measured, with the run-to-run noise the K rows use. A position fails when its drop
is credible and larger than --position-tolerance. The gated K rows and their positions are ONE
Holm family (one-sided), so the gate fails falsely at most 5% of the time whatever it looks at.
It needs per-question counts on both sides (a baseline run with questions.csv); a side whose rows
carry no per-position counts (an old import) is gated on AL alone, with one note.

--relative-tolerance r: a K row may fall by r x the baseline's AL (vLLM's CI allows 2% of AL),
instead of a fixed --tolerance, and is still judged under the noise model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from alcheck.errors import AlcheckError
from alcheck.metrics.noise import Noise, declared_deterministic
from alcheck.metrics.positions import (
    TOO_FEW_STEPS,
    PositionChange,
    has_position_counts,
    paired_positions,
)
from alcheck.report.positions import no_counts_note


@dataclass
class GatePosition:
    """One draft position of one gated K: the run's conditional acceptance against the baseline's."""

    k: int
    position: int  # 1-based
    conditional: float | None  # the run's: accepted at this position among the steps that reached it
    baseline: float | None  # the baseline's
    diff: float | None  # conditional - baseline
    unconditional: float | None  # the run's, among all steps
    baseline_unconditional: float | None
    steps_reached: int  # the run's steps that reached this position
    baseline_steps_reached: int
    judged: bool  # enough steps reached it on both sides
    ci95: tuple[float, float] | None = None
    p_value: float | None = None
    regression: bool = False
    credible: bool = False
    noise: Noise | None = None
    dataset: str | None = None

    @property
    def where(self) -> str:
        return (
            f"{self.dataset} K={self.k} position {self.position}"
            if self.dataset
            else (f"K={self.k} position {self.position}")
        )

    @property
    def status(self) -> str:
        if not self.judged:
            return TOO_FEW_STEPS
        if self.regression:
            return "REGRESSION"
        if self.credible and self.diff is not None and self.diff < 0:
            return "pass (drop within tolerance)"
        return "pass"

    @property
    def basis(self) -> str:
        return self.noise.basis if self.noise is not None else "no noise estimate"


def check_tolerances(relative, position) -> tuple[float | None, float]:
    """--relative-tolerance (None, or a fraction in [0, 1)) and --position-tolerance (a rate
    difference in [0, 1)), else one line (exit 2)."""
    for name, value in (("--relative-tolerance", relative), ("--position-tolerance", position)):
        if value is None and name == "--relative-tolerance":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise AlcheckError(
                f"{name} {value!r} is invalid: pass a fraction from 0 to below 1 (e.g. 0.02"
                f"{' for 2% of the baseline AL' if name == '--relative-tolerance' else ''})"
            )
    return (None if relative is None else float(relative)), float(position)


def require_counts(base, run) -> None:
    """--per-position compares per-question counts: a baseline without them is bad input."""
    if not base.has_questions or not run.has_questions:
        side = "the baseline" if not base.has_questions else "the run"
        raise AlcheckError(
            f"--per-position needs per-question counts on both sides, and {side} has no questions.csv "
            f"({base.name if side == 'the baseline' else 'a bare run.json'}): gate against a baseline run "
            "directory with its questions.csv, or drop --per-position"
        )


def measure_positions(view, base_view, k: int, label) -> tuple[list[GatePosition], tuple[bool, bool]]:
    """The run's positions at K against the baseline's, and (baseline lacks counts, run lacks counts)."""
    qb, qr = base_view.run.questions_for(k), view.questions_for(k)
    lacks = (bool(len(qb)) and not has_position_counts(qb), bool(len(qr)) and not has_position_counts(qr))
    if any(lacks) or not len(qb) or not len(qr):
        return [], lacks
    changes = paired_positions(
        qb,
        qr,
        k,
        declared_a=declared_deterministic(base_view.run.meta),
        declared_b=declared_deterministic(view.meta),
    )
    return [_position(k, c, label) for c in changes or ()], lacks


def _position(k: int, c: PositionChange, label) -> GatePosition:
    return GatePosition(
        k,
        c.position,
        c.conditional_b,
        c.conditional_a,
        c.diff,
        c.unconditional_b,
        c.unconditional_a,
        c.reached_b,
        c.reached_a,
        c.judged,
        noise=c.noise,
        dataset=label,
    )


def apply(positions: list[GatePosition], decisions) -> None:
    """Set each judged position's decision (decisions in the order of the judged positions)."""
    for p, d in zip([p for p in positions if p.judged], decisions):
        p.ci95, p.p_value, p.regression, p.credible = d.ci95(), d.p_value, d.reported, d.credible


def lacking_note(lacks: list[tuple[bool, bool]]) -> str | None:
    return no_counts_note(
        any(b for b, _ in lacks), any(r for _, r in lacks), names=("the baseline", "the run")
    )


def allowed_drop(tolerance: float, relative: float | None, baseline_al: float) -> float:
    """The AL a K row may fall by: a fixed tolerance, or a fraction of the baseline's AL."""
    if relative is None:
        return tolerance
    return relative * baseline_al if math.isfinite(baseline_al) else tolerance
