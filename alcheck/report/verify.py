"""A run's summary recomputed from questions.csv and checked against run.json's stored one: what
`report` and `gate` read (an edited or torn summary is named, never silently used or replaced)."""

from __future__ import annotations

import math
from dataclasses import replace

from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize_by_dataset
from alcheck.metrics.noise import declared_deterministic
from alcheck.report.dataset_views import is_several, meta_views
from alcheck.report.run_io import Run
from alcheck.report.summary import summarize_questions

# the fields summarize() computes exactly; al_ci95 is a bootstrap and gets a looser check
EXACT_FIELDS = ("al_mean", "al_std", "al_repeats", "per_position", "lossless_rate", "slot_violations")
CI_TOLERANCE = 0.02


def _close(a, b, tol: float) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(_close(x, y, tol) for x, y in zip(a, b))
        )
    if a is None or b is None:
        return a is None and b is None
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tol * max(1.0, abs(b))


def summary_disagreements(stored: list[dict], recomputed: list[dict], ci: bool = True) -> list[str]:
    """Where run.json's stored summary differs from the one recomputed from questions.csv (ci:
    also the bootstrap interval, which no verdict reads)."""
    by_k = {}
    for entry in stored:
        try:
            by_k[int(entry["k"])] = entry
        except (KeyError, TypeError, ValueError):
            continue
    out = []
    for entry in recomputed:
        k = entry["k"]
        mine = by_k.pop(k, None)
        if mine is None:
            out.append(f"K={k} is in questions.csv but not in the stored summary")
            continue
        for name in EXACT_FIELDS:
            if (name in entry or name in mine) and not _close(mine.get(name), entry.get(name), 1e-9):
                out.append(f"K={k} {name} {mine.get(name)!r} stored vs {_short(entry.get(name))} recomputed")
        stored_ci = mine.get("al_ci95")
        # one question: runs before stats.MIN_QUESTIONS stored a zero-width interval where there is none
        older = (
            entry.get("al_ci95") == [None, None]
            and isinstance(stored_ci, list)
            and len(stored_ci) == 2
            and stored_ci[0] is not None
            and stored_ci[0] == stored_ci[1]
        )
        if ci and not older and not _close(stored_ci, entry.get("al_ci95"), CI_TOLERANCE):
            out.append(
                f"K={k} al_ci95 {mine.get('al_ci95')!r} stored vs {_short(entry.get('al_ci95'))} recomputed"
            )
    out += [f"K={k} is in the stored summary but has no rows in questions.csv" for k in sorted(by_k)]
    return out


def _short(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(str(_short(v)) for v in value) + "]"
    return repr(value)


def verified_run(run: Run, ci: bool = True) -> tuple[Run, list[str]]:
    """The run with its summary recomputed from questions.csv (the same call `alcheck run`
    makes), and the disagreements with the stored one. Without questions.csv the stored summary
    is kept and flagged as unverified."""
    if not run.has_questions:
        return run, []
    cells = [c for c in run.meta.get("cells") or [] if isinstance(c, dict)]
    questions, problems = run.questions, []
    try:
        recorded = {(int(c["k"]), int(c["repeat"])) for c in cells if {"k", "repeat"} <= set(c)}
    except (TypeError, ValueError):
        raise AlcheckError(
            f"{run.dir / 'run.json'}: a `cells` entry has a non-integer k or repeat: "
            "restore the file or re-run"
        ) from None
    if "cells" in run.meta:  # rows of a pass cut off before run.json recorded it (resume drops them too)
        keep = [(int(k), int(r)) in recorded for k, r in zip(questions["k"], questions["repeat"])]
        questions = questions[keep]
        if not all(keep):
            problems.append(f"{len(keep) - sum(keep)} rows of unrecorded passes ignored")
    seed = run.config.get("seed", 0)
    seed, declared = seed if isinstance(seed, int) else 0, declared_deterministic(run.meta)
    recomputed = summarize_questions(questions, cells, seed=seed, declared=declared)
    problems += summary_disagreements(run.summary, recomputed, ci)
    meta = {**run.meta, "summary": recomputed}
    if is_several(run.meta):  # each dataset's entries too, checked dataset by dataset
        meta["summary_by_dataset"] = summarize_by_dataset(questions, seed=seed, declared=declared)
        stored, mine = dict(meta_views(run.meta)), dict(meta_views(meta))
        for label in dict.fromkeys([*stored, *mine]):
            found = summary_disagreements(
                stored.get(label, {}).get("summary") or [], mine.get(label, {}).get("summary") or [], ci
            )
            problems += [f"{label} {line}" for line in found]
    # an engine's temperature > 0 lossless test needs the target to recompute: the stored one is carried over
    tests = {
        e.get("k"): e["lossless_test"] for e in run.summary if isinstance(e, dict) and "lossless_test" in e
    }
    for entry in recomputed:
        if entry["k"] in tests:
            entry["lossless_test"] = tests[entry["k"]]
    return replace(run, meta=meta, questions=questions), problems


def disagreement_line(problems: list[str], where: str = "", user: str = "the report") -> str:
    """The line `report` and `gate` print when a stored summary was edited: the first disagreement."""
    more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
    return (
        f"{where}run.json's stored summary disagrees with questions.csv ({problems[0]}{more}): "
        f"{user} uses numbers recomputed from questions.csv"
    )
