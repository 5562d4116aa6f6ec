"""`alcheck compare RUN_A RUN_B`: is the AL difference between two runs real or noise?

Per K present in both runs: the pooled AL of each run over their common (question_id, turn)
units, diff = AL(B) - AL(A), and a paired cluster-bootstrap 95% CI of diff
(alcheck.metrics.stats.paired_bootstrap: repeats pooled per (question_id, turn), question_ids
resampled, the same draw applied to both runs). Verdict: "B higher" / "A higher" when the CI
excludes 0, else "no detectable change".

Runs are only comparable under the same protocol, dataset, max_tokens and temperature;
otherwise compare_runs refuses (AlcheckError, exit 2) unless force=True.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alcheck.errors import AlcheckError
from alcheck.metrics import verdict as V
from alcheck.metrics.acceptance import pooled_al
from alcheck.metrics.stats import DEFAULT_N_BOOT, paired_bootstrap
from alcheck.report.run_io import Run, load_run
from alcheck.report.table import DASH, fmt, fmt_ci, fmt_signed, markdown_grid

COMPARABLE_KEYS = ("protocol", "dataset", "max_tokens", "temperature")
INFO_KEYS = ("target", "draft", "method", "dtype", "device", "turns", "system_prompt", "limit",
             "repeats", "max_batch_size", "block_size", "kv_lookahead")
NO_COMMON = "no common questions"


def _same(x, y) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return float(x) == float(y)
    return x == y


def config_differences(config_a: dict, config_b: dict, keys) -> list[str]:
    """'key: A vs B' for every key whose value differs between the two configs."""
    return [f"{key} {config_a.get(key)!r} vs {config_b.get(key)!r}" for key in keys
            if not _same(config_a.get(key), config_b.get(key))]


@dataclass
class CompareRow:
    k: int
    al_a: float | None
    al_b: float | None
    diff: float | None
    ci95: tuple[float, float] | None
    verdict: str
    n_questions: int
    n_units: int


@dataclass
class CompareResult:
    a: str
    b: str
    rows: list[CompareRow]
    only_a: list[int] = field(default_factory=list)
    only_b: list[int] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)  # comparability keys (needed --force)
    differences: list[str] = field(default_factory=list)  # other config differences (info)
    forced: bool = False
    n_boot: int = DEFAULT_N_BOOT

    def to_dict(self) -> dict:
        out = asdict(self)
        out["diff_definition"] = ("AL(B) - AL(A), pooled over the (question_id, turn) units "
                                  "both runs have")
        for row in out["rows"]:
            row["ci95"] = list(row["ci95"]) if row["ci95"] is not None else None
        return out

    def skipped_lines(self) -> list[str]:
        lines = []
        if self.only_a:
            lines.append(f"skipped K={','.join(map(str, self.only_a))}: only in A")
        if self.only_b:
            lines.append(f"skipped K={','.join(map(str, self.only_b))}: only in B")
        return lines

    def markdown(self) -> str:
        header = ["K", "AL A", "AL B", "B − A", "95% CI (paired)", "questions", "verdict"]
        rows = [[str(r.k), fmt(r.al_a), fmt(r.al_b), fmt_signed(r.diff), fmt_ci(r.ci95),
                 str(r.n_questions), r.verdict] for r in self.rows]
        notes = [f"A = `{self.a}`, B = `{self.b}`"] + self.skipped_lines()
        if self.forced and self.mismatches:
            notes.append("⚠ compared with --force although " + "; ".join(self.mismatches))
        return (markdown_grid(header, rows, ["r", "r", "r", "r", "r", "r", "l"]) + "\n\n"
                + "\n".join(f"> {n}  " for n in notes).rstrip() + "\n")


def _as_run(run) -> Run:
    return run if isinstance(run, Run) else load_run(run, require_questions=True)


def compare_runs(run_a, run_b, *, force: bool = False, n_boot: int = DEFAULT_N_BOOT,
                 seed: int = 0) -> CompareResult:
    """Compare two runs (Run objects or paths) K by K. See the module docstring."""
    a, b = _as_run(run_a), _as_run(run_b)
    for name, run in (("A", a), ("B", b)):
        if not run.has_questions:
            raise AlcheckError(f"run {name} ({run.dir}) has no per-question rows: compare needs "
                               "questions.csv; finish the run first")
    mismatches = config_differences(a.config, b.config, COMPARABLE_KEYS)
    if mismatches and not force:
        raise AlcheckError("runs are not comparable, they differ in " + "; ".join(mismatches)
                           + ": compare runs made with the same settings, or pass --force")
    ks_a = sorted(int(k) for k in a.questions["k"].unique())
    ks_b = sorted(int(k) for k in b.questions["k"].unique())
    rows = []
    for k in sorted(set(ks_a) & set(ks_b)):
        qa, qb = a.questions_for(k), b.questions_for(k)
        try:
            paired = paired_bootstrap(qa, qb, n_boot=n_boot, seed=[seed, k])
        except ValueError:
            al_a, al_b = pooled_al(qa), pooled_al(qb)
            rows.append(CompareRow(k, al_a, al_b, al_b - al_a, None, NO_COMMON, 0, 0))
            continue
        rows.append(CompareRow(k, paired.al_a, paired.al_b, paired.diff, paired.ci95,
                               V.compare_verdict(paired.ci95), paired.n_questions,
                               paired.n_units))
    return CompareResult(
        a=str(a.dir), b=str(b.dir), rows=rows,
        only_a=sorted(set(ks_a) - set(ks_b)), only_b=sorted(set(ks_b) - set(ks_a)),
        mismatches=mismatches,
        differences=config_differences(a.config, b.config, INFO_KEYS), forced=force,
        n_boot=n_boot,
    )


_STYLE = {V.NO_CHANGE: "green", V.A_HIGHER: "bold yellow", V.B_HIGHER: "bold yellow",
          NO_COMMON: "red"}


def compare_table(result: CompareResult) -> Table:
    table = Table(title="AL compare: B − A", title_justify="left",
                  caption="AL = tokens per verification step (accepted drafts + 1 bonus token); "
                          "95% CI: paired bootstrap over the questions both runs measured.",
                  caption_justify="left")
    for name in ("K", "AL A", "AL B", "B − A", "95% CI (paired)", "questions"):
        table.add_column(name, justify="right")
    table.add_column("verdict")
    for r in result.rows:
        table.add_row(str(r.k), fmt(r.al_a), fmt(r.al_b), fmt_signed(r.diff), fmt_ci(r.ci95),
                      str(r.n_questions) if r.n_questions else DASH,
                      Text(r.verdict, style=_STYLE.get(r.verdict, "")))
    return table


def print_compare(result: CompareResult, console: Console) -> None:
    console.print(f"A = {result.a}")
    console.print(f"B = {result.b}")
    if result.forced and result.mismatches:
        console.print(f"[bold yellow]⚠ --force: the runs differ in {'; '.join(result.mismatches)}"
                      " — the difference mixes that change with noise[/]")
    if result.differences:
        console.print("runs differ in: " + "; ".join(result.differences), highlight=False)
    console.print(compare_table(result))
    for line in result.skipped_lines():
        console.print(line)
    console.print("A verdict other than 'no detectable change' means the 95% CI of B − A "
                  "excludes 0.", style="dim")
