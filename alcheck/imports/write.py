"""Write an import: a run directory (per-question files) or reference tables (whole-run files).

Run directory (docs/reference/import-formats.md): run.json (schema alcheck.run/1,
with `imported` and `config.origins`), questions.csv in the documented columns, traces.csv (as a
run writes it, alcheck/rundir/traces.py) when the file has per-step counts, answers.jsonl when it has answer
texts. Reference tables: one
`results/references/<name>.json` per group, in the reference format plus `origins`, `counting`
and `imported`.
"""

from __future__ import annotations

import csv
import platform
from datetime import datetime, timezone
from pathlib import Path

from alcheck import __version__
from alcheck.errors import AlcheckError
from alcheck.imports.convert import PROMPT_HASH_NOTE, Converted
from alcheck.imports.records import Aggregate, PerQuestion, Setting
from alcheck.imports.settings import origins, unstated
from alcheck.metrics.noise import declared_deterministic
from alcheck.options import is_tree
from alcheck.prompts.dataset import file_sha256
from alcheck.references.tables import reference_from_dict
from alcheck.report.run_io import (
    QUESTIONS_FILE,
    RUN_FILE,
    RUN_SCHEMA,
    TREE_COLUMNS,
    read_questions,
    written_columns,
)
from alcheck.report.summary import summarize_questions
from alcheck.rundir.answers import ANSWERS_FILE, write_answers
from alcheck.rundir.folder import write_json_atomic
from alcheck.rundir.traces import TRACES_FILE, append_traces


def _value(settings: dict[str, Setting], name: str, default=None):
    value = settings[name].value
    return default if value is None else value


def settings_block(settings: dict[str, Setting]) -> dict:
    """The reference-format settings (strings empty when unstated: the source does not say)."""
    topk = settings["topk"].value
    return {
        "target": _value(settings, "target", ""),
        "draft": _value(settings, "draft", ""),
        "method": _value(settings, "method", ""),
        "protocol": _value(settings, "protocol", ""),
        "dataset": _value(settings, "dataset", ""),
        "limit": settings["limit"].value,
        "max_tokens": settings["max_tokens"].value,
        "temperature": settings["temperature"].value,
        "draft_sampling": settings["draft_sampling"].value,
        "topk": topk,
        "num_draft_tokens": settings["num_draft_tokens"].value if is_tree(topk) else None,
    }


def origins_block(settings: dict[str, Setting]) -> dict:
    out = origins(settings)
    if (settings["topk"].value or 1) == 1 and settings["topk"].value is not None:
        out["num_draft_tokens"] = out["topk"]  # a chain verifies K + 1: stated with the chain
    return out


def _free_dir(out: Path) -> Path:
    if any(
        (out / name).exists() for name in (RUN_FILE, QUESTIONS_FILE, TRACES_FILE)
    ):  # traces.csv is appended to
        raise AlcheckError(f"--out {out} already holds a run: pass another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AlcheckError(
            f"cannot create {out} ({exc.strerror or exc}): pass --out in a folder you can write to"
        ) from None
    return out


def _write_csv(path: Path, columns: list[str], rows: list[dict]):
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        writer.writeheader()
        writer.writerows(rows)


def imported_block(
    fmt: str, path: Path, counting: dict, notes: list[str], settings: dict[str, Setting]
) -> dict:
    return {
        "format": fmt,
        "file": str(path),
        "sha256": file_sha256(path),
        "counting": counting,
        "unstated": unstated(settings),
        "notes": notes,
    }


def write_run(
    data: PerQuestion,
    settings: dict[str, Setting],
    converted: Converted,
    out: Path,
    references: list[dict],
    extra: dict | None = None,
) -> dict:
    """The run directory; returns run.json's contents."""
    out = _free_dir(Path(out))
    k = settings["k"].value
    topk = settings["topk"].value or 1
    _write_csv(out / QUESTIONS_FILE, written_columns(TREE_COLUMNS if is_tree(topk) else []), converted.rows)
    if converted.traces:
        append_traces(out, converted.traces)  # a new file: _free_dir found no run here
    if converted.answers:
        write_answers(out, converted.answers, append=False)
    repeats = sorted({r["repeat"] for r in converted.rows})
    cells = []
    for repeat in repeats:
        mine = [r for r in converted.rows if r["repeat"] == repeat]
        cell = {
            "k": k,
            "repeat": repeat,
            "generated_tokens": sum(r["generated_tokens"] for r in mine),
            "steps": sum(r["steps"] for r in mine),
            "varied": f"imported from {data.format}",
        }
        if converted.wall.get(repeat) is not None:
            cell["wall_s"] = converted.wall[repeat]
        cells.append(cell)
    config = {
        **settings_block(settings),
        "ks": [k],
        "repeats": len(repeats),
        "turns": max((r["turn"] for r in converted.rows), default=1),
        "topk": topk,
        "dtype": settings["dtype"].value,
        "device": None,
        "seed": 0,
        "runner": "import",
        "engine": None,
        "reference": "auto",
        "origins": origins_block(settings),
    }
    meta = {
        "schema": RUN_SCHEMA,
        "status": "complete",
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": config,
        "environment": {
            "backend": "import",
            "format": data.format,
            "alcheck": __version__,
            "python": platform.python_version(),
            "dtype": settings["dtype"].value,
        },
        "cells": cells,
        "summary": [],
        "references": references,
        "imported": {
            **imported_block(data.format, data.path, data.counting, converted.notes, settings),
            "prompt_hash": PROMPT_HASH_NOTE,
            "traces": TRACES_FILE if converted.traces else None,
            "answers": ANSWERS_FILE if converted.answers else None,
            **(extra or {}),
        },
    }
    questions = read_questions(out / QUESTIONS_FILE)
    meta["summary"] = summarize_questions(questions, cells, declared=declared_deterministic(meta))
    write_json_atomic(out / RUN_FILE, meta)
    return meta


def reference_dicts(data: Aggregate, settings: dict[str, dict[str, Setting]], name: str) -> list[dict]:
    """One reference table per group, validated as `alcheck references` will read it."""
    out = []
    for suffix, rows in data.groups.items():
        mine = settings[suffix]
        notes = data.notes.get(suffix, [])
        table = {
            "name": f"{name}-{suffix}" if suffix else name,
            "source": f"imported from {data.path.name} ({data.format})",
            **settings_block(mine),
            "noise": None,
            "notes": "; ".join(notes),
            "values": {str(c.k): c.al for c in rows},
            "origins": {n: o for n, o in origins_block(mine).items() if n != "k"},
            "counting": data.counting,
            "imported": {
                **imported_block(data.format, data.path, data.counting, notes, mine),
                "counts": {
                    str(c.k): {
                        "steps": c.steps,
                        "accepted": c.accepted,
                        "drafted": c.drafted,
                        "per_position": c.per_position,
                        "line": c.line,
                    }
                    for c in rows
                },
            },
        }
        table["imported"]["unstated"] = [n for n in table["imported"]["unstated"] if n != "k"]
        reference_from_dict(table, origin=f"the import of {data.path}")
        out.append(table)
    return out


def write_references(tables: list[dict], directory: Path) -> list[Path]:
    directory = Path(directory)
    paths = [directory / f"{t['name']}.json" for t in tables]
    taken = [p for p in paths if p.exists()]
    if taken:
        raise AlcheckError(f"{taken[0]} already exists: pass another --name, or --out another folder")
    directory.mkdir(parents=True, exist_ok=True)
    for path, table in zip(paths, tables):
        write_json_atomic(path, table)
    return paths
