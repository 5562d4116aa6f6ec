"""Benchmark questions: the shipped sets (by short name, alcheck/prompts/catalog.py), any local
jsonl, or a hub dataset.

FastChat's `question.jsonl` format is the native one: one JSON object per line with
`question_id` (int or str), `category` (str) and `turns` (a non-empty list of str); other fields
(e.g. `reference`) are ignored. The EAGLE repo's and Spec-Bench's files have it. Other common
shapes map onto it, decided by the first record (every later one must have the same fields):
- the question: `turns`, else `question` (GSM8K), `prompt` (HumanEval; a string or a list of
  turns), `instruction` (Alpaca; a non-empty `input` follows it after a blank line);
- the id: `question_id`, else `task_id`, `id`, `idx`, `prompt_id`, else the record's index (0..);
- the category: `category`, else the dataset's name (the file's stem, or its folder's name for
  a file called question.jsonl).
A file with none of the question fields exits 2 naming the fields it has.

Local files are checked line by line first, so a malformed line is reported with its file and
line number, then loaded through the `datasets` library (`load_dataset("json", ...)`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from alcheck.errors import AlcheckError
from alcheck.options import is_count
from alcheck.prompts import catalog

MT_BENCH = "mt_bench"
# Hub copies of MT-Bench that may be passed instead of a file (only loadable with a hub).
_HUB_MT_BENCH = {"philschmid/mt-bench", "huggingfaceh4/mt_bench_prompts"}
HUB_PROBE_TIMEOUT_S = 3.0

_NOT_INSTALLED = (
    "the `datasets` library is not installed (Python imported the repo's datasets/ data folder "
    "instead): pip install datasets"
)


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]
    dataset: str = ""  # the label, in a run of several datasets (prompts/dataset_list.py); else ""


# --------------------------------------------------------------------------- helpers


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise AlcheckError(f"cannot read {path}: {e.strerror or e}: check the path") from None
    return h.hexdigest()


def import_datasets():
    """The `datasets` library, never the repo's `datasets/` data folder.

    Without the library installed, `import datasets` run from the repo root silently imports the
    top-level data folder as a namespace package (no `__file__`, no `load_dataset`).
    """
    try:
        import datasets
    except ImportError:
        raise AlcheckError(_NOT_INSTALLED) from None
    if getattr(datasets, "__file__", None) is None or not hasattr(datasets, "load_dataset"):
        raise AlcheckError(_NOT_INSTALLED)
    return datasets


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within `timeout` seconds.

    Runs in a daemon thread so that a slow DNS lookup cannot block the caller either.
    """
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    result: list[bool] = []

    def probe():
        import socket

        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def looks_like_file(spec: str) -> bool:
    if spec.endswith((".jsonl", ".json")) or spec.startswith((".", "/", "~")):
        return True
    return Path(spec).expanduser().exists()


def resolve_dataset_path(spec: str) -> Path | None:
    """The local file a dataset spec names (a short name -> the shipped file; an unshipped one
    exits 2 saying how to run it from a local copy); None for a hub id."""
    entry = catalog.named(spec)
    if entry is not None:
        return catalog.shipped_file(entry)
    if looks_like_file(spec):
        return Path(spec).expanduser()
    return None


def _catalog_entry(spec: str):
    """The catalog entry a spec means: by short name, a hub copy of MT-Bench, or a local file
    byte-identical to a known question file."""
    entry = catalog.named(spec)
    if entry is not None:
        return entry
    if spec.lower() in _HUB_MT_BENCH:
        return catalog.named(MT_BENCH)
    if not looks_like_file(spec):
        return None
    path = Path(spec).expanduser()
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    return catalog.by_sha256(_cached_sha256(str(path.resolve()), stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=64)
def _cached_sha256(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(path)


def dataset_name(spec: str) -> str:
    """A short dataset label for matching references: the catalog's name for a short name, for a
    hub copy of MT-Bench, or for a file byte-identical to a known question file (shipped, or an
    upstream one alcheck does not ship); otherwise the spec itself."""
    entry = _catalog_entry(str(spec))
    return entry.name if entry is not None else spec


def default_protocol(spec: str) -> str:
    """The protocol a dataset's published numbers used: the EAGLE repo's for its single-turn
    sets (humaneval, gsm8k, qa, alpaca, sum), vLLM's example for MT-Bench and anything unknown."""
    entry = _catalog_entry(str(spec))
    return entry.protocol if entry is not None else "vllm-example"


# --------------------------------------------------------------------------- validation


QUESTION_FIELDS = ("turns", "question", "prompt", "instruction")
ID_FIELDS = ("question_id", "task_id", "id", "idx", "prompt_id")


@dataclass(frozen=True)
class RecordShape:
    """Which fields of a file's records hold the question, its id and its category (decided by the
    first record); None: the record's index, the dataset's label."""

    question: str
    question_id: str | None
    category: str | None

    @property
    def fields(self) -> list[str]:
        return [f for f in (self.question_id, self.category, self.question) if f]


def record_shape(row, where: str) -> RecordShape:
    if not isinstance(row, dict):
        raise AlcheckError(f"{where}: expected a JSON object, got {type(row).__name__}: fix the line")
    question = next((f for f in QUESTION_FIELDS if f in row), None)
    if question is None:
        found = ", ".join(sorted(map(str, row))) or "none"
        raise AlcheckError(
            f"{where}: missing field 'turns' (nor question, prompt or instruction): its fields are {found}: "
            "name the question field one of those"
        )
    return RecordShape(
        question, next((f for f in ID_FIELDS if f in row), None), "category" if "category" in row else None
    )


def _question_turns(row: dict, field: str, where: str) -> tuple[str, ...]:
    value = row[field]
    if field == "turns" or (field == "prompt" and isinstance(value, list)):
        if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
            raise AlcheckError(f"{where}: {field} must be a non-empty list of strings: fix the line")
        return tuple(value)
    if not isinstance(value, str) or not value.strip():
        raise AlcheckError(f"{where}: {field} must be a non-empty string: fix the line")
    extra = row.get("input") if field == "instruction" else None
    return (f"{value}\n\n{extra}",) if isinstance(extra, str) and extra.strip() else (value,)


def _check_row(
    row, where: str, shape: RecordShape | None = None, index: int = 0, label: str = ""
) -> tuple[int | str, str, tuple[str, ...]]:
    """Validate one record of a file whose records have `shape` (default: this record's own);
    `where` names it in errors (e.g. 'q.jsonl line 3'), index and label stand in for a missing
    id and category."""
    shape = shape or record_shape(row, where)
    if not isinstance(row, dict):
        raise AlcheckError(f"{where}: expected a JSON object, got {type(row).__name__}: fix the line")
    for key in shape.fields:
        if key not in row:
            raise AlcheckError(f"{where}: missing field '{key}': every line needs {', '.join(shape.fields)}")
    qid = row[shape.question_id] if shape.question_id else index
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
        name = shape.question_id or "question_id"
        raise AlcheckError(f"{where}: {name} must be an int or a non-empty string, got {qid!r}: fix the line")
    category = row[shape.category] if shape.category else label
    if not isinstance(category, str):
        raise AlcheckError(f"{where}: category must be a string, got {category!r}: fix the line")
    return qid, category, _question_turns(row, shape.question, where)


def _label(path: Path) -> str:
    """A category for records without one: the file's name, or its folder's for question.jsonl."""
    return path.parent.name if path.stem.lower() in ("question", "questions") else path.stem


def validate_jsonl(path: str | Path) -> list[Question]:
    """Check a question file line by line; an AlcheckError names the file and line of the first
    problem (bad JSON, missing field, bad turns, duplicate question_id). Blank lines are skipped."""
    path = Path(path)
    if path.is_dir():
        raise AlcheckError(f"dataset {path} is a directory: pass the question .jsonl file inside it")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AlcheckError(
            f"dataset file {path} not found: pass a dataset name or an existing question .jsonl file"
        ) from None
    except OSError as e:
        raise AlcheckError(
            f"cannot read dataset file {path}: {e.strerror or e}: check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise AlcheckError(f"{path} line {line}: not valid UTF-8: save the file as UTF-8") from None

    questions: list[Question] = []
    seen: dict[int | str, int] = {}
    id_type: tuple[type, int] | None = None
    shape: RecordShape | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise AlcheckError(
                f"{where}: invalid JSON ({e.msg} at column {e.colno}): fix or remove the line"
            ) from None
        shape = shape or record_shape(row, where)
        qid, category, turns = _check_row(row, where, shape, len(questions), _label(path))
        if id_type is None:
            id_type = (type(qid), lineno)
        elif type(qid) is not id_type[0]:
            raise AlcheckError(
                f"{where}: question_id {qid!r} is a {type(qid).__name__} but line {id_type[1]} "
                f"used a {id_type[0].__name__}: use one type for all question_ids"
            )
        if qid in seen:
            raise AlcheckError(
                f"{where}: duplicate question_id {qid!r} (first "
                f"on line {seen[qid]}): make question_ids unique"
            )
        seen[qid] = lineno
        questions.append(Question(qid, category, turns))
    if not questions:
        raise AlcheckError(f"dataset file {path} has no questions: pass a non-empty question .jsonl file")
    return questions


# --------------------------------------------------------------------------- loading


def _describe(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def _load_rows(ds_lib, *args, **kwargs):
    """load_dataset with its progress bars silenced; returns a list of dict rows."""
    was_enabled = ds_lib.is_progress_bar_enabled()
    ds_lib.disable_progress_bars()
    try:
        ds = ds_lib.load_dataset(*args, **kwargs)
    finally:
        if was_enabled:
            ds_lib.enable_progress_bars()
    if hasattr(ds, "keys") and not hasattr(ds, "features"):  # a DatasetDict
        splits = list(ds.keys())
        split = "train" if "train" in splits else splits[0]
        ds = ds[split]
    return [dict(row) for row in ds]


def _load_local(path: Path) -> list[Question]:
    expected = validate_jsonl(path)
    ds_lib = import_datasets()
    try:
        rows = _load_rows(ds_lib, "json", data_files=str(path), split="train")
    except Exception as e:  # the file passed our checks, so this is the library's problem
        raise AlcheckError(
            f"the datasets library could not load {path} ({_describe(e)}): "
            "check the file's format or upgrade datasets"
        ) from None
    shape = record_shape(rows[0], f"{path} record 1") if rows else None
    questions = [
        Question(*_check_row(row, f"{path} record {i + 1}", shape, i, _label(path)))
        for i, row in enumerate(rows)
    ]
    if questions != expected:
        raise AlcheckError(
            f"the datasets library read {path} differently from its lines ({len(questions)} vs "
            f"{len(expected)} questions): check the file's format or upgrade datasets"
        )
    return questions


def _load_hub(spec: str) -> list[Question]:
    offline = _truthy_env("HF_HUB_OFFLINE") or _truthy_env("HF_DATASETS_OFFLINE")
    if not offline and not hub_reachable():
        raise AlcheckError(
            f"dataset '{spec}' is not a local file and the Hugging Face Hub is unreachable: "
            f"pass a dataset name ({catalog.names()}) or a local question .jsonl file"
        )
    ds_lib = import_datasets()
    try:
        rows = _load_rows(ds_lib, spec)
    except Exception as e:
        raise AlcheckError(
            f"could not load dataset '{spec}' from the Hugging Face Hub ({_describe(e)}): "
            f"pass a dataset name ({catalog.names()}) or a local question .jsonl file"
        ) from None
    questions: list[Question] = []
    seen: set = set()
    shape = None
    for i, row in enumerate(rows):
        where = f"hub dataset '{spec}' row {i + 1}"
        shape = shape or record_shape(row, where)
        q = Question(*_check_row(row, where, shape, i, spec))
        if q.question_id in seen:
            raise AlcheckError(
                f"hub dataset '{spec}' row {i + 1}: duplicate question_id {q.question_id!r}: "
                "use a local jsonl file"
            )
        seen.add(q.question_id)
        questions.append(q)
    if not questions:
        raise AlcheckError(f"hub dataset '{spec}' has no rows: pass a local question .jsonl file")
    return questions


def load_questions(spec: str, limit: int | None = None) -> list[Question]:
    """Questions for `spec`: a short name (catalog.py: 'mt_bench', 'humaneval', 'gsm8k', 'qa',
    'spec_bench_open' are shipped), a local .jsonl path, or else a hub dataset id. `limit` keeps
    the first N in file order."""
    if limit is not None and not is_count(limit):
        raise AlcheckError(f"--limit must be a positive integer, got {limit!r}: pass --limit 1 or more")
    spec = str(spec)
    path = resolve_dataset_path(spec)
    questions = _load_local(path) if path is not None else _load_hub(spec)
    return questions[:limit] if limit is not None else questions
