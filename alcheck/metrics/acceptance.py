"""Acceptance length (AL) and per-position acceptance from questions.csv rows.

AL = tokens emitted per verification step, bonus/recovered token included:
    AL = Σ(steps + accepted) / Σ steps = 1 + Σ accepted / Σ steps
pooled over every step of every generation (ratio of sums). Per-position acceptance
per_position[i] = Σ accepted_per_pos[i] / Σ steps = P(a >= i+1), so AL = 1 + Σ per_position.

Summary fields per K (the `summary` list of run.json, see docs/reference/run-directory.md):
- al_repeats: pooled AL of each repeat (sorted by repeat id)
- al_mean: pooled AL over all repeats (= the steps-weighted mean of al_repeats; equals
  1 + Σ per_position exactly)
- al_std: sample standard deviation (ddof=1) of al_repeats; 0 with one repeat
- al_ci95: cluster bootstrap over question_ids (stats.pooled_al_ci, studentized), seeded per K
  so the interval of one K does not depend on which other Ks are in the run. It answers "what
  would AL be on other prompts" (generalisation). [null, null] from one question: no interval.
- n_questions: distinct questions (dataset, question_id) measured at that K
- al_noise: run-to-run noise of al_mean on these same prompts (noise.run_noise):
  {"se", "df", "basis", "deterministic"}; with one repeat it falls back to the (conservative)
  question-level spread and says so in "basis"
- per_position: pooled over all repeats
- al_drafted_steps: vLLM's "mean acceptance length", 1 + Σ accepted / Σ drafted_steps (only the
  steps that proposed a token; metrics/conventions.py). Equal to al_mean when every step drafts
  (EAGLE); above it for a method that skips steps (n-gram). None when no step drafted.
- al_request_mean: the mean of per-request ALs (a mean of ratios, as SpecForge's benchmark
  reports), beside the pooled al_mean; for comparisons with numbers counted that way
- tokens_per_s: Σ generated_tokens / Σ wall_s over the run.json cells of that K
  (None without cells)
- lossless_rate: mean of `identical` over the K's generations (only when that column exists)
- slot_violations: Σ over the K's cells (only when the cells carry the field)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from alcheck.metrics import conventions, stats
from alcheck.metrics.keys import DATASET_COLUMN, dataset_rows, question_keys
from alcheck.metrics.noise import question_matrix, run_noise


def _is_missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def parse_per_pos(series: Iterable, k: int | None = None) -> np.ndarray:
    """Parse `accepted_per_pos` cells ("12;7;3", a bare int when K=1, or a list of ints)
    into an int matrix.

    Shape (rows, width) with width = k, or the longest row when k is None; shorter rows are
    zero-padded. Raises ValueError on a malformed cell or a row longer than k.
    """
    rows: list[list[int]] = []
    for value in series:
        if isinstance(value, (list, tuple, np.ndarray)):  # in-memory rows, before the CSV
            rows.append([int(v) for v in value])
        elif _is_missing(value):
            rows.append([])
        elif isinstance(value, (int, np.integer)):
            rows.append([int(value)])
        elif isinstance(value, (float, np.floating)):
            if not float(value).is_integer():
                raise ValueError(f"accepted_per_pos value {value!r} is not an integer")
            rows.append([int(value)])
        else:
            text = str(value).strip()
            try:
                rows.append([int(part) for part in text.split(";")] if text else [])
            except ValueError:
                raise ValueError(f"accepted_per_pos value {text!r} is not integers joined by ';'") from None
    width = k if k is not None else max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        if len(row) > width:
            raise ValueError(
                f"accepted_per_pos {';'.join(map(str, row))!r} has {len(row)} entries, more than K={width}"
            )
        out[i, : len(row)] = row
    return out


def pooled_al(questions: pd.DataFrame) -> float:
    """Σ(steps + accepted) / Σ steps over the given rows (NaN when there are no steps)."""
    steps = float(questions["steps"].sum())
    if steps <= 0:
        return float("nan")
    return (steps + float(questions["accepted"].sum())) / steps


def _float_or_none(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _tokens_per_s(cells: Sequence[dict], k: int) -> float | None:
    """Speculative tokens per second at K: a cell's target-only oracle time (--check-lossless) is
    inside its wall_s but is not speculative decoding."""
    mine = [c for c in cells if int(c.get("k", -1)) == k]
    wall = sum(float(c.get("wall_s") or 0.0) - float(c.get("target_only_wall_s") or 0.0) for c in mine)
    if not mine or wall <= 0:
        return None
    return sum(float(c.get("generated_tokens") or 0) for c in mine) / wall


def summarize_k(
    questions_k: pd.DataFrame,
    k: int,
    cells: Sequence[dict] = (),
    *,
    n_boot: int = 2000,
    seed: int = 0,
    declared: bool = False,
) -> dict:
    """The summary entry of one K (see the module docstring)."""
    by_repeat = questions_k.groupby("repeat", sort=True)[["steps", "accepted"]].sum()
    al_repeats = [
        _float_or_none((s + a) / s) if s > 0 else None
        for s, a in zip(by_repeat["steps"].astype(float), by_repeat["accepted"].astype(float))
    ]
    finite = [x for x in al_repeats if x is not None]
    total_steps = float(questions_k["steps"].sum())
    per_pos = parse_per_pos(questions_k["accepted_per_pos"], k).sum(axis=0)
    per_position = [float(x) / total_steps for x in per_pos] if total_steps > 0 else [None] * k
    lo, hi = stats.pooled_al_ci(questions_k, n_boot=n_boot, seed=[seed, k])
    noise = run_noise(*question_matrix(questions_k)[1:], declared)
    entry = {
        "k": k,
        "al_mean": _float_or_none(pooled_al(questions_k)),
        "al_std": float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0,
        "al_ci95": [_float_or_none(lo), _float_or_none(hi)],
        "n_questions": int(question_keys(questions_k).nunique()),
        "al_repeats": al_repeats,
        "al_noise": noise.to_dict() if noise is not None else None,
        "per_position": per_position,
        "al_drafted_steps": _float_or_none(conventions.from_counts(conventions.VLLM_DRAFTED, questions_k)),
        "al_request_mean": _float_or_none(conventions.from_counts(conventions.REQUEST_MEAN, questions_k)),
        "tokens_per_s": _tokens_per_s(cells, k),
    }
    if "identical" in questions_k.columns:
        identical = pd.to_numeric(questions_k["identical"], errors="coerce").dropna()
        if len(identical):
            entry["lossless_rate"] = float(identical.mean())
    mine = [c for c in cells if int(c.get("k", -1)) == k and "slot_violations" in c]
    if mine:
        entry["slot_violations"] = int(sum(int(c["slot_violations"] or 0) for c in mine))
    return entry


def summarize(
    questions: pd.DataFrame,
    cells: Sequence[dict] = (),
    *,
    n_boot: int = 2000,
    seed: int = 0,
    declared: bool = False,
) -> list[dict]:
    """run.json's `summary`: one entry per K present in `questions`, sorted by K. `declared`:
    the run is deterministic by construction (noise.declared_deterministic), so al_noise says
    so even with one repeat, as the tables do."""
    if questions is None or len(questions) == 0:
        return []
    cells = list(cells or [])
    return [
        summarize_k(group, int(k), cells, n_boot=n_boot, seed=seed, declared=declared)
        for k, group in questions.groupby("k", sort=True)
    ]


def summarize_by_dataset(
    questions: pd.DataFrame,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    declared: bool = False,
) -> list[dict]:
    """run.json's `summary_by_dataset` (a run of several datasets): per dataset, in the rows'
    order, its summary entries with "dataset" first, each computed from that dataset's rows
    alone, so they equal a run of that dataset alone. tokens_per_s is null: a cell decodes every
    dataset in one batch, so its time is not split between them."""
    if questions is None or DATASET_COLUMN not in questions.columns:
        return []
    return [
        {DATASET_COLUMN: label, **entry}
        for label in pd.unique(questions[DATASET_COLUMN].astype(str))
        for entry in summarize(
            dataset_rows(questions, label), (), n_boot=n_boot, seed=seed, declared=declared
        )
    ]


def al_by(
    questions: pd.DataFrame,
    by: Sequence[str] = ("category",),
    *,
    ci: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Pooled AL per K and per group (e.g. by=["category"] or ["turn"]).

    Columns: k, *by, al, steps, n_questions (distinct question_ids), and with ci=True
    al_ci_lo / al_ci_hi (cluster bootstrap over the group's questions).
    """
    by = list(by)
    columns = ["k", *by, "al", "steps", "n_questions"] + (["al_ci_lo", "al_ci_hi"] if ci else [])
    if questions is None or len(questions) == 0:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, group in questions.groupby(["k", *by], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row = {
            "k": int(key[0]),
            **dict(zip(by, key[1:])),
            "al": pooled_al(group),
            "steps": int(group["steps"].sum()),
            "n_questions": int(question_keys(group).nunique()),
        }
        if ci:
            row["al_ci_lo"], row["al_ci_hi"] = stats.pooled_al_ci(
                group, n_boot=n_boot, seed=[seed, int(key[0])]
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
