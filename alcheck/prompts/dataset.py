"""Benchmark questions: MT-Bench (shipped), any local jsonl in the same format, or a hub dataset.

The file format is FastChat's `question.jsonl`: one JSON object per line with `question_id`
(int or str), `category` (str) and `turns` (a non-empty list of str); other fields (e.g.
`reference`) are ignored. Spec-Bench's 480-question file has the same fields.

Local files are checked line by line first, so a malformed line is reported with its file and
line number, then loaded through the `datasets` library (`load_dataset("json", ...)`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from alcheck import paths
from alcheck.errors import AlcheckError

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


def _looks_like_file(spec: str) -> bool:
    if spec.endswith((".jsonl", ".json")) or spec.startswith((".", "/", "~")):
        return True
    return Path(spec).expanduser().exists()


def resolve_dataset_path(spec: str) -> Path | None:
    """The local file a dataset spec names (`mt_bench` -> the shipped file); None for a hub id."""
    if spec == MT_BENCH:
        return paths.MT_BENCH_FILE
    if _looks_like_file(spec):
        return Path(spec).expanduser()
    return None


def dataset_name(spec: str) -> str:
    """A short dataset label for matching references: `mt_bench` for the shipped file, any
    byte-identical copy of it, or a hub copy of MT-Bench; otherwise the spec itself."""
    if spec == MT_BENCH or spec.lower() in _HUB_MT_BENCH:
        return MT_BENCH
    path = resolve_dataset_path(spec)
    if path is not None and path.is_file() and paths.MT_BENCH_FILE.is_file():
        try:
            if file_sha256(path) == file_sha256(paths.MT_BENCH_FILE):
                return MT_BENCH
        except AlcheckError:
            pass
    return spec


# --------------------------------------------------------------------------- validation


def _check_row(row, where: str) -> tuple[int | str, str, tuple[str, ...]]:
    """Validate one record; `where` names it in errors (e.g. 'q.jsonl line 3')."""
    if not isinstance(row, dict):
        raise AlcheckError(f"{where}: expected a JSON object, got {type(row).__name__}: fix the line")
    for key in ("question_id", "category", "turns"):
        if key not in row:
            raise AlcheckError(
                f"{where}: missing field '{key}': every line needs question_id, category and turns"
            )
    qid = row["question_id"]
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
        raise AlcheckError(f"{where}: question_id must be an int or a non-empty string, got {qid!r}: fix the line")
    category = row["category"]
    if not isinstance(category, str):
        raise AlcheckError(f"{where}: category must be a string, got {category!r}: fix the line")
    turns = row["turns"]
    if (
        not isinstance(turns, list)
        or not turns
        or not all(isinstance(t, str) for t in turns)
    ):
        raise AlcheckError(f"{where}: turns must be a non-empty list of strings: fix the line")
    return qid, category, tuple(turns)


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
            f"dataset file {path} not found: pass 'mt_bench' or an existing question .jsonl file"
        ) from None
    except OSError as e:
        raise AlcheckError(f"cannot read dataset file {path}: {e.strerror or e}: check its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise AlcheckError(f"{path} line {line}: not valid UTF-8: save the file as UTF-8") from None

    questions: list[Question] = []
    seen: dict[int | str, int] = {}
    id_type: tuple[type, int] | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise AlcheckError(f"{where}: invalid JSON ({e.msg} at column {e.colno}): fix or remove the line") from None
        qid, category, turns = _check_row(row, where)
        if id_type is None:
            id_type = (type(qid), lineno)
        elif type(qid) is not id_type[0]:
            raise AlcheckError(
                f"{where}: question_id {qid!r} is a {type(qid).__name__} but line {id_type[1]} "
                f"used a {id_type[0].__name__}: use one type for all question_ids"
            )
        if qid in seen:
            raise AlcheckError(
                f"{where}: duplicate question_id {qid!r} (first on line {seen[qid]}): make question_ids unique"
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
    questions = [Question(*_check_row(row, f"{path} record {i + 1}")) for i, row in enumerate(rows)]
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
            "pass 'mt_bench' or a local question .jsonl file (question_id, category, turns)"
        )
    ds_lib = import_datasets()
    try:
        rows = _load_rows(ds_lib, spec)
    except Exception as e:
        raise AlcheckError(
            f"could not load dataset '{spec}' from the Hugging Face Hub ({_describe(e)}): "
            "pass 'mt_bench' or a local question .jsonl file (question_id, category, turns)"
        ) from None
    questions: list[Question] = []
    seen: set = set()
    for i, row in enumerate(rows):
        if "turns" not in row and "prompt" in row:  # HuggingFaceH4/mt_bench_prompts layout
            row = {
                "question_id": row.get("prompt_id"),
                "category": row.get("category"),
                "turns": row["prompt"],
            }
        q = Question(*_check_row(row, f"hub dataset '{spec}' row {i + 1}"))
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
    """Questions for `spec`: 'mt_bench' (the shipped 80 questions, ids 81-160), a local .jsonl
    path in the same format, or else a hub dataset id. `limit` keeps the first N in file order."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise AlcheckError(f"--limit must be a positive integer, got {limit!r}: pass --limit 1 or more")
    spec = str(spec)
    path = resolve_dataset_path(spec)
    questions = _load_local(path) if path is not None else _load_hub(spec)
    return questions[:limit] if limit is not None else questions
