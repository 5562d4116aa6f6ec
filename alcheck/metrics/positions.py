"""Acceptance per draft position, conditional on reaching it, with its run-to-run noise.

A verification step at K that accepts a drafts has reached draft positions 1..min(a + 1, K) and
accepted positions 1..a. questions.csv's accepted_per_pos holds n_i = steps with a >= i for
i = 1..K; n_0 = steps. Per position i:
- unconditional rate u_i = Σ n_i / Σ n_0 = P(a >= i): what run.json's per_position shows;
- conditional rate  c_i = Σ n_i / Σ n_(i-1) = P(a >= i | a >= i - 1): accepted at i among the
  steps that reached i.
A fault that starts at draft step i (a wrong RoPE offset there, a KV write past a block edge)
lowers c_i; the positions after it keep their conditional rates, because a step rejected at i
never reaches i + 1. Every u_j with j >= i falls with it. So c_i locates where a change starts and
u_i says how much of the output it touches.

Each c_i is a ratio of sums over (repeat, question) cells, Σ n_i / Σ n_(i-1), with the same
structure as AL = Σ E / Σ S. The run-to-run noise of metrics/noise.py (repeats, step-level noise,
paired questions, deterministic runs) therefore applies unchanged with E := n_i and S := n_(i-1).

A position that fewer than MIN_REACHED steps reached in a run is not judged: "too few steps to
judge". A run whose rows carry no per-position counts (an import whose file has neither per-step
counts nor a histogram writes accepted_per_pos empty) has no positions to judge at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from alcheck.metrics.acceptance import parse_per_pos
from alcheck.metrics.keys import common_units, question_keys
from alcheck.metrics.noise import Noise, paired_noise

MIN_REACHED = 10  # steps a run must have that reached a position for that position to be judged
DEFAULT_POSITION_TOLERANCE = 0.02  # conditional acceptance rate (a fraction of the steps that reached it)
TOO_FEW_STEPS = "too few steps to judge"


def has_position_counts(questions: pd.DataFrame) -> bool:
    """Does every row carry its per-position counts (accepted_per_pos not empty)?"""
    if not len(questions) or "accepted_per_pos" not in questions.columns:
        return False
    cells = questions["accepted_per_pos"]
    return bool(cells.map(lambda v: isinstance(v, (list, tuple, np.ndarray)) or not _blank(v)).all())


def _blank(value) -> bool:
    if value is None:
        return True
    try:
        if pd.isna(value):
            return True
    except (TypeError, ValueError):
        return False
    return isinstance(value, str) and not value.strip()


def reach_matrix(questions_k: pd.DataFrame, k: int) -> tuple[np.ndarray, np.ndarray]:
    """questions.csv rows of ONE K -> (question ids, N[r, q, j]) with N[..., j] = steps that
    accepted at least j drafts, j = 0..K (N[..., 0] = steps). Turns are summed per question; a
    (repeat, question) the rows lack counts 0, as noise.question_matrix counts it."""
    per_pos = parse_per_pos(questions_k["accepted_per_pos"], k)
    columns = [f"n{j}" for j in range(k + 1)]
    frame = pd.DataFrame(
        np.column_stack([questions_k["steps"].to_numpy(dtype=np.int64), per_pos]).astype(float),
        columns=columns,
    )
    frame["repeat"] = questions_k["repeat"].to_numpy()
    frame["question_id"] = question_keys(questions_k).astype(str).to_numpy()
    sums = frame.groupby(["repeat", "question_id"], sort=True)[columns].sum()
    cubes = [sums[c].unstack("question_id", fill_value=0.0) for c in columns]
    ids = cubes[0].columns.to_numpy(dtype=str)
    return ids, np.stack([c.to_numpy(dtype=float) for c in cubes], axis=-1)


@dataclass(frozen=True)
class PositionChange:
    """Position i (1-based) of one K, run A against run B on the same questions."""

    position: int
    conditional_a: float | None  # accepted at i among the steps that reached i
    conditional_b: float | None
    unconditional_a: float | None  # accepted at i among all steps
    unconditional_b: float | None
    reached_a: int  # steps that reached position i (all repeats)
    reached_b: int
    diff: float | None  # conditional_b - conditional_a (None: too few steps)
    noise: Noise | None

    @property
    def judged(self) -> bool:
        return min(self.reached_a, self.reached_b) >= MIN_REACHED


def _rate(numerator: float, denominator: float) -> float | None:
    return float(numerator / denominator) if denominator > 0 else None


def position_changes(
    reach_a: np.ndarray, reach_b: np.ndarray, *, declared_a: bool = False, declared_b: bool = False
) -> list[PositionChange]:
    """Per position 1..K: both runs' rates, B − A of the conditional rate and its noise, from
    reach matrices N[r, q, 0..K] over the same question columns (noise.paired_noise, as AL)."""
    k = reach_a.shape[-1] - 1
    out = []
    for i in range(1, k + 1):
        na, da, nb, db = reach_a[..., i], reach_a[..., i - 1], reach_b[..., i], reach_b[..., i - 1]
        reached_a, reached_b = int(da.sum()), int(db.sum())
        diff, noise = None, None
        if min(reached_a, reached_b) >= MIN_REACHED:
            diff, noise = paired_noise(na, da, nb, db, declared_a=declared_a, declared_b=declared_b)
        out.append(
            PositionChange(
                i,
                _rate(na.sum(), da.sum()),
                _rate(nb.sum(), db.sum()),
                _rate(na.sum(), reach_a[..., 0].sum()),
                _rate(nb.sum(), reach_b[..., 0].sum()),
                reached_a,
                reached_b,
                diff,
                noise,
            )
        )
    return out


def paired_positions(
    a: pd.DataFrame, b: pd.DataFrame, k: int, *, declared_a: bool = False, declared_b: bool = False
) -> list[PositionChange] | None:
    """questions.csv rows of one K for runs A and B -> position_changes over the (question, turn)
    units both have; None when they share none."""
    a, b = common_units(a, b)
    if not len(a):
        return None
    ids_a, reach_a = reach_matrix(a, k)
    ids_b, reach_b = reach_matrix(b, k)
    assert (ids_a == ids_b).all()  # same units on both sides, sorted the same way
    return position_changes(reach_a, reach_b, declared_a=declared_a, declared_b=declared_b)
