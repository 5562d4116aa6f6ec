"""run.json's summary from questions.csv, for runs that may lack per-position counts.

An imported file without per-step counts (the EAGLE repo's answers) leaves accepted_per_pos
empty: its per-position acceptance is unknown, not zero, so those Ks get `per_position` null
instead of a row of zeros that would contradict AL = 1 + Σ per_position.
"""

from __future__ import annotations

import pandas as pd

from alcheck.metrics.acceptance import summarize


def has_per_position(questions_k: pd.DataFrame) -> bool:
    values = questions_k["accepted_per_pos"]
    return bool(values.notna().any() and (values.astype(str).str.strip().replace("nan", "") != "").any())


def summarize_questions(
    questions: pd.DataFrame, cells=(), *, seed: int = 0, declared: bool = False
) -> list[dict]:
    entries = summarize(questions, cells, seed=seed, declared=declared)
    for entry in entries:
        if not has_per_position(questions[questions["k"] == entry["k"]]):
            entry["per_position"] = None
    return entries
