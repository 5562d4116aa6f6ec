"""`alcheck merge`: the shares of one sweep (`alcheck run --shard I/N`) joined into one run directory.

Each share is read and checked whole before anything is written: a folder that is not a run, a
share given twice, shares of different sweeps (their sweep fingerprints, alcheck/rundir/shard.py),
or two shares holding the same (K, repeat) cell are refused in one line. The joined run is then
written through a RunStore, cell by cell in the sweep's order, so its questions.csv, traces.csv,
answers.jsonl and summary are those a whole run writes. Cells no share holds leave the run
partial, with `missing_cells` naming them; `alcheck run --resume M` computes them there.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from alcheck.config import NOT_RESULT_AFFECTING, RunConfig
from alcheck.errors import AlcheckError
from alcheck.report.repeat_numbers import cell_name
from alcheck.report.run_io import (
    QUESTIONS_FILE,
    RUN_FILE,
    RUN_SCHEMA,
    pass_mismatches,
    questions_frame,
    read_json,
)
from alcheck.rundir.answers import read_answers
from alcheck.rundir.shard import AS_TYPED, Shard, stored_shard, sweep_cells, sweep_fingerprint
from alcheck.rundir.store import RunStore
from alcheck.rundir.traces import Trace, read_traces

# a share's run.json keys the joined run computes for itself; every other key is carried over
RECOMPUTED = ("schema", "status", "config", "settings_sha", "cells", "summary", "summary_by_dataset", "shard")


@dataclass
class Share:
    """One run directory given to merge, read and checked."""

    dir: Path
    meta: dict
    rows: list[dict[str, str]]  # questions.csv's rows of its recorded cells, as written
    traces: list[Trace]
    answers: list[dict]
    shard: Shard | None
    sweep: str  # sweep_fingerprint(meta)

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(int(c["k"]), int(c["repeat"])) for c in self.meta["cells"]]

    @property
    def name(self) -> str:
        return f"{self.dir} (share {self.shard})" if self.shard else str(self.dir)


@dataclass
class _StoredCell:
    """A share's recorded cell in the shape RunStore.record_cell takes."""

    k: int
    repeat: int
    rows: list[dict]
    traces: list[Trace]
    answers: list[dict]
    stored: dict

    def record(self) -> dict:
        return dict(self.stored)


def read_share(path) -> Share:
    directory = Path(path)
    fix = "pass the --out folders of `alcheck run --shard I/N`"
    if not (directory / RUN_FILE).is_file():
        raise AlcheckError(f"merge: {directory} is not a run (no {RUN_FILE} there): {fix}")
    meta = read_json(directory / RUN_FILE, RUN_FILE)
    run = isinstance(meta, dict) and isinstance(meta.get("config"), dict)
    if not run or meta.get("schema") != RUN_SCHEMA:
        raise AlcheckError(f"merge: {directory}/{RUN_FILE} is not an {RUN_SCHEMA} run: {fix}")
    if "imported" in meta:
        raise AlcheckError(f"merge: {directory} is an imported run (alcheck import), not a share: {fix}")
    try:
        shard = stored_shard(meta)
        meta["cells"] = meta.get("cells") or []
        cells = [(int(c["k"]), int(c["repeat"])) for c in meta["cells"]]
    except (KeyError, TypeError, ValueError):
        raise AlcheckError(f"merge: {directory}/{RUN_FILE} is corrupt: rerun that share") from None
    sweep = sweep_fingerprint(meta)
    if shard is not None and meta["shard"].get("sweep") != sweep:
        raise AlcheckError(
            f"merge: {directory}/{RUN_FILE} was edited after its share ran (its settings no longer match "
            "the sweep fingerprint recorded with them): restore it, or rerun that share"
        )
    done = set(cells)
    rows = [r for r in _read_rows(directory) if (int(r["k"]), int(r["repeat"])) in done]
    wrong = pass_mismatches(meta["cells"], questions_frame(rows)) if done else {}
    if wrong:
        (k, repeat), what = sorted(wrong.items())[0]
        raise AlcheckError(
            f"merge: {directory}: the {cell_name(k, repeat)} pass does not add up ({what}): repair it with "
            f"`alcheck run --resume {directory}`, then merge again"
        )
    traces = [t for t in (read_traces(directory) or {}).values() if (t.k, t.repeat) in done]
    answers = [a for a in read_answers(directory) if (int(a["k"]), int(a["repeat"])) in done]
    return Share(directory, meta, rows, traces, answers, shard, sweep)


def _read_rows(directory: Path) -> list[dict[str, str]]:
    """questions.csv as text, a torn last line dropped (its pass is not recorded, so not merged)."""
    path = directory / QUESTIONS_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    text = text[: text.rfind("\n") + 1]
    if not text.strip():
        return []
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        frame = frame.loc[[k.isdigit() and r.isdigit() for k, r in zip(frame["k"], frame["repeat"])]]
    except (KeyError, pd.errors.ParserError, ValueError):
        raise AlcheckError(
            f"merge: {path} is corrupt: repair it with `alcheck run --resume {directory}`, "
            "or rerun that share"
        ) from None
    return frame.to_dict("records")


def check_shares(shares: list[Share]) -> None:
    """The refusals, each one line: a share twice, shares of other sweeps, overlapping cells."""
    seen: dict = {}
    for share in shares:
        for key in (("dir", share.dir.resolve()), ("shard", share.shard) if share.shard else None):
            if key is None:
                continue
            if key in seen:
                raise AlcheckError(
                    f"merge: {share.name} is given twice ({seen[key].dir} and {share.dir}): "
                    "pass each share once"
                )
            seen[key] = share
    first = shares[0]
    for share in shares[1:]:
        if share.sweep != first.sweep:
            raise AlcheckError(
                f"merge: {first.dir} and {share.dir} are not shares of one sweep "
                f"({_difference(first, share)}): merge only shares run with the same settings, "
                "checkpoints and data"
            )
    owner: dict[tuple[int, int], Share] = {}
    for share in shares:
        for cell in share.cells:
            if cell in owner:
                raise AlcheckError(
                    f"merge: {owner[cell].name} and {share.name} both hold the {cell_name(*cell)} "
                    "cell: merge shares of one --shard I/N split (each cell in one share)"
                )
            owner[cell] = share


def _difference(a: Share, b: Share) -> str:
    """What makes two sweep fingerprints differ, in words: the first differing setting, else the
    checkpoint, runtime or input fingerprints."""
    ca, cb = a.meta["config"], b.meta["config"]
    for key in sorted(set(ca) | set(cb)):
        if key not in NOT_RESULT_AFFECTING and key not in AS_TYPED and ca.get(key) != cb.get(key):
            return f"{key}: {ca.get(key)!r} there, {cb.get(key)!r} here"
    fa, fb = a.meta.get("fingerprints") or {}, b.meta.get("fingerprints") or {}
    for role in sorted(set(fa) | set(fb)):
        ra, rb = fa.get(role) or {}, fb.get(role) or {}
        if ra == rb:
            continue
        if role in ("runtime", "inputs"):  # name the field: dtype, device, a dataset's contents, the prompts
            name = next(n for n in sorted(set(ra) | set(rb)) if ra.get(n) != rb.get(n))
            return f"{role} {name}: {ra.get(name)!r} there, {rb.get(name)!r} here"
        return f"the {role} checkpoints differ"
    return "their fingerprints differ"


def missing_cells(shares: list[Share]) -> list[tuple[int, int]]:
    config = shares[0].meta["config"]
    held = {cell for share in shares for cell in share.cells}
    return [cell for cell in sweep_cells(config["ks"], config["repeats"]) if cell not in held]


def write_merged(shares: list[Share], out: Path) -> dict:
    """The joined run in `out` (claimed by the caller); returns its run.json."""
    shares = sorted(shares, key=lambda s: min(s.cells, default=(0, 0)))
    first = next(s for s in shares if s.cells)
    cfg = RunConfig.from_dict({**first.meta["config"], "out": str(out)})
    store = RunStore(cfg, out, references=first.meta.get("references") or [])
    carried = {k: v for k, v in first.meta.items() if k not in RECOMPUTED}
    carried["created"] = min(s.meta.get("created") or "" for s in shares if s.cells) or carried.get("created")
    store.meta.update(carried)  # the environment before any cell: the summary's noise model reads it
    store.meta["merged"] = {
        "sweep": first.sweep,
        "shares": [
            {
                "dir": str(s.dir),
                "shard": str(s.shard) if s.shard else None,
                "cells": [list(c) for c in s.cells],
                "environment": s.meta.get("environment") or {},
            }
            for s in shares
        ],
    }
    owner = {cell: s for s in shares for cell in s.cells}
    for k, repeat in sweep_cells(cfg.ks, cfg.repeats):
        share = owner.get((k, repeat))
        if share is None:
            continue
        stored = next(c for c in share.meta["cells"] if (int(c["k"]), int(c["repeat"])) == (k, repeat))
        store.record_cell(
            _StoredCell(
                k,
                repeat,
                *(
                    [x for x in items if _cell_of(x) == (k, repeat)]
                    for items in (share.rows, share.traces, share.answers)
                ),
                stored,
            )
        )
    missing = missing_cells(shares)
    if not missing:
        return store.finish()
    store.meta["missing_cells"] = [list(c) for c in missing]
    store.write_meta()
    return store.meta


def _cell_of(item) -> tuple[int, int]:
    if isinstance(item, Trace):
        return item.k, item.repeat
    return int(item["k"]), int(item["repeat"])
