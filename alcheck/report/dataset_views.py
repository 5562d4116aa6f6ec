"""A run of several datasets (`--dataset a,b,c`) seen as one run per dataset.

Each view is the run as a run of that dataset alone would hold it: `config.dataset` its label,
`summary` its `summary_by_dataset` entries, `references` the tables of that dataset (so each
reference gets its verdict against its own dataset's rows only), questions its rows without the
dataset column. The table, the report, compare and gate run their one-dataset code on each view.
A run of one dataset is its own single view, labelled None, so it prints as it always did.
The pooled view ("all") is the run itself: run.json's `summary` over every dataset's questions,
with the references no dataset of the run matches (they are then not comparable).
"""

from __future__ import annotations

from alcheck.metrics.keys import DATASET_COLUMN, dataset_rows
from alcheck.prompts.dataset_list import dataset_labels, several
from alcheck.report.run_io import Run, empty_questions

POOLED = "all"  # the rows pooled over every dataset of the run


def is_several(meta: dict) -> bool:
    return several((meta.get("config") or {}).get("dataset"))


def labels(meta: dict) -> list[str]:
    """The run's dataset labels in its order: as its rows recorded them (the files may not be on
    this machine), else from its config."""
    found = [e[DATASET_COLUMN] for e in meta.get("summary_by_dataset") or [] if DATASET_COLUMN in e]
    return list(dict.fromkeys(found)) or dataset_labels((meta.get("config") or {}).get("dataset", ""))


def _matches(ref: dict, label: str) -> bool:
    return str(ref.get("dataset") or "").strip().lower() == label.strip().lower()


def meta_views(meta: dict, pooled: bool = False) -> list[tuple[str | None, dict]]:
    """[(label, the run.json of that dataset alone)], then ("all", the run) with `pooled`; a
    run of one dataset: [(None, meta)]."""
    if not is_several(meta):
        return [(None, meta)]
    config, refs, names = meta.get("config") or {}, meta.get("references") or [], labels(meta)
    views = []
    for label in names:
        summary = [
            {k: v for k, v in e.items() if k != DATASET_COLUMN}
            for e in meta.get("summary_by_dataset") or []
            if e.get(DATASET_COLUMN) == label
        ]
        views.append(
            (
                label,
                {
                    **meta,
                    "config": {**config, "dataset": label},
                    "summary": summary,
                    "cells": [],  # a cell's time covers every dataset: not split
                    "references": [r for r in refs if _matches(r, label)],
                },
            )
        )
    if pooled:
        views.append(
            (POOLED, {**meta, "references": [r for r in refs if not any(_matches(r, n) for n in names)]})
        )
    return views


def run_views(run: Run) -> list[tuple[str | None, Run]]:
    """meta_views for a loaded run, each view with its dataset's questions.csv rows."""
    if not is_several(run.meta):
        return [(None, run)]
    out = []
    for label, meta in meta_views(run.meta):
        rows = (
            dataset_rows(run.questions, label)
            if DATASET_COLUMN in run.questions.columns
            else empty_questions()
        )
        out.append((label, Run(meta=meta, questions=rows, dir=run.dir)))
    return out


def dataset_text(config: dict):
    """A run's dataset(s) for a header line: the one spec as stored, or 'mt_bench, humaneval'."""
    value = config.get("dataset")
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else value
