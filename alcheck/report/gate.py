"""`alcheck gate`: fail CI when a run's AL regressed against a baseline.

Baseline: a run directory, a run.json, a reference table (results/references/*.json, or its
name), or an already loaded dict/Run.

Rule, per checked K, with d = AL(run) - AL(baseline) and tolerance t >= 0:
- Baseline without per-question data (reference table, bare run.json): d = run al_mean minus
  the baseline value; the "CI" shown is the run's al_ci95 minus the baseline value.
- Baseline run with questions.csv (and a run with questions): d is the *paired* difference
  over the (question_id, turn) units both runs measured (so a run on a --limit subset is
  compared on the same questions), with the paired cluster-bootstrap 95% CI
  (alcheck.metrics.stats.paired_bootstrap(baseline, run)).
- REGRESSION when d < -t (the AL fell by more than the tolerance), or when the paired 95% CI
  lies entirely below -t (significantly lower by more than the tolerance). A drop within the
  tolerance never fails, even when it is statistically significant.
- Every regression is labelled "significant" when its CI lies entirely below 0, otherwise
  "possibly noise" (CI reaches 0: more questions or repeats would tell).
The gate passes when no checked K regressed. Bad input raises AlcheckError (exit 2).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alcheck.errors import AlcheckError
from alcheck.metrics.stats import DEFAULT_N_BOOT, paired_bootstrap
from alcheck.report.compare import COMPARABLE_KEYS, config_differences
from alcheck.report.run_io import (RUN_SCHEMA, Run, empty_questions, load_run, read_json,
                                   validate_meta)
from alcheck.report.table import fmt, fmt_ci, fmt_signed, markdown_grid

REFERENCE_FIELDS = ("name", "source", "target", "draft", "method", "protocol", "dataset",
                    "max_tokens", "temperature", "notes", "values")


@dataclass
class Baseline:
    name: str
    kind: str  # "run" | "reference"
    values: dict[int, float]
    config: dict  # protocol/dataset/... for comparability warnings
    run: Run | None = None

    @property
    def has_questions(self) -> bool:
        return self.run is not None and self.run.has_questions


@dataclass
class GateRow:
    k: int
    al: float  # run AL (over the common units when paired)
    baseline: float
    diff: float  # al - baseline
    ci95: tuple[float, float] | None  # CI of diff
    paired: bool
    n_questions: int | None
    regression: bool
    significant: bool | None  # CI entirely below 0

    @property
    def status(self) -> str:
        if not self.regression:
            return "pass"
        return "REGRESSION" + ("" if self.significant is None else
                               " (significant)" if self.significant else " (possibly noise)")


@dataclass
class GateResult:
    baseline: str
    tolerance: float
    rows: list[GateRow]
    skipped: list[int] = field(default_factory=list)  # run Ks the baseline lacks (ks=None only)
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(r.regression for r in self.rows)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def failures(self) -> list[str]:
        lines = []
        for r in self.rows:
            if r.regression:
                ci = f", 95% CI {fmt_ci(r.ci95)}" if r.ci95 else ""
                lines.append(f"K={r.k}: AL {fmt(r.al, 3)} vs baseline {fmt(r.baseline, 3)}: "
                             f"{fmt_signed(r.diff, 3)} (allowed -{self.tolerance:g}{ci})"
                             f" — {r.status.lower()}")
        return lines

    def markdown(self) -> str:
        verdict = "✅ PASS" if self.passed else "❌ FAIL"
        header = ["K", "AL", "baseline", "diff", "95% CI of diff", "basis", "result"]
        rows = [[str(r.k), fmt(r.al), fmt(r.baseline), fmt_signed(r.diff), fmt_ci(r.ci95),
                 f"paired, {r.n_questions} questions" if r.paired else "summary",
                 "✅ pass" if not r.regression else f"❌ {r.status}"] for r in self.rows]
        lines = [f"### alcheck gate: {verdict} against `{self.baseline}` "
                 f"(tolerance {self.tolerance:g})", "",
                 markdown_grid(header, rows, ["r", "r", "r", "r", "r", "l", "l"])]
        notes = [*(f"skipped K={k}: not in the baseline" for k in self.skipped), *self.warnings]
        if notes:
            lines += ["", *(f"> {n}  " for n in notes)]
        return "\n".join(lines).rstrip() + "\n"


def _reference_values(table: dict, source) -> dict[int, float]:
    values = table.get("values")
    if not isinstance(values, dict) or not values:
        raise AlcheckError(f"{source}: `values` must be a non-empty object K -> AL: fix the "
                           "reference table")
    out = {}
    for key, value in values.items():
        try:
            k = int(key)
            al = float(value)
        except (TypeError, ValueError):
            raise AlcheckError(f"{source}: values entry {key!r}: {value!r} is not K -> AL: fix "
                               "the reference table") from None
        if k < 1 or not math.isfinite(al):
            raise AlcheckError(f"{source}: values entry {key!r}: {value!r} is invalid: fix the "
                               "reference table")
        out[k] = al
    return out


def _baseline_from_run(run: Run, name: str) -> Baseline:
    values = {int(s["k"]): float(s["al_mean"]) for s in run.summary if s.get("al_mean") is not None}
    return Baseline(name=name, kind="run", values=values, config=run.config, run=run)


def _baseline_from_dict(obj: dict, source: str) -> Baseline:
    if "schema" in obj:
        meta = validate_meta(obj, source)
        return _baseline_from_run(Run(meta, empty_questions(), Path(".")), source)
    if "values" in obj:
        return Baseline(name=str(obj.get("name") or source), kind="reference",
                        values=_reference_values(obj, source),
                        config={k: obj.get(k) for k in REFERENCE_FIELDS if k != "values"})
    raise AlcheckError(f"{source} is neither a run.json (schema {RUN_SCHEMA!r}) nor a reference "
                       "table (with `values`): pass a run directory, run.json or reference json")


def load_baseline(baseline) -> Baseline:
    """Baseline from a Run, a dict (run meta or reference table), a path, or a reference name."""
    if isinstance(baseline, Baseline):
        return baseline
    if isinstance(baseline, Run):
        return _baseline_from_run(baseline, str(baseline.dir))
    if isinstance(baseline, dict):
        return _baseline_from_dict(baseline, str(baseline.get("name") or "baseline"))
    path = Path(baseline)
    if path.is_dir():
        return _baseline_from_run(load_run(path), str(path))
    if not path.exists():
        from alcheck.paths import REFERENCES_DIR

        named = REFERENCES_DIR / f"{baseline}.json"
        if path.suffix == "" and named.is_file():
            path = named
        else:
            raise AlcheckError(f"baseline not found: {baseline}: pass a run directory, a run.json, "
                               "a reference json or the name of one in results/references/")
    obj = read_json(path, "baseline")
    if isinstance(obj, dict) and "schema" in obj:
        return _baseline_from_run(load_run(path), str(path))
    if not isinstance(obj, dict):
        raise AlcheckError(f"{path} does not hold a JSON object: pass a run.json or a reference "
                           "table")
    return _baseline_from_dict(obj, str(path))


def _load_subject(run, questions) -> Run:
    if isinstance(run, Run):
        return run
    if isinstance(run, dict):
        meta = validate_meta(run, "run")
        return Run(meta, questions if questions is not None else empty_questions(), Path("."))
    return load_run(run)


def _check_ks(run: Run, baseline: Baseline, ks) -> tuple[list[int], list[int]]:
    run_ks = [int(s["k"]) for s in run.summary if s.get("al_mean") is not None]
    if ks is None:
        checked = [k for k in sorted(run_ks) if k in baseline.values]
        skipped = [k for k in sorted(run_ks) if k not in baseline.values]
        if not checked:
            have = ",".join(map(str, sorted(run_ks))) or "none"
            raise AlcheckError(f"the run's K ({have}) and the "
                               f"baseline's K ({','.join(map(str, sorted(baseline.values)))}) do "
                               "not overlap: gate against a baseline that measured these K")
        return checked, skipped
    checked = sorted({int(k) for k in ks})
    missing_base = [k for k in checked if k not in baseline.values]
    if missing_base:
        raise AlcheckError(f"K={','.join(map(str, missing_base))} not in baseline {baseline.name} "
                           f"(it has K={','.join(map(str, sorted(baseline.values)))}): pass --ks "
                           "with K the baseline measured")
    missing_run = [k for k in checked if k not in run_ks]
    if missing_run:
        raise AlcheckError(f"K={','.join(map(str, missing_run))} not in the run (it has "
                           f"K={','.join(map(str, sorted(run_ks))) or 'none'}): pass --ks with K "
                           "the run measured")
    return checked, []


def gate(run_meta_or_path, baseline, tolerance: float = 0.02, ks=None, *, questions=None,
         n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> GateResult:
    """Gate a run (Run, run.json dict (+ `questions`), or path) against `baseline`."""
    if tolerance is None or not math.isfinite(float(tolerance)) or tolerance < 0:
        raise AlcheckError(f"tolerance {tolerance!r} is invalid: pass a number >= 0")
    tolerance = float(tolerance)
    run = _load_subject(run_meta_or_path, questions)
    base = load_baseline(baseline)
    checked, skipped = _check_ks(run, base, ks)
    warnings = []
    known = [key for key in COMPARABLE_KEYS
             if run.config.get(key) is not None and base.config.get(key) is not None]
    differences = config_differences(run.config, base.config, known)
    if differences:
        warnings.append("⚠ run and baseline differ in " + "; ".join(differences)
                        + ": AL is not directly comparable")
    if run.meta.get("status") == "partial":
        warnings.append("⚠ the run is partial: only its finished passes are gated")
    rows = []
    for k in checked:
        entry = run.summary_for(k)
        row = None
        if base.has_questions and run.has_questions:
            qb, qr = base.run.questions_for(k), run.questions_for(k)
            if len(qb) and len(qr):
                try:
                    p = paired_bootstrap(qb, qr, n_boot=n_boot, seed=[seed, k])
                except ValueError:
                    warnings.append(f"K={k}: no question in common with the baseline run; "
                                    "compared the summary AL instead")
                else:
                    lo, hi = p.ci95
                    regression = p.diff < -tolerance or hi < -tolerance
                    row = GateRow(k, p.al_b, p.al_a, p.diff, p.ci95, True, p.n_questions,
                                  regression, bool(hi < 0))
        if row is None:
            al, ref = float(entry["al_mean"]), base.values[k]
            ci = entry.get("al_ci95")
            diff_ci = ((ci[0] - ref, ci[1] - ref)
                       if ci and ci[0] is not None and ci[1] is not None else None)
            row = GateRow(k, al, ref, al - ref, diff_ci, False, None, al - ref < -tolerance,
                          None if diff_ci is None else bool(diff_ci[1] < 0))
        rows.append(row)
    return GateResult(baseline=base.name, tolerance=tolerance, rows=rows, skipped=skipped,
                      warnings=warnings)


def gate_table(result: GateResult) -> Table:
    table = Table(title=f"AL gate against {result.baseline}", title_justify="left",
                  caption=f"tolerance {result.tolerance:g}; AL = tokens per verification step "
                          "(accepted drafts + 1 bonus token); diff = run − baseline",
                  caption_justify="left")
    for name in ("K", "AL", "baseline", "diff", "95% CI of diff", "basis"):
        table.add_column(name, justify="right" if name != "basis" else "left")
    table.add_column("result")
    for r in result.rows:
        table.add_row(str(r.k), fmt(r.al), fmt(r.baseline), fmt_signed(r.diff), fmt_ci(r.ci95),
                      f"paired, {r.n_questions} q" if r.paired else "summary",
                      Text(r.status, style="green" if not r.regression else "bold red"))
    return table


def append_step_summary(result: GateResult) -> Path | None:
    """Append result.markdown() to $GITHUB_STEP_SUMMARY when that variable is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(result.markdown() + "\n")
    except OSError as exc:
        raise AlcheckError(f"cannot append to GITHUB_STEP_SUMMARY={target} ({exc.strerror}): "
                           "check the path") from None
    return Path(target)


def print_gate(result: GateResult, console: Console, *, step_summary: bool = True) -> int:
    """Print the gate table and verdict, append to $GITHUB_STEP_SUMMARY, return the exit code."""
    console.print(gate_table(result))
    for k in result.skipped:
        console.print(f"skipped K={k}: not in the baseline")
    for warning in result.warnings:
        console.print(warning, style="yellow", highlight=False)
    if result.passed:
        console.print(f"[bold green]PASS[/]: no K fell more than {result.tolerance:g} below "
                      "the baseline")
    else:
        console.print("[bold red]FAIL[/]: AL regression", highlight=False)
        for line in result.failures():
            console.print("  " + line, highlight=False)
    if step_summary:
        append_step_summary(result)
    return result.exit_code
