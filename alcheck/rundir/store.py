"""A run directory's contents: run.json, questions.csv, traces.csv and answers.jsonl, opened,
resumed and appended to.

Results are written after every (K, repeat) cell: its rows first (questions.csv, the per-step
traces of the turns that have them, alcheck/rundir/traces.py, and the answer texts,
alcheck/rundir/answers.py),
then run.json atomically, so an
interrupted run is a valid partial run and `--resume` recomputes only the missing cells (the rows
and traces of a cell run.json does not record are dropped). A cell that finishes before an earlier
one (--devices) is put in its place, so every file is byte for byte that of a run that computed
the cells in order. The rows and traces live in memory too (read once on resume): the summary and
a cell put in its place never read a file back.

`write=False` keeps everything in memory and touches no file (it only reads run.json to resume):
the store of a process that runs the same cell loop as the writer (tensor-parallel ranks other
than 0) but must not write. The caller claims the directory (alcheck.rundir.folder) first.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from alcheck.config import NOT_RESULT_AFFECTING, RunConfig
from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize, summarize_by_dataset
from alcheck.metrics.conventions import DRAFTED_STEPS
from alcheck.metrics.noise import declared_deterministic
from alcheck.prompts.dataset_list import several
from alcheck.report.repeat_numbers import cell_name
from alcheck.report.run_io import (
    _INT_COLUMNS,
    LOSSLESS_COLUMNS,
    QUESTIONS_FILE,
    RUN_FILE,
    RUN_SCHEMA,
    TREE_COLUMNS,
    pass_mismatches,
    questions_frame,
    read_json,
    written_columns,
)
from alcheck.rundir.answers import ANSWERS_FILE, read_answers, write_answers
from alcheck.rundir.fingerprint import settings_fingerprint
from alcheck.rundir.folder import write_json_atomic
from alcheck.rundir.portable import portable_config
from alcheck.rundir.resume_checks import (
    checkpoint_change,
    config_change,
    inputs_change,
    moved_checkpoints,
    recorded_runtime,
    runtime_change,
    unknown_fields,
)
from alcheck.rundir.traces import COLUMNS as TRACE_COLUMNS
from alcheck.rundir.traces import PARTIAL, TRACES_FILE, Trace, read_traces

RESOLVED = ("device", "dtype")  # compared by what they resolve to (the runtime fingerprint), not as typed


class RunStore:
    def __init__(
        self,
        cfg: RunConfig,
        out_dir: Path | None,
        *,
        resume: bool = False,
        references: list[dict] | None = None,
        write: bool = True,
    ):
        self.cfg, self.out_dir, self.write = cfg, Path(out_dir) if out_dir is not None else None, write
        self.rows: list[dict[str, str]] = []  # questions.csv's rows as written, in the files' order
        self.traces: list[Trace] = []  # traces.csv's rows, in the same order
        self.answers: list[dict] = []  # answers.jsonl's lines, in the same order (alcheck/rundir/answers.py)
        self.lossless_tests: dict = {}  # filled from the summary once run.json is read
        self.resumed = resume
        self.unsaved, self.had_traces, self.had_answers = (
            False,
            False,
            False,
        )  # a resume's checked rows not yet written back
        self.meta = self._open(resume, references or [])
        self.done = {(c["k"], c["repeat"]) for c in self.meta["cells"]}
        # K -> an engine's temperature > 0 lossless test (alcheck/diagnostics/sampler_check.py), kept across
        # summaries
        self.lossless_tests = {
            int(e["k"]): e["lossless_test"]
            for e in self.meta.get("summary") or []
            if isinstance(e, dict) and "lossless_test" in e
        }

    # -- open / resume ---------------------------------------------------------------------------

    def _fresh(self, references: list[dict]) -> dict:
        return {
            "schema": RUN_SCHEMA,
            "status": "partial",
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": portable_config(self.cfg.to_dict()),
            "settings_sha": settings_sha(portable_config(self.cfg.to_dict())),
            "environment": {},
            "cells": [],
            "summary": [],
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
            raise AlcheckError(
                f"--out {self.out_dir} already holds a run: pass "
                f"--resume {self.out_dir} to finish it, or another --out"
            )
        if (self.out_dir / QUESTIONS_FILE).exists():
            raise AlcheckError(
                f"--out {self.out_dir} holds a {QUESTIONS_FILE} but no "
                f"{RUN_FILE}: pass another --out or move that file away"
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self._fresh(references)

    def _resume(self, run_json: Path) -> dict:
        if not run_json.is_file():
            raise AlcheckError(
                f"--resume {self.out_dir}: no {RUN_FILE} there: pass a directory an earlier run wrote"
            )
        try:
            meta = read_json(run_json, RUN_FILE)
            if meta.get("schema") != RUN_SCHEMA:
                raise AlcheckError(
                    f"--resume {self.out_dir}: {RUN_FILE} is not an {RUN_SCHEMA} run: start a new run"
                )
            old = portable_config(RunConfig.from_dict(meta["config"]).result_settings())
            meta["cells"] = [c for c in meta["cells"] if {"k", "repeat"} <= set(c)]
        except (AlcheckError, AttributeError, KeyError, TypeError, ValueError):
            raise AlcheckError(
                f"--resume {self.out_dir}: {RUN_FILE} is corrupt: start a new run with another --out"
            ) from None
        if "settings_sha" in meta and meta["settings_sha"] != settings_sha(meta["config"]):
            raise AlcheckError(
                f"--resume {self.out_dir}: {RUN_FILE}'s config was edited after the run started (its "
                "settings no longer match the fingerprint recorded with them), so its rows were measured "
                "with other settings: restore run.json, or start a new run with another --out"
            )
        new = portable_config(self.cfg.result_settings())
        # device and dtype compare as resolved (the runtime fingerprint): "auto" then may be "cpu" now
        diff = [k for k in new if old.get(k) != new[k] and k not in RESOLVED]
        recorded = meta.get("fingerprints") or {}
        moved = moved_checkpoints(old, new, diff, recorded)  # a copy of the same files elsewhere
        diff = [k for k in diff if k not in moved]
        if diff:
            raise AlcheckError(f"--resume {self.out_dir} {config_change(old, new, diff, recorded)}")
        if self.write:
            self._drop_unrecorded_rows(meta)
            self._drop_unrecorded_traces(meta)
            self._drop_unrecorded_answers(meta)
        meta["config"] = portable_config(self.cfg.to_dict())
        meta["settings_sha"] = settings_sha(meta["config"])
        return meta

    def _drop_unrecorded_rows(self, meta: dict):
        """questions.csv checked against run.json before anything is added to it:
        - a torn last line (the process died mid-write) is dropped;
        - rows of a pass that was cut off before run.json recorded it are dropped (recomputed);
        - a recorded pass whose rows do not add up to its record (a cut, edited or lost
          questions.csv) is dropped from run.json too, so it runs again: never a silent
          "complete" over fewer rows.
        - a row whose accepted is not the sum of its accepted_per_pos refuses the resume (corrupt).
        The file is rewritten with today's columns (rows of older runs get an empty prompt_hash),
        once the resume is accepted (_save_resumed)."""
        csv_path = self.out_dir / QUESTIONS_FILE
        text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.is_file() else ""
        if text and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]  # a torn last line
        try:
            frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False) if text.strip() else None
            if frame is None:
                frame = pd.DataFrame(columns=self.columns())
            frame = frame.loc[[_is_int(k) and _is_int(r) for k, r in zip(frame["k"], frame["repeat"])]]
            done = {(c["k"], c["repeat"]) for c in meta["cells"]}
            keep = frame.loc[[(int(k), int(r)) in done for k, r in zip(frame["k"], frame["repeat"])]]
        except (KeyError, ValueError, pd.errors.ParserError):
            raise AlcheckError(
                f"--resume {self.out_dir}: {QUESTIONS_FILE} is corrupt: start a new run with another --out"
            ) from None
        keep = keep.reindex(columns=self.columns(), fill_value="")
        rows = [row for row in keep.to_dict("records") if _counts_are_ints(row)]
        for row in rows:  # a row from before drafted_steps: an EAGLE-style run, every step drafted
            if not str(row.get(DRAFTED_STEPS, "")).strip():
                row[DRAFTED_STEPS] = row["steps"]
        bad = _accepted_disagreement(rows)
        if bad:
            raise AlcheckError(
                f"--resume {self.out_dir}: {QUESTIONS_FILE} is corrupt ({bad}): restore it, or start "
                "a new run with another --out"
            )
        wrong = pass_mismatches(meta["cells"], questions_frame(rows)) if meta["cells"] else {}
        if wrong:
            for (k, repeat), what in sorted(wrong.items()):
                print(
                    f"note: --resume {self.out_dir}: the {cell_name(k, repeat)} "
                    f"pass does not add up ({what}): it runs again",
                    file=sys.stderr,
                )
            meta["cells"] = [c for c in meta["cells"] if (int(c["k"]), int(c["repeat"])) not in wrong]
            meta["status"] = "partial"
            rows = [r for r in rows if (int(r["k"]), int(r["repeat"])) not in wrong]
        self.rows, self.unsaved = rows, True
        if wrong:
            self.meta = meta
            self._refresh_summary()

    def _drop_unrecorded_traces(self, meta: dict):
        """Traces of a cell run.json does not record go, as its questions.csv rows do."""
        done = {(c["k"], c["repeat"]) for c in meta["cells"]}
        try:
            traces = read_traces(self.out_dir) or {}
        except AlcheckError:
            raise AlcheckError(
                f"--resume {self.out_dir}: {TRACES_FILE} is corrupt: start a new run with another --out"
            ) from None
        self.traces = [t for t in traces.values() if (t.k, t.repeat) in done]
        self.had_traces = bool(traces)

    def _drop_unrecorded_answers(self, meta: dict):
        """Answer lines of a cell run.json does not record go, as its rows do. A recorded cell has
        all its lines (they are written before run.json records it) or none (a run older than
        answers.jsonl); anything between is a damaged file."""
        done = {(int(c["k"]), int(c["repeat"])): c.get("rows") for c in meta["cells"]}
        try:
            answers = read_answers(self.out_dir)
        except AlcheckError:
            raise AlcheckError(
                f"--resume {self.out_dir}: {ANSWERS_FILE} is corrupt: start a new run with another --out"
            ) from None
        self.answers = [a for a in answers if (int(a["k"]), int(a["repeat"])) in done]
        counts = Counter((int(a["k"]), int(a["repeat"])) for a in self.answers)
        short = [cell for cell, n in counts.items() if done[cell] is not None and n != int(done[cell])]
        if short:
            k, repeat = short[0]
            raise AlcheckError(
                f"--resume {self.out_dir}: {ANSWERS_FILE} holds {counts[short[0]]} answers for the "
                f"{cell_name(k, repeat)} pass, which has {done[short[0]]} rows: the file was cut or edited: "
                "restore it, or start a new run with another --out"
            )
        # the file as it stands (even a lone torn line) is rewritten from these lines before anything is
        # appended
        self.had_answers = (self.out_dir / ANSWERS_FILE).is_file()

    def _save_resumed(self):
        """questions.csv and traces.csv as the resume checked them, written once it is accepted and
        about to add to them: a refused resume leaves the folder as it was."""
        if not self.unsaved:
            return
        self.unsaved = False
        # "\r\n" as csv.DictWriter's appends end: a resumed file is byte for byte an uninterrupted one
        pd.DataFrame(self.rows, columns=self.columns()).to_csv(
            self.out_dir / QUESTIONS_FILE, index=False, lineterminator="\r\n"
        )
        if self.had_traces:
            _write_csv(
                self.out_dir / TRACES_FILE, TRACE_COLUMNS, [t.row() for t in self.traces], append=False
            )
        if self.had_answers:
            write_answers(self.out_dir, self.answers, append=False)

    # -- writing ---------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        return written_columns(
            (LOSSLESS_COLUMNS if self.cfg.greedy_oracle else []) + (TREE_COLUMNS if self.cfg.is_tree else []),
            several(self.cfg.dataset),
        )

    def write_meta(self):
        if self.write and self.out_dir is not None:
            self._save_resumed()
            write_json_atomic(self.out_dir / RUN_FILE, self.meta)

    def _cell_order(self, k: int, repeat: int) -> tuple[int, int]:
        return self.cfg.ks.index(int(k)), int(repeat)  # the sweep's order: the files' order

    def record_cell(self, cell):
        """Save a finished cell (rows, traces and its record()): CSV rows, traces, then run.json."""
        if self.write and self.out_dir is not None:
            self._save_resumed()
        rows = [{c: "" if r.get(c) is None else str(r[c]) for c in self.columns()} for r in cell.rows]
        later = all(
            self._cell_order(cell.k, cell.repeat) > self._cell_order(c["k"], c["repeat"])
            for c in self.meta["cells"]
        )
        in_order = lambda items: sorted(items, key=lambda x: self._cell_order(*_cell_of(x)))  # noqa: E731 - stable
        self.rows = self.rows + rows if later else in_order(self.rows + rows)
        self.traces = self.traces + cell.traces if later else in_order(self.traces + cell.traces)
        self.answers = self.answers + cell.answers if later else in_order(self.answers + cell.answers)
        if self.write and self.out_dir is not None:
            _write_csv(
                self.out_dir / QUESTIONS_FILE, self.columns(), rows if later else self.rows, append=later
            )
            if cell.traces or (not later and self.traces):  # a run with no per-step data writes no traces.csv
                _write_csv(
                    self.out_dir / TRACES_FILE,
                    TRACE_COLUMNS,
                    [t.row() for t in (cell.traces if later else self.traces)],
                    append=later,
                )
            if cell.answers or (not later and self.answers):
                write_answers(self.out_dir, cell.answers if later else self.answers, append=later)
        self.meta["cells"].append(cell.record())
        self.meta["cells"].sort(key=lambda c: self._cell_order(c["k"], c["repeat"]))
        self.meta["traces"] = _trace_kind(self.meta["cells"])
        self.done.add((cell.k, cell.repeat))
        if self.write and self.out_dir is not None:
            self._refresh_summary(cell.k)
            self.write_meta()

    def set_lossless_test(self, k: int, test: dict):
        self.lossless_tests[k] = test
        if self.write and self.out_dir is not None:
            self._refresh_summary()
            self.write_meta()

    def _refresh_summary(self, k: int | None = None):
        """run.json's summary; after a cell, only its K's entry is computed again (an entry reads
        its own K's rows and cells alone, and its bootstrap is most of a summary's cost)."""
        frame = questions_frame(self.rows)
        kept = self.meta.get("summary") or []
        if k is not None and kept:
            kept, frame = [e for e in kept if e["k"] != int(k)], frame[frame["k"] == int(k)]
        else:
            kept = []
        fresh = summarize(
            frame, self.meta["cells"], seed=self.cfg.seed, declared=declared_deterministic(self.meta)
        )
        self.meta["summary"] = sorted(kept + fresh, key=lambda entry: entry["k"])
        for entry in self.meta["summary"]:
            if entry["k"] in self.lossless_tests:
                entry["lossless_test"] = self.lossless_tests[entry["k"]]
        if several(self.cfg.dataset):  # each dataset's own entries beside the pooled ones
            self.meta["summary_by_dataset"] = summarize_by_dataset(
                questions_frame(self.rows), seed=self.cfg.seed, declared=declared_deterministic(self.meta)
            )

    def finish(self) -> dict:
        self.meta["status"] = "complete"
        self.meta.pop("missing_cells", None)  # a partial merge (alcheck merge) resumed to the end
        self.write_meta()
        return self.meta

    def check_fingerprints(self, fingerprints: dict[str, dict], prompt_hashes: dict | None = None):
        """A resumed run must load the checkpoints it measured, on the same device kind, dtype and
        attention kernel, with the same datasets, chat template and turn-1 prompts
        (alcheck/rundir/fingerprint.py,
        alcheck/rundir/resume_checks.py): else other numbers would be pooled into the same AL. Records
        them."""
        recorded = self.meta.get("fingerprints") or {}
        then = {**recorded, "runtime": recorded_runtime(self.meta)} if self.resumed else recorded
        for role, now in fingerprints.items():
            if role == "runtime":
                problem = runtime_change(then.get(role) or {}, now)
            elif role == "inputs":
                problem = inputs_change(
                    then.get(role) or {}, now, self.cfg.chat_template, self.rows, prompt_hashes or {}
                )
            else:
                problem = checkpoint_change(role, then.get(role), now)
            if problem:
                raise AlcheckError(f"--resume {self.out_dir}: {problem}")
        unknown = unknown_fields(then, fingerprints)
        if self.resumed and self.write and unknown:
            print(
                f"note: --resume {self.out_dir}: this run predates "
                f"the fingerprints of its {', '.join(unknown)}: "
                "a change there since it started cannot be caught; they are recorded from now on",
                file=sys.stderr,
            )
        self.meta["fingerprints"] = {**recorded, **fingerprints}

    def saved_on_disk(self) -> bool:
        return self.write and self.out_dir is not None and (self.out_dir / RUN_FILE).is_file()


def _is_int(text) -> bool:
    try:
        int(text)
    except (TypeError, ValueError):
        return False
    return True


def _accepted_disagreement(rows: list[dict]) -> str | None:
    """The first row whose accepted is not the sum of its accepted_per_pos (a step that accepts j
    drafts counts once at each of positions 0..j-1), in words; rows without per-position counts pass."""
    for row in rows:
        per_pos = str(row.get("accepted_per_pos") or "")
        if not per_pos:
            continue
        try:
            total = sum(int(x) for x in per_pos.split(";"))
        except ValueError:
            total = None
        if total != int(row["accepted"]):
            where = f"{row['dataset']} " if row.get("dataset") else ""
            return (
                f"the {cell_name(row['k'], row['repeat'])} row of {where}question {row['question_id']} turn "
                f"{row['turn']} has accepted {row['accepted']} but accepted_per_pos {per_pos}"
            )
    return None


def _counts_are_ints(row: dict) -> bool:
    """A row whose counts read as integers (a hand-edited or half-written row does not)."""
    return all(_is_int(row.get(c)) for c in _INT_COLUMNS)


def settings_sha(config: dict) -> str:
    """The fingerprint of a run.json config's result-affecting settings, as stored."""
    return settings_fingerprint({k: v for k, v in config.items() if k not in NOT_RESULT_AFFECTING})


def _cell_of(item) -> tuple:
    """(k, repeat) of a questions.csv row (a dict of text) or a Trace."""
    return (item["k"], item["repeat"]) if isinstance(item, dict) else (item.k, item.repeat)


def _trace_kind(cells: list[dict]) -> str | None:
    """run.json's `traces`: per-step, totals-only (an engine that reports no per-step data) or partial,
    over the recorded cells (None: cells written before traces existed)."""
    kinds = {c.get("traces") for c in cells}
    if None in kinds:
        return None if kinds == {None} else PARTIAL
    return kinds.pop() if len(kinds) == 1 else PARTIAL


def _write_csv(path: Path, columns: list[str], rows: list[dict], append: bool):
    """Append rows (a header first when the file is new), or rewrite the whole file from memory
    (temp file, then rename: the bytes the appends would have written in order)."""
    if append:
        new = not path.is_file() or path.stat().st_size == 0
        target, mode = path, "a"
    else:
        new, target, mode = True, path.with_name(f".{path.name}.{os.getpid()}.tmp"), "w"
    with target.open(mode, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        if new:
            writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    if not append:
        os.replace(target, path)
