"""Bootstrap confidence intervals for pooled acceptance length.

The unit of resampling is the *question*: all turns and repeats of one question_id move
together (turn 2 depends on turn 1's answer, and repeats of a greedy run are near-copies, so
neither is an independent draw). The statistic is always the pooled ratio of sums
AL = Σ(steps + accepted) / Σ steps over the resampled questions, never a mean of per-question
ratios. Everything is vectorised: a resample is a row of a (n_boot, n_questions) multinomial
count matrix, so the statistic for all resamples is two matrix-vector products.

Intervals are studentized (bootstrap-t) by default: the percentile interval under-covers
with few questions (about 91% for a nominal 95% at 16 questions). Each resample's estimate is
divided by its own delta-method standard error, and the interval is
[est - t*_(97.5%) se, est - t*_(2.5%) se] with se the cluster (question-level) standard error.
`method="bca"` (bias-corrected and accelerated, jackknife acceleration) and
`method="percentile"` are kept for comparison; bench/bench_stats.py measures all three.

These intervals answer "what would AL be on other prompts" (generalisation). Whether two
measurements on the SAME prompts differ is a question of run-to-run noise: metrics/noise.py.

`paired_bootstrap(a, b)` compares two runs on the same questions and reports
diff = AL(b) - AL(a), i.e. the change going from run A to run B (positive: B is higher).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from alcheck.metrics.distributions import normal_cdf, normal_quantile
from alcheck.metrics.keys import question_keys

DEFAULT_N_BOOT = 2000
CI_LEVEL = 0.95
CI_METHODS = ("studentized", "bca", "percentile")
# one question shows nothing of how AL varies between prompts: every resample is that question, so
# its interval would have zero width; below this many there is no interval (NaN) instead
MIN_QUESTIONS = 2
NO_INTERVAL = (float("nan"), float("nan"))


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


def _bca_ci(estimate: float, samples: np.ndarray, jackknife: np.ndarray, level: float) -> tuple[float, float]:
    """BCa interval from bootstrap samples and leave-one-cluster-out estimates."""
    finite = samples[np.isfinite(samples)]
    if finite.size == 0 or not np.isfinite(estimate):
        return (float("nan"), float("nan"))
    if finite.min() == finite.max():  # e.g. two identical runs: no spread at all
        return (float(finite[0]), float(finite[0]))
    below = np.count_nonzero(finite < estimate) + 0.5 * np.count_nonzero(finite == estimate)
    share = below / finite.size
    if not 0.0 < share < 1.0:  # the estimate lies outside every resample: no usable z0
        return _percentile_ci(finite, level)
    z0 = normal_quantile(share)
    jack = jackknife[np.isfinite(jackknife)]
    dev = jack.mean() - jack if jack.size else np.zeros(1)
    spread = float((dev**2).sum())
    accel = float((dev**3).sum()) / (6.0 * spread**1.5) if spread > 0 else 0.0
    tail = (1.0 - level) / 2.0
    levels = []
    for z in (normal_quantile(tail), normal_quantile(1.0 - tail)):
        shifted = z0 + z
        denom = 1.0 - accel * shifted
        levels.append(normal_cdf(z0 + shifted / denom) if denom > 0 else (0.0 if z < 0 else 1.0))
    lo, hi = np.quantile(finite, levels)
    return (float(lo), float(hi))


def _studentized_ci(estimate: float, se: float, t_samples: np.ndarray, level: float) -> tuple[float, float]:
    """Bootstrap-t interval: est - quantiles of (est* - est) / se* times se."""
    if not (np.isfinite(estimate) and np.isfinite(se)):
        return (float("nan"), float("nan"))
    if se == 0:  # every question agrees exactly (e.g. a run against itself)
        return (float(estimate), float(estimate))
    finite = t_samples[np.isfinite(t_samples)]
    if finite.size < 0.99 * t_samples.size:  # tiny samples: many resamples repeat one question
        return (float("nan"), float("nan"))
    tail = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(finite, [tail, 1.0 - tail])
    return (float(estimate - q_hi * se), float(estimate - q_lo * se))


def _clip(ci: tuple[float, float], lo: float, hi: float) -> tuple[float, float]:
    """An interval cut to the values the statistic can take."""
    return (float(min(max(ci[0], lo), hi)), float(max(min(ci[1], hi), lo)))


def _cluster_var(n: int, sum_sq: np.ndarray) -> np.ndarray:
    return (n / (n - 1)) * np.maximum(sum_sq, 0.0) if n > 1 else np.full_like(sum_sq, np.nan)


def _ratio_jackknife(emitted: np.ndarray, steps: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (emitted.sum() - emitted) / (steps.sum() - steps)


def question_sums(questions: pd.DataFrame, keys=("question_id",)) -> pd.DataFrame:
    """Σ emitted tokens (steps + accepted) and Σ steps per cluster key, sorted by key; the
    question_id key is (dataset, question_id) in a run of several datasets (metrics/keys.py)."""
    keys = list(keys)
    frame = pd.DataFrame(
        {
            **{
                key: (question_keys(questions) if key == "question_id" else questions[key]).to_numpy()
                for key in keys
            },
            "emitted": (
                questions["steps"].to_numpy(dtype=float) + questions["accepted"].to_numpy(dtype=float)
            ),
            "steps": questions["steps"].to_numpy(dtype=float),
        }
    )
    return frame.groupby(keys, sort=True, as_index=False)[["emitted", "steps"]].sum()


def ratio_ci(
    emitted: np.ndarray,
    steps: np.ndarray,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed=0,
    level: float = CI_LEVEL,
    method: str = "studentized",
) -> tuple[float, float]:
    """CI of the pooled ratio Σemitted/Σsteps over clusters (one entry per cluster)."""
    if method not in CI_METHODS:
        raise ValueError(f"unknown CI method {method!r}: use one of {CI_METHODS}")
    emitted, steps = np.asarray(emitted, dtype=float), np.asarray(steps, dtype=float)
    if emitted.size < MIN_QUESTIONS:
        return NO_INTERVAL
    n = emitted.size
    counts = resample_counts(n, n_boot, _rng(seed))
    with np.errstate(divide="ignore", invalid="ignore"):
        total = counts @ steps
        samples = (counts @ emitted) / total
        estimate = float(emitted.sum() / steps.sum())
        if method == "percentile":
            return _percentile_ci(samples, level)
        if method == "bca":
            return _bca_ci(estimate, samples, _ratio_jackknife(emitted, steps), level)
        # Σ_q c_q (E_q - θ* S_q)^2, expanded into matrix-vector products
        sum_sq = (
            counts @ (emitted * emitted)
            - 2 * samples * (counts @ (emitted * steps))
            + samples**2 * (counts @ (steps * steps))
        )
        se_star = np.sqrt(_cluster_var(n, sum_sq)) / total
        u = (emitted - estimate * steps) / steps.sum()
        se = float(np.sqrt(_cluster_var(n, np.array(float((u * u).sum())))))
        ci = _studentized_ci(estimate, se, (samples - estimate) / se_star, level)
        if not np.isfinite(ci[0]):
            return _percentile_ci(samples, level)
        # a pooled ratio is a weighted mean of the clusters' own ratios, so no resample can leave
        # [min, max] of them; with few clusters the bootstrap-t quantiles can (issue: CI to 360645)
        ratios = emitted / steps
        return _clip(ci, float(np.nanmin(ratios)), float(np.nanmax(ratios)))


def pooled_al_ci(
    questions: pd.DataFrame,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed=0,
    level: float = CI_LEVEL,
    method: str = "studentized",
) -> tuple[float, float]:
    """95% cluster-bootstrap CI of pooled AL over the rows given (one K): clusters = question_id."""
    sums = question_sums(questions)
    return ratio_ci(
        sums["emitted"].to_numpy(),
        sums["steps"].to_numpy(),
        n_boot=n_boot,
        seed=seed,
        level=level,
        method=method,
    )


def _paired_ci(ea, sa, eb, sb, n_boot, seed, level, method) -> tuple[float, float]:
    """CI of Σeb/Σsb - Σea/Σsa, resampling the clusters (entries) jointly on both sides."""
    if method not in CI_METHODS:
        raise ValueError(f"unknown CI method {method!r}: use one of {CI_METHODS}")
    n = ea.size
    if n < MIN_QUESTIONS:
        return NO_INTERVAL
    counts = resample_counts(n, n_boot, _rng(seed))
    tot_a, tot_b = counts @ sa, counts @ sb
    th_a, th_b = (counts @ ea) / tot_a, (counts @ eb) / tot_b
    samples = th_b - th_a
    estimate = float(eb.sum() / sb.sum() - ea.sum() / sa.sum())
    if method == "percentile":
        return _percentile_ci(samples, level)
    if method == "bca":
        jack = _ratio_jackknife(eb, sb) - _ratio_jackknife(ea, sa)
        return _bca_ci(estimate, samples, jack, level)
    # Σ_q c_q (x_q / B - y_q / A)^2 with x = eb - θb sb, y = ea - θa sa, expanded
    xx = counts @ (eb * eb) - 2 * th_b * (counts @ (eb * sb)) + th_b**2 * (counts @ (sb * sb))
    yy = counts @ (ea * ea) - 2 * th_a * (counts @ (ea * sa)) + th_a**2 * (counts @ (sa * sa))
    xy = (
        counts @ (eb * ea)
        - th_a * (counts @ (eb * sa))
        - th_b * (counts @ (sb * ea))
        + th_a * th_b * (counts @ (sb * sa))
    )
    sum_sq = xx / tot_b**2 - 2 * xy / (tot_a * tot_b) + yy / tot_a**2
    se_star = np.sqrt(_cluster_var(n, sum_sq))
    u = (eb - eb.sum() / sb.sum() * sb) / sb.sum() - (ea - ea.sum() / sa.sum() * sa) / sa.sum()
    se = float(np.sqrt(_cluster_var(n, np.array(float((u * u).sum())))))
    with np.errstate(divide="ignore", invalid="ignore"):  # se* = 0 when a resample repeats one unit
        ci = _studentized_ci(estimate, se, (samples - estimate) / se_star, level)
    if not np.isfinite(ci[0]):
        return _percentile_ci(samples, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        ra, rb = ea / sa, eb / sb  # each side's pooled AL stays within its clusters' ratios
    return _clip(ci, float(np.nanmin(rb) - np.nanmax(ra)), float(np.nanmax(rb) - np.nanmin(ra)))


@dataclass(frozen=True)
class PairedResult:
    """Paired comparison of run A and run B on their common (question_id, turn) units.

    `diff` = al_b - al_a (pooled over the common units); `ci95` is its bootstrap interval (None
    with fewer than MIN_QUESTIONS common questions).
    """

    al_a: float
    al_b: float
    diff: float
    ci95: tuple[float, float] | None
    n_questions: int  # clusters resampled
    n_units: int  # matched (question_id, turn) pairs
    n_boot: int


def _unit_sums(frame: pd.DataFrame) -> pd.DataFrame:
    # match keys as strings so an int id in one file equals the same id written as text;
    # question_sums adds the dataset where the rows have one
    keyed = frame.assign(question_id=frame["question_id"].astype(str), turn=frame["turn"].astype(int))
    return question_sums(keyed, keys=("question_id", "turn"))


def paired_bootstrap(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed=0,
    level: float = CI_LEVEL,
    method: str = "studentized",
) -> PairedResult:
    """Paired cluster bootstrap of AL(b) - AL(a) over the questions both runs have.

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
    per_q = units.groupby("question_id", sort=True)[["emitted_a", "steps_a", "emitted_b", "steps_b"]].sum()
    ea, sa, eb, sb = (
        per_q[c].to_numpy(dtype=float) for c in ("emitted_a", "steps_a", "emitted_b", "steps_b")
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        al_a = ea.sum() / sa.sum()
        al_b = eb.sum() / sb.sum()
        ci = _paired_ci(ea, sa, eb, sb, n_boot, seed, level, method)
    diff = float(al_b - al_a)
    return PairedResult(
        al_a=float(al_a),
        al_b=float(al_b),
        diff=diff,
        ci95=ci if np.isfinite(ci).all() else None,
        n_questions=len(per_q),
        n_units=len(units),
        n_boot=n_boot,
    )
