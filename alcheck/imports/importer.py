"""Read a file in a named format, resolve its settings, convert it and write it out."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from alcheck import paths
from alcheck.errors import AlcheckError
from alcheck.imports import FORMATS
from alcheck.imports.convert import convert
from alcheck.imports.questions import match_dataset
from alcheck.imports.records import FILE, UNSTATED, Setting
from alcheck.imports.settings import Given, resolve
from alcheck.imports.speedup import speedup
from alcheck.imports.texts import compare_texts, first_turn_texts, run_answers
from alcheck.imports.write import reference_dicts, write_references, write_run
from alcheck.references.tables import load_references, select_references


@dataclass
class ImportRequest:
    fmt: str
    path: Path
    given: Given = field(default_factory=Given)
    out: Path | None = None  # run: the directory; reference: the folder of the tables
    name: str | None = None  # reference tables: the name (a suffix per group)
    baseline: Path | None = None  # the baseline answer file of a speculative one (speedup)
    tokenizer: Path | None = None  # re-tokenizes the baseline's answers, as the source does
    against: Path | None = None  # a run whose turn-1 answer texts to compare with
    reference: str = "auto"  # references stored in the run (as `run --reference`)


@dataclass
class ImportResult:
    kind: str  # "run" | "reference"
    paths: list[Path]
    meta: dict | None = None  # the run's run.json
    tables: list[dict] = field(default_factory=list)


def module(fmt: str):
    if fmt not in FORMATS:
        raise AlcheckError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[fmt])


def default_name(path: Path) -> str:
    return "import-" + re.sub(r"[^a-z0-9._-]+", "-", Path(path).stem.lower()).strip("-")


def run_import(req: ImportRequest) -> ImportResult:
    reader = module(req.fmt)
    if reader.KIND == "reference":
        for flag, value in (
            ("--baseline", req.baseline),
            ("--tokenizer", req.tokenizer),
            ("--against", req.against),
        ):
            if value is not None:
                raise AlcheckError(f"{flag}: {req.fmt} files hold whole-run counts only: drop {flag}")
        return _reference(reader, req)
    if req.tokenizer is not None and req.baseline is None:
        raise AlcheckError(
            "--tokenizer re-tokenizes the baseline's answers: pass --baseline too, or drop --tokenizer"
        )
    return _run(reader, req)


def _reference(reader, req: ImportRequest) -> ImportResult:
    data = reader.read(Path(req.path), req.given)
    settings = {suffix: resolve(stated, req.given, data.path) for suffix, stated in data.stated.items()}
    tables = reference_dicts(data, settings, req.name or default_name(data.path))
    if req.out is None:  # read beside the shipped tables from now on: their names are taken
        shipped = {r.name for r in load_references(paths.REFERENCES_DIR)}
        clash = [t["name"] for t in tables if t["name"] in shipped]
        if clash:
            raise AlcheckError(f"reference name '{clash[0]}' is a shipped table's: pass another --name")
    written = write_references(tables, req.out or paths.LOCAL_REFERENCES_DIR)  # never the shipped folder
    return ImportResult("reference", written, tables=tables)


def _run(reader, req: ImportRequest) -> ImportResult:
    data = reader.read(Path(req.path), req.given)
    settings = resolve(data.stated, req.given, data.path)
    if settings["limit"].origin == UNSTATED:  # a per-question file lists the questions it measured
        settings["limit"] = Setting(None, FILE, "the questions in the file")
    data.notes += match_dataset(data.turns, settings["dataset"].value)
    converted = convert(data, settings)
    extra: dict = {}
    if req.baseline is not None:
        if not hasattr(reader, "read_baseline"):
            raise AlcheckError(f"--baseline: {req.fmt} files carry no wall times: drop --baseline")
        tokenizer = None
        if req.tokenizer is not None:
            from alcheck.prompts.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(Path(req.tokenizer), "--tokenizer")
        extra["speedup"] = speedup(
            data,
            Path(req.baseline),
            reader.read_baseline(Path(req.baseline)),
            tokenizer,
            None if req.tokenizer is None else str(req.tokenizer),
        )
    if req.against is not None:
        if not converted.answers:
            raise AlcheckError(f"--against: {req.fmt} files carry no answer texts: drop --against")
        extra["texts"] = compare_texts(
            first_turn_texts(converted.answers), run_answers(req.against, "--against"), str(req.against)
        )
    s = {name: setting.value for name, setting in settings.items()}
    refs = select_references(
        load_references(),
        req.reference,
        s["target"] or "",
        s["draft"] or "",
        s["method"] or "",
        s["dataset"],
        s["topk"] or 1,
    )
    out = Path(req.out) if req.out else Path("results") / "runs" / f"{default_name(data.path)}-{req.fmt}"
    meta = write_run(data, settings, converted, out, [r.to_dict() for r in refs], extra)
    return ImportResult("run", [out], meta=meta)
