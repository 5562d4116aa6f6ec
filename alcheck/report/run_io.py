"""Load (and write) a run directory: run.json (schema "alcheck.run/1") + questions.csv.

Every problem with the input becomes an AlcheckError with one line "<problem>: <fix>".
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import parse_per_pos
from alcheck.metrics.conventions import DRAFTED_STEPS
from alcheck.metrics.keys import DATASET_COLUMN
from alcheck.report.repeat_numbers import cell_name
from alcheck.rundir.folder import write_json_atomic

RUN_SCHEMA = "alcheck.run/1"
RUN_FILE = "run.json"
QUESTIONS_FILE = "questions.csv"

QUESTION_COLUMNS = [
    "k",
    "repeat",
    "question_id",
    "turn",
    "category",
    "prompt_tokens",
    "generated_tokens",
    "steps",
    "drafted",
    "accepted",
    "accepted_per_pos",
]
LOSSLESS_COLUMNS = ["identical", "first_diff"]
# tree runs (--topk > 1): the drafting shape on every row, so a row is read right on its own;
# optional on read (chain runs and older runs have none: topk 1, K+1 tokens)
TREE_COLUMNS = ["topk", "num_draft_tokens"]
# written after prompt_tokens since the prompt_hash change; optional on read, so older runs load
PROMPT_HASH = "prompt_hash"
_INT_COLUMNS = ["k", "repeat", "turn", "prompt_tokens", "generated_tokens", "steps", "drafted", "accepted"]
# may be empty: an imported file does not record the prompt's length (alcheck.imports)
_OPTIONAL_INT_COLUMNS = ["prompt_tokens"]
# written after steps since issue 30: the steps that proposed a token (vLLM's num_drafts). Optional
# on read: rows written before it are EAGLE-style (every step drafts), so theirs is their steps
# (fill_drafted_steps)


@dataclass
class Run:
    meta: dict
    questions: pd.DataFrame
    dir: Path

    @property
    def config(self) -> dict:
        return self.meta.get("config") or {}

    @property
    def summary(self) -> list[dict]:
        return self.meta.get("summary") or []

    @property
    def references(self) -> list[dict]:
        return self.meta.get("references") or []

    @property
    def ks(self) -> list[int]:
        return sorted(int(s["k"]) for s in self.summary)

    @property
    def has_questions(self) -> bool:
        return len(self.questions) > 0

    def summary_for(self, k: int) -> dict | None:
        return next((s for s in self.summary if int(s["k"]) == int(k)), None)

    def questions_for(self, k: int) -> pd.DataFrame:
        return self.questions[self.questions["k"] == int(k)]


def written_columns(extra: list[str] = (), dataset: bool = False) -> list[str]:
    """questions.csv's columns as `alcheck run` writes them today (docs/reference/run-directory.md);
    `dataset`: a run of several datasets, whose rows name theirs before the question id."""
    at = QUESTION_COLUMNS.index("prompt_tokens") + 1
    columns = QUESTION_COLUMNS[:at] + [PROMPT_HASH] + QUESTION_COLUMNS[at:] + list(extra)
    columns.insert(columns.index("steps") + 1, DRAFTED_STEPS)
    if dataset:
        columns.insert(columns.index("question_id"), DATASET_COLUMN)
    return columns


def empty_questions() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype="int64" if c in _INT_COLUMNS else object) for c in QUESTION_COLUMNS}
    )


def read_json(path: Path, what: str = "file") -> object:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AlcheckError(f"{what} not found: {path}: check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AlcheckError(
            f"cannot read {what} {path} ({exc.__class__.__name__}): check the file and its permissions"
        ) from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except _NonFinite as exc:
        raise AlcheckError(
            f"{path} is not valid JSON: it holds {exc}, not a finite number: restore the file or re-run"
        ) from None
    except json.JSONDecodeError as exc:
        raise AlcheckError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}): restore the file or re-run"
        ) from None


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str):
    # NaN / Infinity are not JSON; Python's parser accepts them unless told otherwise
    raise _NonFinite(name)


def resolve_run_json(path) -> Path:
    """A run directory or its run.json -> the run.json path (must exist)."""
    path = Path(path)
    if path.is_dir():
        candidate = path / RUN_FILE
        if not candidate.is_file():
            raise AlcheckError(f"no {RUN_FILE} in {path}: {_runs_inside(path)}")
        return candidate
    if path.is_file():
        return path
    raise AlcheckError(f"run not found: {path}: pass a run directory or its {RUN_FILE}")


def _runs_inside(folder: Path, most: int = 4) -> str:
    """The fix for a folder that is no run: its entries when it holds runs (a leaderboard of
    `run --draft A --draft B`, an ablation's two arms), else what to pass."""
    kind = (
        "a leaderboard"
        if (folder / "leaderboard.json").is_file()
        else "an ablation"
        if (folder / "ablation.json").is_file()
        else "a folder of runs"
    )
    try:
        runs = sorted(sub for sub in folder.iterdir() if (sub / RUN_FILE).is_file())
    except OSError:
        runs = []
    if not runs:
        return "pass a directory written by `alcheck run` (or its run.json)"
    named = ", ".join(str(sub) for sub in runs[:most]) + (
        f" (+{len(runs) - most} more)" if len(runs) > most else ""
    )
    return f"it is {kind}, whose entries are runs: pass one of {named}"


def validate_meta(meta: object, source) -> dict:
    if not isinstance(meta, dict):
        raise AlcheckError(f"{source} does not hold a JSON object: pass a run.json written by `alcheck run`")
    schema = meta.get("schema")
    if schema != RUN_SCHEMA:
        raise AlcheckError(
            f"{source} has schema {schema!r}, expected {RUN_SCHEMA!r}: pass a "
            "run.json written by `alcheck run`"
        )
    for key, kind, word in (
        ("config", dict, "object"),
        ("summary", list, "array"),
        ("cells", list, "array"),
        ("references", list, "array"),
        ("environment", dict, "object"),
    ):
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise AlcheckError(f"{source}: `{key}` must be a JSON {word}: restore the file or re-run")
    if not isinstance(meta.get("config"), dict):
        raise AlcheckError(f"{source} has no `config` object: restore the file or re-run")
    for i, entry in enumerate(meta.get("summary") or []):
        if not isinstance(entry, dict) or "k" not in entry or "al_mean" not in entry:
            raise AlcheckError(
                f"{source}: summary entry {i} lacks `k` or `al_mean`: restore the file or re-run"
            )
        _check_whole(entry["k"], 1, f"{source}: summary entry {i} has k")
    for i, cell in enumerate(meta.get("cells") or []):  # passes: read as int(k), int(repeat)
        for key, least in (("k", 1), ("repeat", 0)):
            if isinstance(cell, dict) and key in cell:
                _check_whole(cell[key], least, f"{source}: cells entry {i} has {key}")
    return meta


def _check_whole(value, least: int, where: str) -> None:
    """A whole number >= least (3.0 passes: JSON writers differ); else one line, exit 2."""
    whole = not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    )
    if not whole or value < least:
        raise AlcheckError(f"{where} {value!r}, not a whole number >= {least}: restore the file or re-run")


def read_questions(path: Path) -> pd.DataFrame:
    """Read and validate questions.csv (missing file -> FileNotFoundError).

    A file refused only for its last line, torn (no newline: a kill mid-write), names `--resume`
    as the fix: it drops that line and runs its pass again (rundir/store.py)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    if path.stat().st_size == 0:
        return empty_questions()
    try:
        return _parse_questions(path, path)
    except AlcheckError as refused:
        data = path.read_bytes()
        if data.endswith(b"\n"):
            raise
        try:
            _parse_questions(io.BytesIO(data[: data.rfind(b"\n") + 1]), path)
        except AlcheckError:
            raise refused from None
        line = data.count(b"\n") + 1
        raise AlcheckError(
            f"{path} line {line} is torn (the run stopped while writing it): run "
            f"`alcheck run --resume {path.parent}`, which runs that pass again"
        ) from None


def _parse_questions(source, path: Path) -> pd.DataFrame:
    """questions.csv's rows from `source` (the file, or its bytes), validated; errors name `path`."""
    try:
        frame = pd.read_csv(
            source, dtype={"accepted_per_pos": str, "category": str, PROMPT_HASH: str, DATASET_COLUMN: str}
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise AlcheckError(f"{path} is not a valid CSV ({first}): restore the file or re-run") from None
    missing = [c for c in QUESTION_COLUMNS if c not in frame.columns]
    if missing:
        raise AlcheckError(
            f"{path} lacks columns {', '.join(missing)}: pass a questions.csv written by `alcheck run`"
        )
    for column in _INT_COLUMNS:
        numbers = pd.to_numeric(frame[column], errors="coerce")
        missing = numbers.isna()
        if column in _OPTIONAL_INT_COLUMNS:
            missing = missing & frame[column].notna()  # empty is allowed, text is not
        optional = bool(frame[column].isna().any()) and column in _OPTIONAL_INT_COLUMNS
        bad = missing | (numbers.notna() & (numbers % 1 != 0))
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2
            raise AlcheckError(
                f"{path} line {line}: `{column}` is not an integer: restore the file or re-run"
            )
        frame[column] = numbers.astype("Int64" if optional else "int64")
    if (frame["k"] < 1).any() or (frame["steps"] < 0).any() or (frame["accepted"] < 0).any():
        raise AlcheckError(f"{path}: negative counts or K < 1: restore the file or re-run")
    for k, group in frame.groupby("k"):
        try:
            parse_per_pos(group["accepted_per_pos"], int(k))
        except ValueError as exc:
            raise AlcheckError(f"{path} (k={k}): {exc}: restore the file or re-run") from None
    _check_accepted_adds_up(frame, path)
    return fill_drafted_steps(frame, path)


def fill_drafted_steps(frame: pd.DataFrame, path=None) -> pd.DataFrame:
    """drafted_steps as int64 in [0, steps]: the column as written, or steps where a row (or the
    whole file) predates it. A value that is not a count, or above its steps, is refused."""
    steps = frame["steps"].astype("int64")
    if DRAFTED_STEPS not in frame.columns:
        frame[DRAFTED_STEPS] = steps
        return frame
    raw = frame[DRAFTED_STEPS]
    empty = raw.isna() | (raw.astype(str).str.strip() == "")
    numbers = pd.to_numeric(raw.where(~empty), errors="coerce")
    bad = (~empty & (numbers.isna() | (numbers % 1 != 0) | (numbers < 0))) | (numbers > steps)
    if bad.any():
        line = int(bad.to_numpy().nonzero()[0][0]) + 2
        where = f"{path} line {line}" if path is not None else f"row {line - 1}"
        raise AlcheckError(
            f"{where}: `{DRAFTED_STEPS}` {raw.iloc[line - 2]!r} is not a count of steps from 0 to the row's "
            "steps: restore the file or re-run"
        )
    frame[DRAFTED_STEPS] = numbers.fillna(steps).astype("int64")
    return frame


def _check_accepted_adds_up(frame: pd.DataFrame, path: Path) -> None:
    """Each row's accepted is the sum of its accepted_per_pos (a step that accepts j drafts counts
    once at each of positions 0..j-1); rows without per-position counts (some imports) pass."""
    for line, (per_pos, accepted) in enumerate(zip(frame["accepted_per_pos"], frame["accepted"]), start=2):
        if (
            isinstance(per_pos, str)
            and per_pos.strip()
            and sum(int(x) for x in per_pos.split(";")) != int(accepted)
        ):
            raise AlcheckError(
                f"{path} line {line}: accepted {accepted} is not the sum of accepted_per_pos "
                f"{per_pos}: the file was edited or damaged: restore it or re-run"
            )


def questions_frame(rows: list[dict[str, str]]) -> pd.DataFrame:
    """questions.csv's rows held as written (strings) -> the frame read_questions would give for
    those columns the summary reads: counts as int64, question ids as numbers when all are."""
    if not rows:
        return empty_questions()
    frame = pd.DataFrame(rows)
    for column in _INT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]).astype("int64")
    ids = pd.to_numeric(frame["question_id"], errors="coerce")
    if not ids.isna().any():
        frame["question_id"] = ids
    return fill_drafted_steps(frame)


def pass_mismatches(cells: list, questions: pd.DataFrame) -> dict[tuple[int, int], str]:
    """(k, repeat) -> what disagrees, for each pass run.json records whose questions.csv rows do
    not add up to its record: the row count (recorded since it was added), generated tokens,
    steps and accepted drafts. A truncated, edited or lost questions.csv shows here instead of as
    a quietly smaller sample. Passes with no record of a figure are not checked on it."""
    frame = questions if len(questions) else empty_questions()
    summed = ["generated_tokens", "steps", "accepted"]
    sums = frame.groupby(["k", "repeat"])[summed].sum()
    counts = frame.groupby(["k", "repeat"]).size()
    out = {}
    for cell in cells:
        if not isinstance(cell, dict) or not {"k", "repeat"} <= set(cell):
            continue
        key = (int(cell["k"]), int(cell["repeat"]))
        have = {
            "rows": int(counts.get(key, 0)),
            **{name: int(sums[name].get(key, 0)) if key in sums.index else 0 for name in summed},
        }
        differ = [
            f"{name} {cell[name]} recorded, {have[name]} in {QUESTIONS_FILE}"
            for name in have
            if name in cell and isinstance(cell[name], int) and cell[name] != have[name]
        ]
        if differ:
            out[key] = "; ".join(differ)
    return out


def load_run(path, *, require_questions: bool = False) -> Run:
    """Load a run from its directory or its run.json.

    `questions` is an empty DataFrame when questions.csv is absent (partial run, or a bare
    run.json baseline) unless `require_questions`, which makes its absence an error.
    """
    run_json = resolve_run_json(path)
    meta = validate_meta(read_json(run_json, "run.json"), run_json)
    directory = run_json.parent
    try:
        questions = read_questions(directory / QUESTIONS_FILE)
    except FileNotFoundError:
        if require_questions:
            raise AlcheckError(
                f"no {QUESTIONS_FILE} beside {run_json}: per-question counts "
                "are needed here; keep questions.csv next to run.json"
            ) from None
        questions = empty_questions()
    if require_questions and len(questions) == 0:
        raise AlcheckError(
            f"{directory / QUESTIONS_FILE} has no rows: finish the run (`alcheck run --resume`) first"
        )
    if (directory / QUESTIONS_FILE).is_file():
        wrong = pass_mismatches(meta.get("cells") or [], questions)
        if wrong:
            (k, repeat), what = next(iter(sorted(wrong.items())))
            raise AlcheckError(
                f"{directory}: the {cell_name(k, repeat)} pass does not add up ({what}"
                f"{f'; {len(wrong) - 1} more passes disagree' if len(wrong) > 1 else ''}): "
                f"questions.csv was cut or edited; run `alcheck run --resume {directory}`, "
                "which runs such passes again"
            )
    return Run(meta=meta, questions=questions, dir=directory)


def write_run(directory, meta: dict, questions: pd.DataFrame | None = None) -> Path:
    """Write run.json (and questions.csv with the design's column order) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if questions is not None:
        if DRAFTED_STEPS not in questions.columns:
            questions = fill_drafted_steps(questions.copy())
        columns = [
            c
            for c in written_columns(LOSSLESS_COLUMNS + TREE_COLUMNS, DATASET_COLUMN in questions.columns)
            if c in questions.columns or c in QUESTION_COLUMNS
        ]
        questions[columns].to_csv(directory / QUESTIONS_FILE, index=False)
    write_json_atomic(directory / RUN_FILE, meta)
    return directory
