"""`alcheck gate`: fail CI when a run's AL regressed against a baseline.

This module measures; the baseline is read and validated in report/gate_baseline.py (a run
directory, a run.json, a reference table, or an already loaded dict/Run; bad input exits 2,
never 1) and the result is drawn in report/gate_render.py.

Rule (alcheck.metrics.verdict), per checked K, with d = AL(run) - AL(baseline):
- Baseline run with questions.csv and a run with questions: d is paired over the
  (question_id, turn) units both measured (a --limit run is compared on its questions); its
  noise is the run-to-run noise of both runs (metrics/noise.paired_noise).
- Otherwise (reference table, bare run.json): d = run AL minus the baseline value; noise = the
  run's repeat noise plus the baseline's (a reference's stated noise and rounding, or a bare
  run.json's stored noise).
- One-sided p-value of "no drop", Holm across the checked Ks (family-wise false alarms <= 5%).
- REGRESSION when the drop is credible (Holm) AND larger than the tolerance. A credible drop
  within the tolerance passes and says so. Deterministic runs (every repeat identical) have
  zero noise: any drop beyond numerical tolerance is credible.
The question bootstrap CI (what the change would be on other prompts) is shown separately.
Bad input raises AlcheckError (exit 2).

A run or baseline of several datasets (`--dataset a,b,c`) is gated dataset by dataset: one row
per (dataset, K), each paired on that dataset's questions (a reference table or a run of one
dataset meets the run's rows of its dataset), Holm across every gated row. A dataset the
baseline measured and the run did not is bad input (like a K), unless --force; the run's
datasets the baseline lacks are listed as skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.metrics import verdict as V
from alcheck.metrics.acceptance import pooled_al
from alcheck.metrics.noise import (
    Noise,
    combine,
    declared_deterministic,
    paired_frames,
    paired_noise,
    question_matrix,
    run_noise,
    summary_noise,
)
from alcheck.metrics.positions import DEFAULT_POSITION_TOLERANCE
from alcheck.metrics.stats import DEFAULT_N_BOOT, paired_bootstrap
from alcheck.prompts.dataset_list import dataset_labels
from alcheck.references.tables import hard_mismatches, mismatches
from alcheck.report.dataset_views import is_several, run_views
from alcheck.report.gate_baseline import (
    Baseline,
    baseline_from_run,
    load_baseline,
    summary_values,
    validate_baseline,
)
from alcheck.report.gate_positions import (
    GatePosition,
    allowed_drop,
    apply,
    check_tolerances,
    lacking_note,
    measure_positions,
    require_counts,
)
from alcheck.report.gate_render import RULE, append_step_summary, gate_table, print_gate
from alcheck.report.run_io import Run, empty_questions, load_run, validate_meta
from alcheck.report.verify import disagreement_line, verified_run

# the names callers import from here (the baseline and the rendering live in their own modules)
__all__ = [
    "RULE",
    "Baseline",
    "GateResult",
    "GateRow",
    "append_step_summary",
    "gate",
    "gate_table",
    "lacking_datasets",
    "load_baseline",
    "print_gate",
    "validate_baseline",
]


@dataclass
class GateRow:
    k: int
    al: float  # run AL (over the common units when paired)
    baseline: float
    diff: float  # al - baseline
    ci95: tuple[float, float] | None  # 95% CI of diff under run-to-run noise
    paired: bool
    n_questions: int | None
    regression: bool
    credible: bool  # Holm rejects "no drop"
    noise: Noise | None = None
    p_value: float | None = None
    ci_questions: tuple[float, float] | None = None  # question bootstrap (other prompts)
    dataset: str | None = None  # runs of several datasets: this row's
    allowed: float | None = None  # the AL this row may fall by (--relative-tolerance: per row)

    @property
    def where(self) -> str:
        return f"{self.dataset} K={self.k}" if self.dataset else f"K={self.k}"

    @property
    def status(self) -> str:
        if self.regression:
            return "REGRESSION"
        if self.credible and self.diff < 0:
            return "pass (drop within tolerance)"
        return "pass"

    @property
    def basis(self) -> str:
        if V.too_few_questions(self.noise, self.n_questions):
            return V.TOO_FEW_QUESTIONS
        return self.noise.basis if self.noise is not None else "no noise estimate"


@dataclass
class GateResult:
    baseline: str
    tolerance: float
    rows: list[GateRow]
    skipped: list[int] = field(default_factory=list)  # run Ks the baseline lacks (ks=None only)
    warnings: list[str] = field(default_factory=list)
    skipped_datasets: list[str] = field(default_factory=list)  # the run's datasets the baseline lacks
    relative_tolerance: float | None = None  # --relative-tolerance: a fraction of the baseline's AL
    per_position: bool = False  # --per-position
    position_tolerance: float = DEFAULT_POSITION_TOLERANCE
    positions: list[GatePosition] = field(default_factory=list)  # gate_positions.py

    @property
    def several(self) -> bool:
        return any(r.dataset is not None for r in self.rows)

    @property
    def passed(self) -> bool:
        return not any(r.regression for r in self.rows) and not any(p.regression for p in self.positions)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def failures(self) -> list[str]:
        from alcheck.report.gate_render import failure_lines

        return failure_lines(self)

    def markdown(self) -> str:
        from alcheck.report.gate_render import gate_markdown

        return gate_markdown(self)

    def skipped_lines(self) -> list[str]:
        lines = [f"skipped K={k}: not in the baseline" for k in self.skipped]
        return lines + [f"skipped dataset {d}: not in the baseline" for d in self.skipped_datasets]


def _load_subject(run, questions) -> Run:
    if isinstance(run, Run):
        return run
    if isinstance(run, dict):
        meta = validate_meta(run, "run")
        return Run(meta, questions if questions is not None else empty_questions(), Path("."))
    return load_run(run)


def _verified(base: Baseline, run: Run) -> tuple[Baseline, Run, list[str]]:
    """Both sides' summaries recomputed from their questions.csv, as `report` does, so an edited
    stored summary is neither used nor silently replaced: a warning names each that disagrees."""
    edited = []
    if run.has_questions:
        run, problems = verified_run(run, ci=False)  # the interval over questions decides nothing
        if problems:
            edited.append(f"⚠ {disagreement_line(problems, 'the run: ', 'the gate')}")
    if base.has_questions:
        checked, problems = verified_run(base.run, ci=False)
        base = replace(base, run=checked, values=summary_values(checked, base.name))
        if problems:
            edited.append(f"⚠ {disagreement_line(problems, f'the baseline {base.name}: ', 'the gate')}")
    return base, run, edited


def _run_values(run: Run) -> dict[int, float]:
    """The run's AL per K: recomputed from questions.csv when present, else its summary."""
    if run.has_questions:
        return {
            int(k): pooled_al(group)
            for k, group in run.questions.groupby("k", sort=True)
            if group["steps"].sum() > 0
        }
    return summary_values(run, "the run's run.json")


def _ks(ks) -> str:
    return ",".join(map(str, sorted(ks))) or "none"


def _check_ks(run_ks: list[int], baseline: Baseline, ks) -> tuple[list[int], list[int]]:
    if ks is None:
        checked = [k for k in sorted(run_ks) if k in baseline.values]
        skipped = [k for k in sorted(run_ks) if k not in baseline.values]
        if not checked:
            raise AlcheckError(
                f"the run's K ({_ks(run_ks)}) and the baseline's K ({_ks(baseline.values)}) do "
                "not overlap: gate against a baseline that measured these K"
            )
        lacking = [k for k in sorted(baseline.values) if k not in run_ks]
        if lacking:  # a CI gate must not pass a K it never looked at
            raise AlcheckError(
                f"the baseline {baseline.name} has K={_ks(lacking)}, which the run did not measure "
                f"(it has AL for K={_ks(run_ks)}): measure those K too, or pass --ks {_ks(checked)} "
                "to gate only the K both have"
            )
        return checked, skipped
    checked = sorted({int(k) for k in ks})
    missing_base = [k for k in checked if k not in baseline.values]
    if missing_base:
        raise AlcheckError(
            f"K={','.join(map(str, missing_base))} not in baseline {baseline.name} "
            f"(it has K={','.join(map(str, sorted(baseline.values)))}): pass --ks "
            "with K the baseline measured"
        )
    missing_run = [k for k in checked if k not in run_ks]
    if missing_run:
        raise AlcheckError(
            f"K={','.join(map(str, missing_run))} not in the run (it has "
            f"K={','.join(map(str, sorted(run_ks))) or 'none'}): pass --ks with K "
            "the run measured"
        )
    return checked, []


@dataclass
class _Measured:
    al: float
    baseline: float
    diff: float
    noise: Noise | None
    paired: bool
    n_questions: int | None
    ci_questions: tuple[float, float] | None


def _paired(run: Run, base: Baseline, k: int, n_boot: int, seed: int) -> _Measured | None:
    qb, qr = base.run.questions_for(k), run.questions_for(k)
    frames = paired_frames(qb, qr) if len(qb) and len(qr) else None
    if frames is None:
        return None
    ea, sa, eb, sb, n = frames
    diff, noise = paired_noise(
        ea,
        sa,
        eb,
        sb,
        declared_a=declared_deterministic(base.run.meta),
        declared_b=declared_deterministic(run.meta),
    )
    boot = paired_bootstrap(qb, qr, n_boot=n_boot, seed=[seed, k])
    return _Measured(boot.al_b, boot.al_a, diff, noise, True, n, boot.ci95)


def _unpaired(run: Run, base: Baseline, k: int, al: float) -> _Measured:
    declared = declared_deterministic(run.meta)
    if run.has_questions:
        noise_run = run_noise(*question_matrix(run.questions_for(k))[1:], declared=declared)
    else:
        noise_run = summary_noise(run.summary_for(k) or {}, declared)
    ref = base.values[k]
    entry = run.summary_for(k) or {}
    ci = entry.get("al_ci95")
    ci_q = (
        (ci[0] - ref, ci[1] - ref)
        if isinstance(ci, (list, tuple))
        and len(ci) == 2
        and all(isinstance(x, (int, float)) and math.isfinite(x) for x in ci)
        else None
    )
    return _Measured(
        al, ref, al - ref, combine(noise_run, base.noise(k)), False, entry.get("n_questions"), ci_q
    )


def _expected_cells(config: dict) -> int | None:
    ks, repeats = config.get("ks"), config.get("repeats")
    if isinstance(ks, list) and isinstance(repeats, int) and not isinstance(repeats, bool):
        return len(ks) * repeats
    return None


def _label(config: dict) -> str:
    return dataset_labels(config.get("dataset") or "")[0]


def lacking_datasets(base_config: dict, run_config: dict) -> list[str]:
    """The datasets a baseline measured and a run did not (a CI gate must not pass what it did
    not look at); none unless one side measured several datasets."""
    if not (isinstance(base_config.get("dataset"), list) or isinstance(run_config.get("dataset"), list)):
        return []
    mine = {label.lower() for label in dataset_labels(run_config.get("dataset") or "")}
    return [label for label in dataset_labels(base_config.get("dataset") or "") if label.lower() not in mine]


def _dataset_pairs(run: Run, base: Baseline, force: bool) -> tuple[list[tuple], list[str], list[str]]:
    """(dataset, the run's view, the baseline's view) per dataset both measured, in the run's
    order; the run's datasets the baseline lacks; warnings. Runs of one dataset: one pair
    labelled None, as before datasets were listed."""
    base_several = base.run is not None and is_several(base.run.meta)
    if not is_several(run.meta) and not base_several:
        return [(None, run, base)], [], []
    runs = dict(run_views(run)) if is_several(run.meta) else {_label(run.config): run}
    bases = (
        {label: baseline_from_run(view, f"{base.name} ({label})") for label, view in run_views(base.run)}
        if base_several
        else {_label(base.config): base}
    )
    by_lower = {label.lower(): view for label, view in bases.items()}
    pairs = [
        (label, view, by_lower[label.lower()]) for label, view in runs.items() if label.lower() in by_lower
    ]
    if not pairs:  # no dataset in common: refused before this unless --force, which gates the run as a whole
        return [(None, run, base)], [], []
    lacking = lacking_datasets(base.config, run.config)
    if lacking and not force:
        raise AlcheckError(
            f"the baseline {base.name} measured {', '.join(lacking)}, which the run did not (it has "
            f"{', '.join(runs)}): measure those datasets too, or pass --force to gate only the "
            "datasets both have"
        )
    warnings = [
        f"⚠ --force: dataset {d} of the baseline is not in the run, so it is not gated" for d in lacking
    ]
    return pairs, [label for label in runs if label.lower() not in by_lower], warnings


def gate(
    run_meta_or_path,
    baseline,
    tolerance: float = V.DEFAULT_TOLERANCE,
    ks=None,
    *,
    questions=None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    force: bool = False,
    relative_tolerance: float | None = None,
    per_position: bool = False,
    position_tolerance: float = DEFAULT_POSITION_TOLERANCE,
) -> GateResult:
    """Gate a run (Run, run.json dict (+ `questions`), or path) against `baseline`; with
    per_position also each draft position of each K, and with relative_tolerance a K's allowed
    drop is that fraction of the baseline's AL (report/gate_positions.py)."""
    if (
        tolerance is None
        or isinstance(tolerance, bool)
        or not math.isfinite(float(tolerance))
        or tolerance < 0
    ):
        raise AlcheckError(f"tolerance {tolerance!r} is invalid: pass a number >= 0")
    tolerance = float(tolerance)
    relative_tolerance, position_tolerance = check_tolerances(relative_tolerance, position_tolerance)
    base = load_baseline(baseline)
    run = _load_subject(run_meta_or_path, questions)
    base, run, edited = _verified(base, run)
    if run.meta.get("status") == "partial":  # a CI gate must not pass what it did not measure
        done, cells = len(run.meta.get("cells") or []), _expected_cells(run.config)
        where = f"alcheck run --resume {run.dir}" if str(run.dir) != "." else "alcheck run --resume DIR"
        raise AlcheckError(
            f"the run is partial ({done}{f' of {cells}' if cells else ''} (K, repeat) passes saved): "
            f"gate a finished run: finish it with `{where}`"
        )
    if per_position:
        require_counts(base, run)
    paired_mode = base.has_questions and run.has_questions
    skip = ("limit",) if paired_mode else ()
    hard = hard_mismatches(base.config, run.config, skip=skip)
    if hard and not force:  # first: other settings make every K moot, whichever the run measured
        # a drop could come from the settings, not the runner: that is bad input, not a regression
        raise AlcheckError(
            f"baseline {base.name} was measured with other settings ({'; '.join(hard)}): "
            "gate against a baseline with the run's settings, or pass --force to gate anyway"
        )
    pairs, skipped_datasets, warnings = _dataset_pairs(run, base, force)
    warnings += edited
    found = mismatches(base.config, run.config, skip=skip)
    if found:
        warnings.append("⚠ the baseline is not directly comparable: it differs in " + "; ".join(found) + ".")
    measured, skipped, positions, lacks = [], [], [], []  # (dataset, k, _Measured); GatePosition
    for label, view, base_view in pairs:
        run_values = _run_values(view)
        checked, lacking = _check_ks(list(run_values), base_view, ks)
        skipped += [k for k in lacking if k not in skipped]
        for k in checked:
            m = _paired(view, base_view, k, n_boot, seed) if paired_mode else None
            if paired_mode and m is None:
                warnings.append(
                    f"{f'{label} ' if label else ''}K={k}: no question in common with the baseline run; "
                    "compared the summary AL instead"
                )
            measured.append((label, k, m or _unpaired(view, base_view, k, run_values[k])))
            if per_position and m is not None:
                found_positions, lacking_counts = measure_positions(view, base_view, k, label)
                positions += found_positions
                lacks.append(lacking_counts)
    allowed = [allowed_drop(tolerance, relative_tolerance, m.baseline) for _, _, m in measured]
    judged = [p for p in positions if p.judged]
    decisions = V.decide(  # Holm across every gated (dataset, K) and, --per-position, their positions
        [m.diff for _, _, m in measured] + [p.diff for p in judged],
        [m.noise for _, _, m in measured] + [p.noise for p in judged],
        tolerance=allowed + [position_tolerance] * len(judged),
        side="less",
    )
    apply(positions, decisions[len(measured) :])
    note = lacking_note(lacks)
    if note:
        warnings.append(f"⚠ {note}")
    rows = [
        GateRow(
            k,
            m.al,
            m.baseline,
            m.diff,
            d.ci95(),
            m.paired,
            m.n_questions,
            d.reported,
            d.credible,
            m.noise,
            d.p_value,
            m.ci_questions,
            label,
            a,
        )
        for (label, k, m), d, a in zip(measured, decisions, allowed)
    ]
    few = [r for r in rows if V.too_few_questions(r.noise, r.n_questions)]
    if few:
        warnings.append(
            f"⚠ {', '.join(r.where for r in few)}: {V.TOO_FEW_QUESTIONS} (one question and one repeat "
            "show no noise), so no drop can be called credible: run more questions or --repeats 3"
        )
    unknown = [r for r in rows if r.noise is None and not V.too_few_questions(r.noise, r.n_questions)]
    if unknown:
        where = (
            ", ".join(r.where for r in unknown)
            if any(r.dataset for r in unknown)
            else f"K={','.join(str(r.k) for r in unknown)}"
        )
        warnings.append(
            f"⚠ {where}: no noise estimate, so no drop "
            "can be called credible: give the run questions.csv or more repeats"
        )
    if any(r.noise is not None and "conservative" in r.noise.basis for r in rows):
        warnings.append(
            "⚠ one repeat cannot show run-to-run noise; the spread between "
            "questions stands in for it (conservative): run --repeats 3 for power"
        )
    return GateResult(
        baseline=base.name,
        tolerance=tolerance,
        rows=rows,
        skipped=sorted(skipped),
        warnings=warnings,
        skipped_datasets=skipped_datasets,
        relative_tolerance=relative_tolerance,
        per_position=per_position,
        position_tolerance=position_tolerance,
        positions=positions,
    )
