"""`alcheck gate`'s baseline: a run directory, a run.json, a reference table
(results/references/*.json, or its name), or an already loaded dict/Run, read and validated
before anything else: an al_mean that is missing, null, a string or non-finite exits 2, never 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.metrics.noise import Noise, declared_deterministic, reference_noise, summary_noise
from alcheck.references.tables import FIELDS as REFERENCE_FIELDS
from alcheck.references.tables import IMPORT_FIELDS, check_al
from alcheck.report.run_io import (
    RUN_FILE,
    RUN_SCHEMA,
    Run,
    empty_questions,
    load_run,
    read_json,
    validate_meta,
)


@dataclass
class Baseline:
    name: str
    kind: str  # "run" | "reference"
    values: dict[int, float]
    config: dict  # target/protocol/max_tokens/... for comparability warnings
    run: Run | None = None
    stated_noise: float | None = None  # a reference's published run-to-run SD

    @property
    def has_questions(self) -> bool:
        return self.run is not None and self.run.has_questions

    def noise(self, k: int) -> Noise | None:
        """Run-to-run noise of the baseline value at K (summary path)."""
        if self.kind == "reference":
            return reference_noise(self.values[k], self.stated_noise)
        if self.run is None:
            return None
        return summary_noise(self.run.summary_for(k), declared_deterministic(self.run.meta))


def _finite_al(value, source: str, k) -> float:
    """A summary AL value: a number in [1, K+1], else a one-line error (exit 2)."""
    return check_al(value, k, f"{source}: al_mean of K={k}", "restore the file or re-run it")


def summary_values(run: Run, source: str) -> dict[int, float]:
    values = {}
    for entry in run.summary:
        k = entry.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise AlcheckError(
                f"{source}: summary K {k!r} is not a positive integer: restore the file or re-run it"
            )
        values[k] = _finite_al(entry.get("al_mean"), source, k)
    return values


def _reference_values(table: dict, source) -> dict[int, float]:
    values = table.get("values")
    if not isinstance(values, dict) or not values:
        raise AlcheckError(f"{source}: `values` must be a non-empty object K -> AL: fix the reference table")
    out = {}
    for key, value in values.items():
        if not re.fullmatch(r"[1-9][0-9]*", str(key)):
            raise AlcheckError(
                f"{source}: values entry {key!r}: {value!r} is not K -> AL: fix the reference table"
            )
        out[int(key)] = check_al(
            value, int(key), f"{source}: values entry {key!r}", "fix the reference table"
        )
    return out


def baseline_from_run(run: Run, name: str) -> Baseline:
    return Baseline(name=name, kind="run", values=summary_values(run, name), config=run.config, run=run)


def _stated_noise(obj: dict, source: str) -> float | None:
    noise = obj.get("noise")
    if noise is None:
        return None
    if (
        isinstance(noise, bool)
        or not isinstance(noise, (int, float))
        or not math.isfinite(noise)
        or noise < 0
    ):
        raise AlcheckError(
            f"{source}: `noise` {noise!r} must be a number >= 0 or null: fix the reference table"
        )
    return float(noise)


def _baseline_from_dict(obj: dict, source: str) -> Baseline:
    if "schema" in obj:
        meta = validate_meta(obj, source)
        return baseline_from_run(Run(meta, empty_questions(), Path(".")), source)
    if "values" in obj:
        return Baseline(
            name=str(obj.get("name") or source),
            kind="reference",
            values=_reference_values(obj, source),
            config={k: obj.get(k) for k in (*REFERENCE_FIELDS, *IMPORT_FIELDS) if k != "values"},
            stated_noise=_stated_noise(obj, source),
        )
    raise AlcheckError(
        f"{source} is neither a run.json (schema {RUN_SCHEMA!r}) nor a reference "
        "table (with `values`): pass a run directory, run.json or reference json"
    )


def load_baseline(baseline) -> Baseline:
    """Baseline from a Run, a dict (run meta or reference table), a path, or a reference name.

    Validates everything the gate will read, so `alcheck run --gate` can call it before the
    sweep: any problem is an AlcheckError (exit 2)."""
    if isinstance(baseline, Baseline):
        return baseline
    if isinstance(baseline, Run):
        return baseline_from_run(baseline, str(baseline.dir))
    if isinstance(baseline, dict):
        return _baseline_from_dict(baseline, str(baseline.get("name") or "baseline"))
    path = Path(baseline)
    if path.is_dir():
        return baseline_from_run(load_run(path), str(path))
    if not path.exists():
        from alcheck import paths

        named = [d / f"{baseline}.json" for d in paths.reference_dirs()]
        if path.suffix == "" and any(p.is_file() for p in named):
            path = next(p for p in named if p.is_file())
        else:
            raise AlcheckError(
                f"baseline not found: {baseline}: pass a run directory, a run.json, "
                "a reference json or the name of one in results/references/"
            )
    if path.suffix.lower() != ".json":  # questions.csv beside a run.json is a healthy file, not a baseline
        folder = path.parent if (path.parent / RUN_FILE).is_file() else None
        raise AlcheckError(
            f"baseline {path} is a {path.suffix or 'plain'} file: a baseline is a run folder (or its "
            f"run.json), a reference table json or a reference name: pass "
            + (f"the run folder {folder}" if folder else "one of those")
        )
    obj = read_json(path, "baseline")
    if isinstance(obj, dict) and "schema" in obj:
        return baseline_from_run(load_run(path), str(path))
    if not isinstance(obj, dict):
        raise AlcheckError(f"{path} does not hold a JSON object: pass a run.json or a reference table")
    return _baseline_from_dict(obj, str(path))


validate_baseline = load_baseline  # the name `run --gate` uses before its sweep
