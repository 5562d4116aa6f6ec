"""A run directory's contents: run.json and questions.csv, opened, resumed and appended to.

Results are written after every (K, repeat) cell: its CSV rows first, then run.json atomically,
so an interrupted run is a valid partial run and `--resume` recomputes only the missing cells.
A cell that finishes before an earlier one (--devices) is put in its place, so both files are
byte for byte those of a run that computed the cells in order. The rows live in memory too (read
once on resume): the summary and a cell put in its place never read the file back.

`write=False` keeps everything in memory and touches no file (it only reads run.json to resume):
the store of a process that runs the same cell loop as the writer (tensor-parallel ranks other
than 0) but must not write. The caller claims the directory (alcheck.run_dir) first.
"""

from __future__ import annotations

import csv
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from alcheck.config import RunConfig
from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize, summarize_by_dataset
from alcheck.metrics.noise import declared_deterministic
from alcheck.prompts.dataset_list import several
from alcheck.report.run_io import (LOSSLESS_COLUMNS, QUESTIONS_FILE, RUN_FILE, RUN_SCHEMA, TREE_COLUMNS,
                                   questions_frame, read_json, written_columns)
from alcheck.run_dir import write_json_atomic


class RunStore:
    def __init__(self, cfg: RunConfig, out_dir: Path | None, *, resume: bool = False,
                 references: list[dict] | None = None, write: bool = True):
        self.cfg, self.out_dir, self.write = cfg, Path(out_dir) if out_dir is not None else None, write
        self.rows: list[dict[str, str]] = []  # questions.csv's rows as written, in the files' order
        self.meta = self._open(resume, references or [])
        self.done = {(c["k"], c["repeat"]) for c in self.meta["cells"]}

    @classmethod
    def in_memory(cls, cfg: RunConfig) -> "RunStore":
        """A store with no directory at all (a --devices worker: the parent records its cells)."""
        return cls(cfg, None, write=False)

    # -- open / resume ---------------------------------------------------------------------------

    def _fresh(self, references: list[dict]) -> dict:
        return {
            "schema": RUN_SCHEMA, "status": "partial",
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": self.cfg.to_dict(), "environment": {}, "cells": [], "summary": [],
            "references": references,
        }

    def _open(self, resume: bool, references: list[dict]) -> dict:
        if self.out_dir is None:
            return self._fresh(references)
        run_json = self.out_dir / RUN_FILE
        if resume:
            return self._resume(run_json)
        if not self.write:  # the writer checks and creates the folder
            return self._fresh(references)
        if run_json.exists():
            raise AlcheckError(f"--out {self.out_dir} already holds a run: pass --resume {self.out_dir} to finish it, or another --out")
        if (self.out_dir / QUESTIONS_FILE).exists():
            raise AlcheckError(f"--out {self.out_dir} holds a {QUESTIONS_FILE} but no {RUN_FILE}: pass another --out or move that file away")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self._fresh(references)

    def _resume(self, run_json: Path) -> dict:
        if not run_json.is_file():
            raise AlcheckError(f"--resume {self.out_dir}: no {RUN_FILE} there: pass a directory an earlier run wrote")
        try:
            meta = read_json(run_json, RUN_FILE)
            if meta.get("schema") != RUN_SCHEMA:
                raise AlcheckError(f"--resume {self.out_dir}: {RUN_FILE} is not an {RUN_SCHEMA} run: start a new run")
            old = RunConfig.from_dict(meta["config"]).result_settings()
            meta["cells"] = [c for c in meta["cells"] if {"k", "repeat"} <= set(c)]
        except (AlcheckError, AttributeError, KeyError, TypeError, ValueError):
            raise AlcheckError(f"--resume {self.out_dir}: {RUN_FILE} is corrupt: start a new run with another --out") from None
        new = self.cfg.result_settings()
        diff = [k for k in new if old.get(k) != new[k]]
        if diff:
            detail = ", ".join(f"{k}: {old.get(k)!r} there vs {new[k]!r} now" for k in diff[:3])
            raise AlcheckError(f"--resume {self.out_dir} was made with a different config ({detail}): "
                               "resume with the same settings or use a new --out")
        if self.write:
            self._drop_unrecorded_rows(meta)
        meta["config"] = self.cfg.to_dict()
        return meta

    def _drop_unrecorded_rows(self, meta: dict):
        """Rows of a cell that was cut off before run.json recorded it are recomputed. The file is
        rewritten with today's columns: rows of older runs get an empty prompt_hash."""
        csv_path = self.out_dir / QUESTIONS_FILE
        if not csv_path.is_file():
            return
        done = {(c["k"], c["repeat"]) for c in meta["cells"]}
        try:
            frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
            keep = frame[[(int(k), int(r)) in done for k, r in zip(frame["k"], frame["repeat"])]]
        except (KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            raise AlcheckError(f"--resume {self.out_dir}: {QUESTIONS_FILE} is corrupt: start a new run with another --out") from None
        keep = keep.reindex(columns=self.columns(), fill_value="")
        self.rows = keep.to_dict("records")
        # "\r\n" as csv.DictWriter's appends end: a resumed file is byte for byte an uninterrupted one
        keep.to_csv(csv_path, index=False, lineterminator="\r\n")

    # -- writing ---------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        return written_columns((LOSSLESS_COLUMNS if self.cfg.check_lossless else [])
                               + (TREE_COLUMNS if self.cfg.topk > 1 else []), several(self.cfg.dataset))

    def write_meta(self):
        if self.write and self.out_dir is not None:
            write_json_atomic(self.out_dir / RUN_FILE, self.meta)

    def _cell_order(self, k: int, repeat: int) -> tuple[int, int]:
        return self.cfg.ks.index(int(k)), int(repeat)  # the sweep's order: the files' order

    def record_cell(self, cell):
        """Save a finished cell (rows + its record()): CSV rows, then run.json."""
        rows = [{c: "" if r.get(c) is None else str(r[c]) for c in self.columns()} for r in cell.rows]
        later = all(self._cell_order(cell.k, cell.repeat) > self._cell_order(c["k"], c["repeat"])
                    for c in self.meta["cells"])
        if later:
            self.rows += rows
        else:  # stable: each cell's rows keep their order
            self.rows = sorted(self.rows + rows, key=lambda r: self._cell_order(r["k"], r["repeat"]))
        if self.write and self.out_dir is not None:
            self._append_rows(rows) if later else self._rewrite_rows()
        self.meta["cells"].append(cell.record())
        self.meta["cells"].sort(key=lambda c: self._cell_order(c["k"], c["repeat"]))
        self.done.add((cell.k, cell.repeat))
        if self.write and self.out_dir is not None:
            self._refresh_summary()
            self.write_meta()

    def _append_rows(self, rows: list[dict]):
        csv_path = self.out_dir / QUESTIONS_FILE
        new = not csv_path.is_file() or csv_path.stat().st_size == 0
        with csv_path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns())
            if new:
                writer.writeheader()
            writer.writerows(rows)
            f.flush()
            os.fsync(f.fileno())

    def _rewrite_rows(self):
        """questions.csv rewritten from memory (temp file, then rename), with a cell that finished
        early in its place: the bytes _append_rows would have written in order."""
        csv_path = self.out_dir / QUESTIONS_FILE
        tmp = csv_path.with_name(f".{csv_path.name}.{os.getpid()}.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns(), extrasaction="ignore", restval="")
            writer.writeheader()
            writer.writerows(self.rows)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, csv_path)

    def _refresh_summary(self):
        self.meta["summary"] = summarize(questions_frame(self.rows), self.meta["cells"], seed=self.cfg.seed,
                                         declared=declared_deterministic(self.meta))
        if several(self.cfg.dataset):  # each dataset's own entries beside the pooled ones
            self.meta["summary_by_dataset"] = summarize_by_dataset(
                questions_frame(self.rows), seed=self.cfg.seed, declared=declared_deterministic(self.meta))

    def finish(self) -> dict:
        self.meta["status"] = "complete"
        self.write_meta()
        return self.meta

    def saved_on_disk(self) -> bool:
        return self.write and self.out_dir is not None and (self.out_dir / RUN_FILE).is_file()
