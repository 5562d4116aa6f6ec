"""Bootstrap confidence intervals for pooled acceptance length.

The unit of resampling is the *question*: all turns and repeats of one question_id move
together (turn 2 depends on turn 1's answer, and repeats of a greedy run are near-copies, so
neither is an independent draw). The statistic is always the pooled ratio of sums
AL = Σ(steps + accepted) / Σ steps over the resampled questions, never a mean of per-question
ratios. Intervals are percentile intervals. Everything is vectorised: a resample is a row of
a (n_boot, n_questions) multinomial count matrix, so the statistic for all resamples is two
matrix-vector products.

`paired_bootstrap(a, b)` compares two runs on the same questions and reports
diff = AL(b) - AL(a), i.e. the change going from run A to run B (positive: B is higher).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEFAULT_N_BOOT = 2000
CI_LEVEL = 0.95


def _rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def resample_counts(n_clusters: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n_clusters) matrix: how often each cluster is drawn in each resample."""
    if n_clusters <= 0:
        return np.zeros((n_boot, 0), dtype=np.int64)
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot)


def _percentile_ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return (float("nan"), float("nan"))
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return (float(lo), float(hi))


def question_sums(questions: pd.DataFrame, keys=("question_id",)) -> pd.DataFrame:
    """Σ emitted tokens (steps + accepted) and Σ steps per cluster key, sorted by key."""
    keys = list(keys)
    frame = pd.DataFrame(
        {
            **{key: questions[key].to_numpy() for key in keys},
            "emitted": (questions["steps"].to_numpy(dtype=float)
                        + questions["accepted"].to_numpy(dtype=float)),
            "steps": questions["steps"].to_numpy(dtype=float),
        }
    )
    return frame.groupby(keys, sort=True, as_index=False)[["emitted", "steps"]].sum()


def ratio_bootstrap(
    emitted: np.ndarray, steps: np.ndarray, *, n_boot: int = DEFAULT_N_BOOT, seed=0
) -> np.ndarray:
    """Bootstrap samples of Σemitted/Σsteps, resampling the given clusters with replacement."""
    emitted = np.asarray(emitted, dtype=float)
    steps = np.asarray(steps, dtype=float)
    counts = resample_counts(emitted.size, n_boot, _rng(seed))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (counts @ emitted) / (counts @ steps)


def ratio_ci(
    emitted: np.ndarray, steps: np.ndarray, *, n_boot: int = DEFAULT_N_BOOT, seed=0,
    level: float = CI_LEVEL,
) -> tuple[float, float]:
    """Percentile CI of the pooled ratio Σemitted/Σsteps over clusters (one entry per cluster)."""
    if np.asarray(emitted).size == 0:
        return (float("nan"), float("nan"))
    return _percentile_ci(ratio_bootstrap(emitted, steps, n_boot=n_boot, seed=seed), level)


def pooled_al_ci(
    questions: pd.DataFrame, *, n_boot: int = DEFAULT_N_BOOT, seed=0, level: float = CI_LEVEL
) -> tuple[float, float]:
    """95% cluster-bootstrap CI of pooled AL over the rows given (one K): clusters = question_id."""
    sums = question_sums(questions)
    return ratio_ci(sums["emitted"].to_numpy(), sums["steps"].to_numpy(), n_boot=n_boot,
                    seed=seed, level=level)


@dataclass(frozen=True)
class PairedResult:
    """Paired comparison of run A and run B on their common (question_id, turn) units.

    `diff` = al_b - al_a (pooled over the common units); `ci95` is its bootstrap interval.
    """

    al_a: float
    al_b: float
    diff: float
    ci95: tuple[float, float]
    n_questions: int  # clusters resampled
    n_units: int  # matched (question_id, turn) pairs
    n_boot: int


def _unit_sums(frame: pd.DataFrame) -> pd.DataFrame:
    # match keys as strings so an int id in one file equals the same id written as text
    keyed = frame.assign(question_id=frame["question_id"].astype(str),
                         turn=frame["turn"].astype(int))
    return question_sums(keyed, keys=("question_id", "turn"))


def paired_bootstrap(
    a: pd.DataFrame, b: pd.DataFrame, *, n_boot: int = DEFAULT_N_BOOT, seed=0,
    level: float = CI_LEVEL,
) -> PairedResult:
    """Paired cluster bootstrap of AL(b) - AL(a) over questions present in both runs.

    `a` and `b` are questions.csv rows of ONE K each. Repeats are pooled per (question_id, turn);
    only units present in both runs are used; resampling draws question_ids (both turns of a
    question move together) and applies the same draw to both runs. Raises ValueError when the
    runs share no (question_id, turn).
    """
    for name, frame in (("a", a), ("b", b)):
        if frame["k"].nunique() > 1:
            raise ValueError(f"paired_bootstrap: run {name} holds several K values; pass one K")
    units = _unit_sums(a).merge(_unit_sums(b), on=["question_id", "turn"], suffixes=("_a", "_b"))
    if units.empty:
        raise ValueError("the runs share no (question_id, turn)")
    per_q = units.groupby("question_id", sort=True)[
        ["emitted_a", "steps_a", "emitted_b", "steps_b"]].sum()
    ea, sa, eb, sb = (per_q[c].to_numpy(dtype=float)
                      for c in ("emitted_a", "steps_a", "emitted_b", "steps_b"))
    with np.errstate(divide="ignore", invalid="ignore"):
        al_a = ea.sum() / sa.sum()
        al_b = eb.sum() / sb.sum()
        counts = resample_counts(len(per_q), n_boot, _rng(seed))
        samples = (counts @ eb) / (counts @ sb) - (counts @ ea) / (counts @ sa)
    return PairedResult(
        al_a=float(al_a), al_b=float(al_b), diff=float(al_b - al_a),
        ci95=_percentile_ci(samples, level), n_questions=len(per_q), n_units=len(units),
        n_boot=n_boot,
    )
