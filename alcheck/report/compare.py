"""`alcheck compare RUN_A RUN_B`: is the AL difference between two runs real or noise?

Per K present in both runs: the pooled AL of each run over their common (question_id, turn)
units and diff = AL(B) - AL(A). The verdict follows the one decision rule
(alcheck.metrics.verdict): run-to-run noise of both runs on those same questions
(metrics/noise.paired_noise), a two-sided p-value per K, Holm across the Ks (family-wise false
alarms <= 5%), and "B higher" / "A higher" only when the change is credible AND larger than
the tolerance; credible but smaller is "within tolerance"; else "no detectable change".
The paired question bootstrap CI (stats.paired_bootstrap, studentized) is shown separately:
what the change would be on other prompts.

A change that a known counting difference between engines explains (report/engine_counting.py:
the same tokens in the same steps, one run also counting the drafts accepted past EOS) gets
that as its verdict instead of "A/B higher".

When a run is partial, each K compares only the (K, repeat) passes both runs recorded
(report/partial_runs.py), with one warning line naming what was left out.

Runs are only comparable under the same protocol, dataset, max_tokens and temperature (and,
above temperature 0, the same draft-sampling convention); otherwise compare_runs refuses
(AlcheckError, exit 2) unless force=True.

A run of several datasets (`--dataset a,b,c`) is compared dataset by dataset: one row per
(dataset, K) both runs measured, each dataset's rows paired on its own questions (a run of one
dataset pairs with the same dataset in a run of several), Holm across every row. A run has one
protocol, so rows measured under different protocols are refused with the runs. Per category the
change B − A is shown beside it, descriptive (no verdict).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alcheck.errors import AlcheckError
from alcheck.metrics import verdict as V
from alcheck.metrics.acceptance import pooled_al
from alcheck.metrics.noise import declared_deterministic, paired_frames, paired_noise
from alcheck.metrics.positions import (
    DEFAULT_POSITION_TOLERANCE,
    MIN_REACHED,
    TOO_FEW_STEPS,
    has_position_counts,
    paired_positions,
)
from alcheck.metrics.stats import DEFAULT_N_BOOT, paired_bootstrap
from alcheck.prompts.dataset_list import dataset_labels
from alcheck.references.tables import unstated_keys
from alcheck.report.breakdown import category_changes, category_grid
from alcheck.report.dataset_views import is_several, run_views
from alcheck.report.engine_counting import (
    CONVENTION,
    TAIL,
    convention_difference,
    convention_of,
    tail_counting_difference,
)
from alcheck.report.lossless_note import lossless_note
from alcheck.report.numbers import fmt_p
from alcheck.report.partial_runs import common_passes
from alcheck.report.positions import (
    POSITION_HEADER,
    POSITION_RULE,
    PositionVerdict,
    first_changed,
    first_changed_line,
    judge,
    lacking_counts,
    listed,
    no_counts_note,
    position_cells,
    unlisted_note,
)
from alcheck.report.run_io import Run, load_run
from alcheck.report.table import DASH, fitted, fmt, fmt_ci, fmt_signed, markdown_grid
from alcheck.runner.table import DEFAULT_RUNNER

COMPARABLE_KEYS = ("protocol", "dataset", "max_tokens", "temperature")
SAMPLED_KEYS = ("draft_sampling",)  # comparable only when equal, above temperature 0
INFO_KEYS = (
    "target",
    "draft",
    "method",
    "dtype",
    "device",
    "turns",
    "system_prompt",
    "limit",
    "repeats",
    "max_batch_size",
    "block_size",
    "kv_lookahead",
    "engine",
    "runner",
    "topk",
    "num_draft_tokens",
    "tensor_parallel_size",
)
# what a run written before a setting existed used (a chain, one process, the paged runner)
DEFAULTS = {"topk": 1, "num_draft_tokens": None, "tensor_parallel_size": 1, "runner": DEFAULT_RUNNER}
NO_COMMON = "no common questions"


def _same(x, y) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return float(x) == float(y)
    return x == y


def config_differences(config_a: dict, config_b: dict, keys) -> list[str]:
    """'key: A vs B' for every key whose value differs between the two configs."""

    def get(config, key):
        return config.get(key, DEFAULTS.get(key))

    return [
        f"{key} {get(config_a, key)!r} vs {get(config_b, key)!r}"
        for key in keys
        if not _same(get(config_a, key), get(config_b, key))
    ]


def prompt_differences(a, b) -> list[str]:
    """'prompts differ ...' when both runs recorded prompt_hash and a common question's turn-1
    prompt has other token ids (another tokenizer, template or protocol). Later turns hold the
    earlier answers, which may rightly differ (sampling), so only turn 1 is compared."""
    qa, qb = a.questions, b.questions
    if "prompt_hash" not in qa.columns or "prompt_hash" not in qb.columns:
        return []

    def first_turns(q):
        q = q[(q["turn"] == 1) & q["prompt_hash"].notna()]
        return q.drop_duplicates("question_id").set_index("question_id")["prompt_hash"].astype(str)

    ha, hb = first_turns(qa), first_turns(qb)
    common = ha.index.intersection(hb.index)
    differ = int((ha.loc[common] != hb.loc[common]).sum())
    if not differ:
        return []
    return [
        f"prompts (prompt_hash differs on {differ} of {len(common)} common questions' turn 1: "
        "the runs did not send the same token ids)"
    ]


def import_warnings(a: Run, b: Run) -> list[str]:
    """What an imported side leaves open: settings nobody stated, prompt_hash, and its turn-1
    answer texts against the other run's (when both keep them in answers.jsonl)."""
    from alcheck.imports.texts import compare_texts, run_answers
    from alcheck.rundir.answers import ANSWERS_FILE

    out = []
    for side, run in (("A", a), ("B", b)):
        missing = unstated_keys(run.config)
        if missing:
            out.append(f"{side}'s source does not state {', '.join(missing)}: compared as if they matched")
        if isinstance(run.meta.get("imported"), dict):
            out.append(
                f"{side} is imported ({run.meta['imported'].get('format')}): its prompt_hash is empty, "
                "the file does not record prompt token ids"
            )
    imported = any(isinstance(run.meta.get("imported"), dict) for run in (a, b))
    # two built-in runs are compared by prompt_hash and traces; sampled texts differ by design
    if (
        imported
        and not any(sampled(run.config) for run in (a, b))
        and (a.dir / ANSWERS_FILE).is_file()
        and (b.dir / ANSWERS_FILE).is_file()
    ):
        texts = compare_texts(run_answers(a.dir, "run A"), run_answers(b.dir, "run B"), str(b.dir))
        if texts["identical"] != texts["common"] or not texts["common"]:
            out.append(texts["verdict"])
    return out


def sampled(config: dict) -> bool:
    try:
        return float(config.get("temperature") or 0) > 0
    except (TypeError, ValueError):
        return False


def comparable_keys(config_a: dict, config_b: dict) -> tuple[str, ...]:
    """The settings two runs must share; the draft convention matters only when sampling."""
    return COMPARABLE_KEYS + (SAMPLED_KEYS if sampled(config_a) or sampled(config_b) else ())


@dataclass
class CompareRow:
    k: int
    al_a: float | None
    al_b: float | None
    diff: float | None
    ci95: tuple[float, float] | None  # 95% CI of diff under run-to-run noise
    verdict: str
    n_questions: int
    n_units: int
    noise: dict | None = None  # Noise.to_dict(): se, df, basis, deterministic
    p_value: float | None = None
    ci_questions: tuple[float, float] | None = None  # paired question bootstrap (other prompts)
    counting_note: str | None = None  # a known counting difference between engines explains the change
    lossless_note: str | None = (
        None  # a run failed the T > 0 lossless check at this K (report/lossless_note.py)
    )
    dataset: str | None = None  # a comparison of runs of several datasets: the dataset of this row
    per_position: list[PositionVerdict] = field(
        default_factory=list
    )  # report/positions.py; [] without counts
    first_changed_position: int | None = None  # the lowest position whose verdict is a change

    @property
    def basis(self) -> str:
        return self.noise["basis"] if self.noise else DASH

    @property
    def where(self) -> str:
        return f"{self.dataset} K={self.k}" if self.dataset else f"K={self.k}"


@dataclass
class CompareResult:
    a: str
    b: str
    rows: list[CompareRow]
    only_a: list[int] = field(default_factory=list)
    only_b: list[int] = field(default_factory=list)
    datasets_only_a: list[str] = field(default_factory=list)  # runs of several datasets: not compared
    datasets_only_b: list[str] = field(default_factory=list)
    categories: list[dict] = field(default_factory=list)  # breakdown.category_changes: descriptive
    mismatches: list[str] = field(default_factory=list)  # comparability keys (needed --force)
    differences: list[str] = field(default_factory=list)  # other config differences (info)
    warnings: list[str] = field(default_factory=list)  # unstated settings, imports' prompt_hash, texts
    forced: bool = False
    n_boot: int = DEFAULT_N_BOOT
    tolerance: float = V.DEFAULT_TOLERANCE
    position_tolerance: float = DEFAULT_POSITION_TOLERANCE

    @property
    def several(self) -> bool:
        return any(r.dataset is not None for r in self.rows)

    def position_lines(self) -> list[str]:
        """The first position that changed, per K row that has one; else one line saying none did."""
        lines = [
            first_changed_line(r.where, v)
            for r in self.rows
            if (v := first_changed(r.per_position)) is not None
        ]
        if any(r.per_position for r in self.rows) and not lines:
            lines = ["no draft position changed (conditional acceptance per position)"]
        return lines + [n for r in self.rows if (n := unlisted_note(r.where, r.per_position))]

    def position_rule(self) -> str:
        return POSITION_RULE.format(t=self.position_tolerance, m=MIN_REACHED)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["diff_definition"] = "AL(B) - AL(A), pooled over the (question_id, turn) units both runs have" + (
            " of the row's dataset" if self.several else ""
        )
        out["rule"] = RULE.format(t=self.tolerance)
        out["position_rule"] = self.position_rule()
        for row in out["rows"]:
            for key in ("ci95", "ci_questions"):
                row[key] = list(row[key]) if row[key] is not None else None
            for entry in row["per_position"]:
                entry["ci95"] = list(entry["ci95"]) if entry["ci95"] is not None else None
            if row["dataset"] is None:  # runs of one dataset: the rows as before datasets were listed
                del row["dataset"]
        for key in ("datasets_only_a", "datasets_only_b"):
            if not out[key]:
                del out[key]
        return out

    def skipped_lines(self) -> list[str]:
        lines = []
        if self.only_a:
            lines.append(f"skipped K={','.join(map(str, self.only_a))}: only in A")
        if self.only_b:
            lines.append(f"skipped K={','.join(map(str, self.only_b))}: only in B")
        for side, names in (("A", self.datasets_only_a), ("B", self.datasets_only_b)):
            if names:
                lines.append(f"skipped dataset{'s' * (len(names) > 1)} {', '.join(names)}: only in {side}")
        return lines

    def markdown(self) -> str:
        lead = ["dataset"] if self.several else []
        header = [
            *lead,
            "K",
            "AL A",
            "AL B",
            "B − A",
            "95% CI (run-to-run)",
            "p",
            "noise",
            "95% CI over questions",
            "questions",
            "verdict",
        ]
        rows = [
            [
                *([r.dataset] if lead else []),
                str(r.k),
                fmt(r.al_a),
                fmt(r.al_b),
                fmt_signed(r.diff),
                fmt_ci(r.ci95),
                fmt_p(r.p_value),
                r.basis,
                fmt_ci(r.ci_questions),
                str(r.n_questions),
                r.verdict,
            ]
            for r in self.rows
        ]
        notes = [f"A = `{self.a}`, B = `{self.b}`", RULE.format(t=self.tolerance)]
        notes += self.skipped_lines() + ([SEVERAL] if self.several else [])
        notes += [r.counting_note for r in self.rows if r.counting_note]
        notes += [f"⚠ {w}" for w in self.warnings]
        notes += [r.lossless_note for r in self.rows if r.lossless_note]
        if self.forced and self.mismatches:
            notes.append("⚠ compared with --force although " + "; ".join(self.mismatches))
        text = (
            markdown_grid(
                header, rows, [*["l"] * len(lead), "r", "r", "r", "r", "r", "r", "l", "r", "r", "l"]
            )
            + "\n\n"
            + "\n".join(f"> {n}  " for n in notes).rstrip()
            + "\n"
        )
        if any(r.per_position for r in self.rows):
            text += "\n" + self.positions_markdown()
        if self.categories:
            text += "\n" + CATEGORY_TITLE + "\n\n" + markdown_grid(*category_grid(self.categories)) + "\n"
        return text

    def positions_markdown(self) -> str:
        lead = ["dataset"] if self.several else []
        rows = [
            [*([r.dataset] if lead else []), str(r.k), *position_cells(v, fmt_p)]
            for r in self.rows
            for v in listed(r.per_position)
        ]
        align = [*["l"] * len(lead), "r", "r", "r", "r", "r", "r", "r", "l", "r", "r", "r"]
        notes = [*self.position_lines(), self.position_rule()]
        return (
            POSITIONS_TITLE
            + "\n\n"
            + markdown_grid([*lead, "K", *POSITION_HEADER], rows, align)
            + "\n\n"
            + "\n".join(f"> {n}  " for n in notes).rstrip()
            + "\n"
        )


SEVERAL = (
    "Several datasets: one row per (dataset, K), each paired on that dataset's questions; Holm runs "
    "across every row."
)
POSITIONS_TITLE = "B − A per draft position (conditional acceptance judged; unconditional beside it)"
CATEGORY_TITLE = "B − A per category (on the questions both runs measured; descriptive, no verdict)"
RULE = (
    "A verdict other than 'no detectable change' means B − A is credible under run-to-run "
    f"noise (two-sided, Holm across K, {V.ALPHA:.0%} family-wise); 'A/B higher' also needs "
    "|B − A| > {t:g}. The CI over questions says what the change would be on other prompts."
)


def _as_run(run) -> Run:
    return run if isinstance(run, Run) else load_run(run, require_questions=True)


def _dataset_pairs(a: Run, b: Run) -> tuple[list[tuple[str | None, Run, Run]], list[str], list[str]]:
    """(dataset, A's rows of it, B's rows of it) per dataset both measured, and the datasets only
    one side has. Two runs of one dataset are one pair labelled None (as before datasets were
    listed, whatever their labels)."""
    if not is_several(a.meta) and not is_several(b.meta):
        return [(None, a, b)], [], []

    def views(run):
        if is_several(run.meta):
            return dict(run_views(run))
        return {dataset_labels(run.config.get("dataset", ""))[0]: run}

    va, vb = views(a), views(b)
    by_b = {label.lower(): label for label in vb}
    pairs = [(label, va[label], vb[by_b[label.lower()]]) for label in va if label.lower() in by_b]
    common = {label.lower() for label, _, _ in pairs}
    return (pairs, [x for x in va if x.lower() not in common], [x for x in vb if x.lower() not in common])


def _measure(label, a: Run, b: Run, n_boot: int, seed: int) -> list[tuple]:
    """(dataset, k, paired bootstrap or None, diff, noise, al_a, al_b, A's rows, B's rows,
    position changes or None) per K both runs of the pair measured."""
    ks_a = {int(k) for k in a.questions["k"].unique()}
    ks_b = {int(k) for k in b.questions["k"].unique()}
    declared_a, declared_b = declared_deterministic(a.meta), declared_deterministic(b.meta)
    out = []
    for k in sorted(ks_a & ks_b):
        qa, qb = a.questions_for(k), b.questions_for(k)
        frames = paired_frames(qa, qb)
        if frames is None:
            out.append((label, k, None, None, None, pooled_al(qa), pooled_al(qb), a, b, None))
            continue
        diff, noise = paired_noise(*frames[:4], declared_a=declared_a, declared_b=declared_b)
        boot = paired_bootstrap(qa, qb, n_boot=n_boot, seed=[seed, k])
        positions = (
            paired_positions(qa, qb, k, declared_a=declared_a, declared_b=declared_b)
            if has_position_counts(qa) and has_position_counts(qb)
            else None
        )
        out.append((label, k, boot, diff, noise, boot.al_a, boot.al_b, a, b, positions))
    return out


def _row(measured: tuple, decision, conventions, positions: list[PositionVerdict]) -> CompareRow:
    label, k, boot, diff, noise, al_a, al_b, a, b, _ = measured
    if boot is None:
        return CompareRow(k, al_a, al_b, al_b - al_a, None, NO_COMMON, 0, 0, dataset=label)
    verdict, note = V.compare_verdict(decision, boot.n_questions), None
    judged = verdict not in (V.NO_CHANGE, V.TOO_FEW_QUESTIONS)
    if judged:  # a change the engines' bookkeeping explains is not a regression
        known = tail_counting_difference(a.questions_for(k), b.questions_for(k))
        if known is not None:
            verdict, note = known.kind, known.note(k)
    declared = convention_difference(a.questions_for(k), b.questions_for(k), *conventions, k)
    if declared is not None and note is None:  # an import's counting rule that conversion cannot undo
        explained, note = declared
        if explained and judged:
            verdict = CONVENTION
    return CompareRow(
        k,
        al_a,
        al_b,
        diff,
        decision.ci95(),
        verdict,
        boot.n_questions,
        boot.n_units,
        noise.to_dict() if noise is not None else None,
        decision.p_value,
        boot.ci95,
        note,
        lossless_note(k, a.summary_for(k), b.summary_for(k)),
        label,
        positions,
        changed.position if (changed := first_changed(positions)) is not None else None,
    )


def compare_runs(
    run_a,
    run_b,
    *,
    force: bool = False,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    tolerance: float = V.DEFAULT_TOLERANCE,
    position_tolerance: float = DEFAULT_POSITION_TOLERANCE,
) -> CompareResult:
    """Compare two runs (Run objects or paths) K by K (dataset by dataset for runs of several
    datasets). See the module docstring."""
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not (tolerance >= 0 and tolerance < float("inf"))
    ):
        raise AlcheckError(f"--tolerance {tolerance!r} is invalid: pass a number >= 0")
    check_position_tolerance(position_tolerance)
    a, b = _as_run(run_a), _as_run(run_b)
    for name, run in (("A", a), ("B", b)):
        if not run.has_questions:
            raise AlcheckError(
                f"run {name} ({run.dir}) has no per-question rows: compare needs "
                "questions.csv; finish the run first"
            )
    a, b, partial = common_passes(a, b)
    pairs, only_a, only_b = _dataset_pairs(a, b)
    # runs written before --draft-sampling existed sampled their drafts
    legacy_a, legacy_b = ({"draft_sampling": "sampled", **run.config} for run in (a, b))
    unstated = set(unstated_keys(a.config)) | set(unstated_keys(b.config))  # imports: warn, do not refuse
    by_dataset = pairs[0][0] is not None if pairs else True  # the pairing decides the dataset
    mismatches = config_differences(
        legacy_a,
        legacy_b,
        [
            k
            for k in comparable_keys(a.config, b.config)
            if k not in unstated and not (by_dataset and k == "dataset")
        ],
    )
    if by_dataset and not pairs:
        mismatches.append(f"dataset {', '.join(only_a)} vs {', '.join(only_b)} (none in common)")
    # other prompt token ids (another target's tokenizer or template): B − A would mix that in
    prompts = [d for label, va, vb in pairs for d in _labelled(label, prompt_differences(va, vb))]
    if prompts and not _same(a.config.get("target"), b.config.get("target")):
        prompts[0] += f", targets {a.config.get('target')!r} vs {b.config.get('target')!r}"
    mismatches += prompts
    if mismatches and not force:
        raise AlcheckError(
            "runs are not comparable, they differ in "
            + "; ".join(mismatches)
            + ": compare runs made with the same settings, or pass --force"
        )
    measured = [m for label, va, vb in pairs for m in _measure(label, va, vb, n_boot, seed)]
    if not measured:  # nothing to compare is bad input, as in gate (exit 2), not an empty table
        common = "dataset and K" if not pairs else "K"
        raise AlcheckError(
            f"the runs have no {common} in common (A: K={_ks_of(a)}, B: K={_ks_of(b)}): "
            f"compare runs that measured the same {common}"
        )
    tested = [m for m in measured if m[2] is not None]
    decided = V.decide(
        [m[3] for m in tested], [m[4] for m in tested], tolerance=float(tolerance), side="two-sided"
    )
    decisions = {(m[0], m[1]): d for m, d in zip(tested, decided)}  # Holm across every (dataset, K)
    conventions = convention_of(a.meta), convention_of(b.meta)
    positions = judge(  # Holm across every (dataset, K, position): a family of its own beside the K rows
        [m[9] for m in measured],
        tolerance=float(position_tolerance),
        side="two-sided",
        n_questions=[m[2].n_questions if m[2] is not None else None for m in measured],
        word=V.compare_verdict,
    )
    rows = [_row(m, decisions.get((m[0], m[1])), conventions, p) for m, p in zip(measured, positions)]
    lacks = lacking_counts(
        [m[7].questions_for(m[1]) for m in tested], [m[8].questions_for(m[1]) for m in tested]
    )
    note = no_counts_note(*lacks)
    ks_a = {int(k) for _, va, _ in pairs for k in va.questions["k"].unique()}
    ks_b = {int(k) for _, _, vb in pairs for k in vb.questions["k"].unique()}
    return CompareResult(
        a=str(a.dir),
        b=str(b.dir),
        rows=rows,
        only_a=sorted(ks_a - ks_b),
        only_b=sorted(ks_b - ks_a),
        datasets_only_a=only_a,
        datasets_only_b=only_b,
        categories=category_changes(pairs),
        mismatches=mismatches,
        differences=config_differences(a.config, b.config, [k for k in INFO_KEYS if k not in unstated]),
        warnings=([partial] if partial else []) + import_warnings(a, b) + ([note] if note else []),
        forced=force,
        n_boot=n_boot,
        tolerance=float(tolerance),
        position_tolerance=float(position_tolerance),
    )


def check_position_tolerance(value) -> float:
    """--position-tolerance: a rate difference in [0, 1), else one line (exit 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise AlcheckError(
            f"--position-tolerance {value!r} is invalid: pass an acceptance-rate difference from 0 to "
            f"below 1 (default {DEFAULT_POSITION_TOLERANCE:g})"
        )
    return float(value)


def _ks_of(run: Run) -> str:
    return ",".join(str(k) for k in sorted({int(k) for k in run.questions["k"].unique()})) or "none"


def _labelled(label: str | None, lines: list[str]) -> list[str]:
    return [f"{label}: {line}" if label else line for line in lines]


_STYLE = {
    V.NO_CHANGE: "green",
    V.WITHIN_TOLERANCE: "green",
    V.A_HIGHER: "bold yellow",
    V.B_HIGHER: "bold yellow",
    NO_COMMON: "red",
    TAIL: "cyan",
    CONVENTION: "cyan",
    V.TOO_FEW_QUESTIONS: "dim",
    TOO_FEW_STEPS: "dim",
}


def compare_table(result: CompareResult) -> Table:
    table = Table(
        title="AL compare: B − A",
        title_justify="left",
        caption="AL = tokens per verification step (accepted drafts + 1 bonus token). "
        "95% CI (run-to-run): B − A ± noise of both runs on the questions both "
        "measured; 95% CI over questions: paired studentized bootstrap.",
        caption_justify="left",
    )
    if result.several:
        table.add_column("dataset")
    for name in ("K", "AL A", "AL B", "B − A", "95% CI\n(run-to-run)", "p"):
        table.add_column(name, justify="right")
    table.add_column("noise")
    for name in ("95% CI over\nquestions", "questions"):
        table.add_column(name, justify="right")
    table.add_column("verdict")
    for r in result.rows:
        table.add_row(
            *([r.dataset] if result.several else []),
            str(r.k),
            fmt(r.al_a),
            fmt(r.al_b),
            fmt_signed(r.diff),
            fmt_ci(r.ci95),
            fmt_p(r.p_value),
            r.basis,
            fmt_ci(r.ci_questions),
            str(r.n_questions) if r.n_questions else DASH,
            Text(r.verdict, style=_STYLE.get(r.verdict, "")),
        )
    return table


def positions_table(result: CompareResult) -> Table:
    table = Table(
        title=POSITIONS_TITLE, title_justify="left", caption=result.position_rule(), caption_justify="left"
    )
    if result.several:
        table.add_column("dataset")
    table.add_column("K", justify="right")
    for name in POSITION_HEADER:
        table.add_column(
            name.replace(" (run-to-run)", "\n(run-to-run)"), justify="left" if name == "verdict" else "right"
        )
    for r in result.rows:
        for v in listed(r.per_position):
            cells = position_cells(v, fmt_p)
            cells[6] = Text(v.verdict, style=_STYLE.get(v.verdict, ""))
            table.add_row(*([r.dataset] if result.several else []), str(r.k), *cells)
    return table


def print_compare(result: CompareResult, console: Console) -> None:
    console.print(f"A = {result.a}")
    console.print(f"B = {result.b}")
    if result.forced and result.mismatches:
        console.print(
            f"[bold yellow]⚠ --force: the runs differ in {'; '.join(result.mismatches)}"
            " — the difference mixes that change with noise[/]"
        )
    if result.differences:
        console.print("runs differ in: " + "; ".join(result.differences), highlight=False)
    for warning in result.warnings:
        console.print(f"[yellow]⚠ {warning}[/]", highlight=False, soft_wrap=True)  # one line each
    console.print(fitted(console, compare_table(result)))
    if any(r.per_position for r in result.rows):
        console.print(fitted(console, positions_table(result)))
        for line in result.position_lines():
            console.print(line, highlight=False)
    if result.categories:
        header, rows, align = category_grid(result.categories)
        table = Table(title=CATEGORY_TITLE, title_justify="left")
        for name, side in zip(header, align):
            table.add_column(name, justify="right" if side == "r" else "left")
        for row in rows:
            table.add_row(*row)
        console.print(fitted(console, table))
    for line in result.skipped_lines() + ([SEVERAL] if result.several else []):
        console.print(line)
    for row in result.rows:
        for note in (row.counting_note, row.lossless_note):
            if note:
                console.print(note, highlight=False)
    console.print(RULE.format(t=result.tolerance), style="dim")
