"""Verdicts per draft position for `compare` and `gate --per-position` (issue 32).

Per (dataset, K) row both runs measured: metrics/positions.py's conditional acceptance at each
position 1..K (accepted at i among the steps that reached i), B − A of it, and its run-to-run
noise on the questions both measured. The verdict follows the one rule of metrics/verdict.py:
Holm across every judged (dataset, K, position) of the comparison (family-wise false alarms
<= 5% across K x positions) and a change reported only when it is credible AND larger than the
position tolerance. A position fewer than MIN_REACHED steps reached in either run is "too few
steps to judge" and is left out of the family; it never gets a verdict.

The first position that changed (at a K) is the lowest one whose verdict is a change: the
position the fault starts at, since the conditional rates after it do not move with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.metrics import verdict as V
from alcheck.metrics.positions import TOO_FEW_STEPS, PositionChange, has_position_counts
from alcheck.report.table import DASH, MIN_HIDDEN_TAIL, fmt, fmt_ci, fmt_signed

CHANGED = (V.A_HIGHER, V.B_HIGHER)
NO_COUNTS = (
    "{sides} no per-position counts (accepted_per_pos is empty: an import whose file has neither "
    "per-step counts nor a histogram): judged on AL alone"
)


@dataclass
class PositionVerdict:
    """One draft position of one K row: both runs' rates and the verdict on the conditional one."""

    position: int  # 1-based draft position
    conditional_a: float | None  # accepted at this position among the steps that reached it
    conditional_b: float | None
    diff: float | None  # conditional_b - conditional_a
    ci95: tuple[float, float] | None  # 95% CI of diff under run-to-run noise
    p_value: float | None
    verdict: str  # the K rows' words, or "too few steps to judge"
    unconditional_a: float | None  # accepted at this position among all steps (run.json's per_position)
    unconditional_b: float | None
    steps_reached_a: int
    steps_reached_b: int
    noise: dict | None = None  # Noise.to_dict()

    @property
    def changed(self) -> bool:
        return self.verdict in CHANGED


def lacking_counts(frames_a, frames_b) -> tuple[bool, bool]:
    """(A lacks, B lacks) per-position counts in any of the given questions.csv frames."""
    return (
        any(len(f) and not has_position_counts(f) for f in frames_a),
        any(len(f) and not has_position_counts(f) for f in frames_b),
    )


def no_counts_note(lacks_a: bool, lacks_b: bool, names=("A", "B")) -> str | None:
    """The one note for a comparison one of whose runs has no per-position counts."""
    sides = [name for name, lacks in zip(names, (lacks_a, lacks_b)) if lacks]
    if not sides:
        return None
    return NO_COUNTS.format(sides=f"{' and '.join(sides)} {'have' if len(sides) > 1 else 'has'}")


def judge(
    rows: list[list[PositionChange] | None],
    *,
    tolerance: float,
    side: str,
    n_questions: list[int | None],
    word,
) -> list[list[PositionVerdict]]:
    """Verdicts for every position of every row (None: no positions), Holm across all judged ones.

    word(decision, n_questions) -> the verdict text of a judged position (compare's or gate's)."""
    judged = [(r, c) for r, changes in enumerate(rows) for c in changes or () if c.judged]
    decisions = V.decide(
        [c.diff for _, c in judged], [c.noise for _, c in judged], tolerance=tolerance, side=side
    )
    by_cell = {(r, c.position): d for (r, c), d in zip(judged, decisions)}
    out = []
    for r, changes in enumerate(rows):
        verdicts = []
        for c in changes or ():
            d = by_cell.get((r, c.position))
            verdicts.append(
                PositionVerdict(
                    c.position,
                    c.conditional_a,
                    c.conditional_b,
                    c.diff,
                    d.ci95() if d is not None else None,
                    d.p_value if d is not None else None,
                    word(d, n_questions[r]) if d is not None else TOO_FEW_STEPS,
                    c.unconditional_a,
                    c.unconditional_b,
                    c.reached_a,
                    c.reached_b,
                    c.noise.to_dict() if c.noise is not None else None,
                )
            )
        out.append(verdicts)
    return out


def listed(verdicts: list[PositionVerdict]) -> list[PositionVerdict]:
    """The positions a table lists: a tail of MIN_HIDDEN_TAIL or more that no step reached in
    either run (--ks 100 stops accepting long before position 100) is left out; unlisted_note says so."""
    end = len(verdicts)
    while end and verdicts[end - 1].steps_reached_a == verdicts[end - 1].steps_reached_b == 0:
        end -= 1
    return verdicts[:end] if len(verdicts) - end >= MIN_HIDDEN_TAIL else verdicts


def unlisted_note(where: str, verdicts: list[PositionVerdict]) -> str | None:
    shown = len(listed(verdicts))
    if shown == len(verdicts):
        return None
    return f"{where}: positions {shown + 1}–{len(verdicts)} were reached by no step in either run: not listed"


def first_changed(verdicts: list[PositionVerdict]) -> PositionVerdict | None:
    return next((v for v in verdicts if v.changed), None)


def first_changed_line(where: str, v: PositionVerdict) -> str:
    """'K=3: first changed position 3: conditional acceptance 0.700 -> 0.612 (B − A -0.088, ...)'."""
    return (
        f"{where}: first changed position {v.position}: conditional acceptance {fmt(v.conditional_a, 3)} "
        f"-> {fmt(v.conditional_b, 3)} (B − A {fmt_signed(v.diff, 3)}, 95% CI {fmt_ci(v.ci95)}; "
        f"unconditional {fmt(v.unconditional_a, 3)} -> {fmt(v.unconditional_b, 3)})"
    )


def position_cells(v: PositionVerdict, fmt_p) -> list[str]:
    """A position's table cells: position, conditional A, B, B − A, CI, p, verdict, unconditional A, B."""
    return [
        str(v.position),
        fmt(v.conditional_a, 3),
        fmt(v.conditional_b, 3),
        fmt_signed(v.diff, 3),
        fmt_ci(v.ci95),
        fmt_p(v.p_value) if v.p_value is not None else DASH,
        v.verdict,
        fmt(v.unconditional_a, 3),
        fmt(v.unconditional_b, 3),
        f"{v.steps_reached_a} / {v.steps_reached_b}",
    ]


POSITION_HEADER = [
    "position",
    "cond. A",
    "cond. B",
    "B − A",
    "95% CI (run-to-run)",
    "p",
    "verdict",
    "uncond. A",
    "uncond. B",
    "steps reached A / B",
]
POSITION_RULE = (
    "Per position: conditional acceptance = accepted at that position among the steps that reached "
    "it (a change is located where it starts: the positions after it keep theirs); unconditional = "
    "among all steps. Verdicts on the conditional rate under run-to-run noise (two-sided, Holm across "
    f"K × positions, {V.ALPHA:.0%} family-wise); 'A/B higher' also needs |B − A| > {{t:g}}; a position "
    "fewer than {m} steps reached in a run is not judged."
)
