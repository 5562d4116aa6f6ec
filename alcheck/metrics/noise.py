"""Run-to-run noise: how much would AL move if the same prompts were measured again?

This is the noise that separates two measurements on the SAME questions (two runs, or a run
and a reference measured on the same MT-Bench prompts). It is not the question bootstrap,
which answers another question: what AL would be on other prompts (stats.py).

All estimators work on per-question count matrices E[r, q] (tokens emitted: steps + accepted)
and S[r, q] (steps), one row per repeat, one column per question_id (turns summed). Pooled
AL = ΣE / ΣS, and to first order AL - truth = Σ_q (E_q - AL·S_q) / ΣS, a sum of independent
per-question terms (the delta method used throughout).

- run_noise, R >= 2 repeats: the variance of each question's term across repeats, summed
  over questions (Satterthwaite degrees of freedom). All repeats identical -> deterministic.
- run_noise, 1 repeat: run-to-run noise cannot be seen; the between-question spread is used
  instead. It contains the run-to-run noise plus the questions' own differences, so it is an
  upper bound (conservative), and labelled so.
- paired_noise: two runs on common questions. With >= 2 repeats on both sides, each side's
  repeat noise; otherwise the spread of the per-question paired differences, which under
  "no change" is exactly run-to-run noise.
- reference_noise: a published number without per-question data: the source's stated noise
  (one standard deviation) plus the rounding of the printed value.

Deterministic runs: repeats that are identical question by question are measured to be
deterministic. A single repeat shows nothing, but greedy float32 decoding on CPU is
deterministic in alcheck whatever the batch composition (README: the demo's three repeats are
identical); such a run is declared deterministic (declared_deterministic) unless its own
repeats disagree. Zero noise means any difference beyond numerical tolerance is real.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from decimal import Decimal

import numpy as np
import pandas as pd

from alcheck.metrics.keys import common_units, question_keys


@dataclass(frozen=True)
class Noise:
    """Standard error of an AL (or AL difference) under run-to-run noise.

    df: degrees of freedom of the se estimate (None: treat as known, normal reference).
    deterministic: the measurement repeats exactly (se == 0), so any difference beyond
    numerical tolerance is real.
    """

    se: float
    df: float | None
    basis: str
    deterministic: bool = False

    def to_dict(self) -> dict:
        out = asdict(self)
        out["df"] = None if self.df is None or math.isinf(self.df) else float(self.df)
        return out

    @classmethod
    def from_dict(cls, data) -> Noise | None:
        if not isinstance(data, dict):
            return None
        try:
            se = float(data["se"])
            df = data.get("df")
            df = None if df is None else float(df)
        except (KeyError, TypeError, ValueError):
            return None
        if not math.isfinite(se) or se < 0 or (df is not None and not df > 0):
            return None
        return cls(se, df, str(data.get("basis") or "stored"), bool(data.get("deterministic")))


def question_matrix(questions: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """questions.csv rows of ONE K -> (question ids, E[r, q], S[r, q]); turns are summed.

    question ids are strings (an id written as 81 in one file equals "81" in another)."""
    keyed = pd.DataFrame(
        {
            "repeat": questions["repeat"].to_numpy(),
            "question_id": question_keys(questions).astype(str).to_numpy(),
            "emitted": (
                questions["steps"].to_numpy(dtype=float) + questions["accepted"].to_numpy(dtype=float)
            ),
            "steps": questions["steps"].to_numpy(dtype=float),
        }
    )
    sums = keyed.groupby(["repeat", "question_id"], sort=True)[["emitted", "steps"]].sum()
    emitted = sums["emitted"].unstack("question_id", fill_value=0.0)
    steps = sums["steps"].unstack("question_id", fill_value=0.0)
    return (emitted.columns.to_numpy(dtype=str), emitted.to_numpy(dtype=float), steps.to_numpy(dtype=float))


def _satterthwaite(variances: np.ndarray, dfs) -> float | None:
    """df of a sum of independent variance estimates; None when every part is exact."""
    variances = np.asarray(variances, dtype=float)
    dfs = np.broadcast_to(np.asarray(dfs, dtype=float), variances.shape)
    finite = np.isfinite(dfs) & (variances > 0)
    total = variances.sum()
    if total <= 0 or not finite.any():
        return None
    denom = float((variances[finite] ** 2 / dfs[finite]).sum())
    return float(total**2 / denom) if denom > 0 else None


def question_se(emitted: np.ndarray, steps: np.ndarray) -> float:
    """Cluster (question-level) standard error of ΣE/ΣS over the columns given (1-D arrays)."""
    emitted, steps = np.asarray(emitted, float), np.asarray(steps, float)
    n, total = emitted.size, steps.sum()
    if n < 2 or total <= 0:
        return float("nan")
    u = (emitted - emitted.sum() / total * steps) / total
    return float(math.sqrt(n / (n - 1) * float((u * u).sum())))


DECLARED = "deterministic: greedy float32 on CPU"


def declared_deterministic(meta: dict | None) -> bool:
    """A run.json whose run decoded greedily in float32 on CPU (see the module docstring):
    temperature from `config`, device and dtype as resolved in `environment` (config may say
    "auto")."""
    meta = meta or {}
    config, env = meta.get("config") or {}, meta.get("environment") or {}
    try:
        greedy = float(config.get("temperature")) == 0.0
    except (TypeError, ValueError):
        return False
    device = env.get("device") or config.get("device")
    dtype = env.get("dtype") or config.get("dtype")
    return greedy and device == "cpu" and dtype == "float32"


def run_noise(emitted: np.ndarray, steps: np.ndarray, declared: bool = False) -> Noise | None:
    """Run-to-run noise of one run's pooled AL from E[r, q], S[r, q] (see module docstring).

    declared: the run's settings make it deterministic (declared_deterministic); used only
    when a single repeat cannot show it."""
    emitted, steps = np.atleast_2d(np.asarray(emitted, float)), np.atleast_2d(np.asarray(steps, float))
    repeats, n = emitted.shape
    total = steps.sum()
    if total <= 0 or n == 0:
        return None
    if repeats == 1 and declared:
        return Noise(0.0, None, f"{DECLARED} (1 repeat)", True)
    if repeats >= 2:
        if (emitted == emitted[0]).all() and (steps == steps[0]).all():
            return Noise(0.0, None, f"deterministic: {repeats} repeats identical", True)
        v = emitted - emitted.sum() / total * steps
        per_q = v.var(axis=0, ddof=1)
        se = math.sqrt(repeats * float(per_q.sum())) / total
        return Noise(se, _satterthwaite(per_q, repeats - 1), f"repeats ×{repeats}")
    se = question_se(emitted[0], steps[0])
    if not math.isfinite(se):
        return None
    return Noise(se, float(n - 1), "questions (1 repeat: conservative)")


def combine(*parts: Noise | None) -> Noise | None:
    """Noise of a difference of independent measurements (variances add)."""
    if any(p is None for p in parts):
        return None
    variances = np.array([p.se**2 for p in parts])
    dfs = [math.inf if p.df is None else p.df for p in parts]
    return Noise(
        float(math.sqrt(variances.sum())),
        _satterthwaite(variances, dfs),
        " + ".join(p.basis for p in parts),
        all(p.deterministic for p in parts),
    )


def paired_noise(
    ea: np.ndarray,
    sa: np.ndarray,
    eb: np.ndarray,
    sb: np.ndarray,
    *,
    declared_a: bool = False,
    declared_b: bool = False,
) -> tuple[float, Noise | None]:
    """(AL_b - AL_a, its run-to-run noise) for two runs on the same question columns.

    Each side's noise is its repeat noise (>= 2 repeats) or zero when it is deterministic
    (measured, or declared for a single repeat); when a side's noise cannot be seen (one
    repeat, not declared), the spread of the per-question paired differences is used."""
    ea, sa, eb, sb = (np.atleast_2d(np.asarray(x, float)) for x in (ea, sa, eb, sb))
    al_a, al_b = ea.sum() / sa.sum(), eb.sum() / sb.sum()
    diff = float(al_b - al_a)
    sides = [
        run_noise(e, s, declared) if e.shape[0] >= 2 or declared else None
        for e, s, declared in ((ea, sa, declared_a), (eb, sb, declared_b))
    ]
    if all(side is not None for side in sides):
        both = combine(*sides)
        if both.deterministic:
            bases = list(dict.fromkeys(side.basis.removeprefix("deterministic: ") for side in sides))
            return diff, Noise(0.0, None, f"deterministic on both sides ({'; '.join(bases)})", True)
        return diff, Noise(both.se, both.df, " + ".join(side.basis for side in sides))
    n = ea.shape[1]
    if n < 2:
        return diff, None
    u = ((eb.sum(0) - al_b * sb.sum(0)) / sb.sum()) - ((ea.sum(0) - al_a * sa.sum(0)) / sa.sum())
    se = math.sqrt(n / (n - 1) * float((u * u).sum()))
    return diff, Noise(se, float(n - 1), f"paired by question ({n} q)")


def paired_frames(a: pd.DataFrame, b: pd.DataFrame):
    """questions.csv rows of one K for runs A and B -> (E_a, S_a, E_b, S_b, n_questions) over
    the (question_id, turn) units both have (question: (dataset, question_id) in a run of several
    datasets); None when they share none."""
    a, b = common_units(a, b)
    if not len(a):
        return None
    ids_a, ea, sa = question_matrix(a)
    ids_b, eb, sb = question_matrix(b)
    assert (ids_a == ids_b).all()  # same units on both sides, sorted the same way
    return ea, sa, eb, sb, len(ids_a)


def rounding_sd(value: float) -> float:
    """SD of the rounding error of a printed value: 2.43 -> uniform ±0.005 -> 0.01/√12.

    At least 2 decimals are assumed: JSON writes a published 1.90 as 1.9."""
    exponent = Decimal(repr(float(value))).as_tuple().exponent
    decimals = max(-int(exponent), 2) if isinstance(exponent, int) else 6
    return 10.0 ** (-decimals) / math.sqrt(12.0)


def reference_noise(value: float, stated: float | None) -> Noise:
    """Noise of a published AL: its stated run-to-run SD (if any) plus its rounding."""
    rounding = rounding_sd(value)
    if stated is None:
        return Noise(rounding, None, "reference noise not published (rounding only)")
    return Noise(math.sqrt(float(stated) ** 2 + rounding**2), None, f"reference ±{float(stated):g}")


def summary_noise(entry: dict, declared: bool = False) -> Noise | None:
    """Run-to-run noise of a run.json summary entry's al_mean, for when questions.csv is not at
    hand: the stored `al_noise`; else the spread of `al_repeats`; else (one repeat) zero when
    declared deterministic, or the question-level CI, which is conservative."""
    repeats = [
        float(x) for x in entry.get("al_repeats") or [] if isinstance(x, (int, float)) and math.isfinite(x)
    ]
    if declared and len(repeats) <= 1:
        return Noise(0.0, None, f"{DECLARED} (1 repeat)", True)
    stored = Noise.from_dict(entry.get("al_noise"))
    if stored is not None:
        return stored
    if len(repeats) >= 2:
        if max(repeats) == min(repeats):
            return Noise(0.0, None, f"deterministic: {len(repeats)} repeats identical", True)
        se = float(np.std(repeats, ddof=1)) / math.sqrt(len(repeats))
        return Noise(se, float(len(repeats) - 1), f"repeat spread ×{len(repeats)}")
    ci = entry.get("al_ci95") or []
    # a zero-width interval is one question's (run.json files from before stats.MIN_QUESTIONS): no estimate
    if len(ci) == 2 and all(isinstance(x, (int, float)) and math.isfinite(x) for x in ci) and ci[1] > ci[0]:
        return Noise((ci[1] - ci[0]) / (2 * 1.959964), None, "questions (1 repeat: conservative)")
    return None
