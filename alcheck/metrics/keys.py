"""What identifies a question in questions.csv rows.

A run of one dataset has no `dataset` column and a question is its question_id. A run of several
datasets (`--dataset a,b,c`) has one, and question ids repeat across datasets (humaneval's and
gsm8k's both run 0..79), so there a question is (dataset, question_id). Every cluster, pairing and
per-question count (bootstrap, run-to-run noise, compare, gate) asks this module, so rows of two
datasets with the same id are never one question.
"""

from __future__ import annotations

import pandas as pd

DATASET_COLUMN = "dataset"
_SEPARATOR = "\x1f"  # cannot occur in a label or an id read from JSON text


def question_keys(frame: pd.DataFrame) -> pd.Series:
    """Each row's question: its question_id unchanged when the rows carry no dataset column (so
    one dataset's numbers are those of every run before several datasets existed), else
    'dataset<US>question_id' as text."""
    if DATASET_COLUMN not in frame.columns:
        return frame["question_id"]
    return frame[DATASET_COLUMN].astype(str) + _SEPARATOR + frame["question_id"].astype(str)


def common_units(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of A and of B on the (question, turn) units both measured (ids matched as text,
    so 81 in one file is "81" in another)."""

    def units(frame):
        return list(zip(question_keys(frame).astype(str), frame["turn"].astype(int)))

    both = set(units(a)) & set(units(b))
    return a[[u in both for u in units(a)]], b[[u in both for u in units(b)]]


def dataset_rows(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """One dataset's rows of a run of several, as a run of that dataset alone holds them: no
    dataset column, and question ids as numbers when all of them are (as questions.csv reads)."""
    rows = frame[frame[DATASET_COLUMN].astype(str) == str(label)].drop(columns=[DATASET_COLUMN])
    ids = pd.to_numeric(rows["question_id"], errors="coerce")
    if len(rows) and not ids.isna().any() and (ids % 1 == 0).all():
        rows = rows.assign(question_id=ids.astype("int64"))
    return rows
