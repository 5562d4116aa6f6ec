"""`alcheck gate`'s result drawn: the terminal table, the markdown for GitHub's step summary,
and the failure lines."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alcheck.errors import AlcheckError
from alcheck.metrics import verdict as V
from alcheck.report.table import fitted, fmt, fmt_ci, fmt_signed, markdown_grid

if TYPE_CHECKING:
    from alcheck.report.gate import GateResult


RULE = (
    "A K fails when its drop is credible under run-to-run noise (one-sided, Holm across the "
    f"gated K, {V.ALPHA:.0%} family-wise) and larger than the tolerance. The CI over "
    "questions says what the change would be on other prompts; it does not decide."
)


POSITION_RULE = (
    "--per-position: a draft position fails when its conditional acceptance (accepted there among the "
    "steps that reached it) fell credibly and by more than the position tolerance; the K rows and their "
    f"positions are one Holm family ({V.ALPHA:.0%} family-wise, one-sided)."
)
POSITION_COLUMNS = (
    "K",
    "position",
    "conditional",
    "baseline",
    "diff",
    "95% CI (run-to-run)",
    "p",
    "unconditional",
    "baseline uncond.",
    "steps reached (run / baseline)",
    "result",
)


def tolerance_text(result: GateResult) -> str:
    """'tolerance 0.02', or '2% of the baseline AL' (--relative-tolerance), and the position one."""
    text = (
        f"tolerance {result.relative_tolerance:.3g} × the baseline AL"
        if result.relative_tolerance is not None
        else f"tolerance {result.tolerance:g}"
    )
    return text + (f", position tolerance {result.position_tolerance:g}" if result.per_position else "")


def _position_cells(p) -> list[str]:
    return [
        str(p.k),
        str(p.position),
        fmt(p.conditional, 3),
        fmt(p.baseline, 3),
        fmt_signed(p.diff, 3),
        fmt_ci(p.ci95),
        fmt_p(p.p_value),
        fmt(p.unconditional, 3),
        fmt(p.baseline_unconditional, 3),
        f"{p.steps_reached} / {p.baseline_steps_reached}",
    ]


def fmt_p(p) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def failure_lines(result: GateResult) -> list[str]:
    """One line per regressed row: where, the values, what was allowed, p and the noise."""
    lines = []
    for r in result.rows:
        if r.regression:
            ci = f", 95% CI {fmt_ci(r.ci95)}" if r.ci95 else ""
            relative = result.relative_tolerance is not None and r.allowed is not None
            allowed = f"{r.allowed:.3g}" if relative else f"{result.tolerance:g}"
            lines.append(
                f"{r.where}: AL {fmt(r.al, 3)} vs baseline {fmt(r.baseline, 3)}: "
                f"{fmt_signed(r.diff, 3)} (allowed -{allowed}{ci}; "
                f"p = {fmt_p(r.p_value)}, noise: {r.basis})"
            )
    for p in result.positions:
        if p.regression:
            ci = f", 95% CI {fmt_ci(p.ci95)}" if p.ci95 else ""
            lines.append(
                f"{p.where}: conditional acceptance {fmt(p.conditional, 3)} "
                f"vs baseline {fmt(p.baseline, 3)}: "
                f"{fmt_signed(p.diff, 3)} (allowed -{result.position_tolerance:g}{ci}; "
                f"p = {fmt_p(p.p_value)}, noise: {p.basis})"
            )
    return lines


def gate_markdown(result: GateResult) -> str:
    """The result as GitHub markdown (the step summary)."""
    verdict = "✅ PASS" if result.passed else "❌ FAIL"
    lead = ["dataset"] if result.several else []
    header = [
        *lead,
        "K",
        "AL",
        "baseline",
        "diff",
        "95% CI (run-to-run)",
        "p",
        "noise",
        "95% CI over questions",
        "result",
    ]
    rows = [
        [
            *([r.dataset] if lead else []),
            str(r.k),
            fmt(r.al),
            fmt(r.baseline),
            fmt_signed(r.diff),
            fmt_ci(r.ci95),
            fmt_p(r.p_value),
            r.basis,
            fmt_ci(r.ci_questions),
            "✅ " + r.status if not r.regression else f"❌ {r.status}",
        ]
        for r in result.rows
    ]
    lines = [
        f"### alcheck gate: {verdict} against `{result.baseline}` ({tolerance_text(result)})",
        "",
        markdown_grid(header, rows, [*["l"] * len(lead), "r", "r", "r", "r", "r", "r", "l", "r", "l"]),
        "",
        f"> {RULE}  ",
    ]
    if result.per_position:
        lines[-1:-1] = _positions_markdown(result)
        lines.append(f"> {POSITION_RULE}  ")
    notes = [*result.skipped_lines(), *result.warnings]
    lines += [f"> {n}  " for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def _positions_markdown(result: GateResult) -> list[str]:
    if not result.positions:
        return []
    lead = ["dataset"] if result.several else []
    rows = [
        [*([p.dataset] if lead else []), *_position_cells(p), ("❌ " if p.regression else "✅ ") + p.status]
        for p in result.positions
    ]
    align = [*["l"] * len(lead), *["r"] * (len(POSITION_COLUMNS) - 1), "l"]
    return [
        "Per draft position (run against the baseline):",
        "",
        markdown_grid([*lead, *POSITION_COLUMNS], rows, align),
        "",
    ]


def positions_table(result: GateResult) -> Table:
    table = Table(
        title=f"Per draft position against {result.baseline}",
        title_justify="left",
        caption=POSITION_RULE,
        caption_justify="left",
    )
    if result.several:
        table.add_column("dataset")
    for name in POSITION_COLUMNS:
        table.add_column(name.replace(" (", "\n("), justify="left" if name == "result" else "right")
    for p in result.positions:
        style = "bold red" if p.regression else ("dim" if not p.judged else "green")
        table.add_row(
            *([p.dataset] if result.several else []), *_position_cells(p), Text(p.status, style=style)
        )
    return table


def gate_table(result: GateResult) -> Table:
    table = Table(
        title=f"AL gate against {result.baseline}",
        title_justify="left",
        caption=f"{tolerance_text(result)}; AL = tokens per verification step "
        "(accepted drafts + 1 bonus token); diff = run − baseline. " + RULE,
        caption_justify="left",
    )
    if result.several:
        table.add_column("dataset")
    for name in ("K", "AL", "baseline", "diff", "95% CI\n(run-to-run)", "p"):
        table.add_column(name, justify="right")
    table.add_column("noise")
    table.add_column("95% CI over\nquestions", justify="right")
    table.add_column("result")
    for r in result.rows:
        table.add_row(
            *([r.dataset] if result.several else []),
            str(r.k),
            fmt(r.al),
            fmt(r.baseline),
            fmt_signed(r.diff),
            fmt_ci(r.ci95),
            fmt_p(r.p_value),
            r.basis,
            fmt_ci(r.ci_questions),
            Text(r.status, style="green" if not r.regression else "bold red"),
        )
    return table


def append_step_summary(result: GateResult) -> Path | None:
    """Append gate_markdown(result) to $GITHUB_STEP_SUMMARY when that variable is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    try:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(gate_markdown(result) + "\n")
    except OSError as exc:
        raise AlcheckError(
            f"cannot append to GITHUB_STEP_SUMMARY={target} ({exc.strerror}): check the path"
        ) from None
    return Path(target)


def print_gate(result: GateResult, console: Console, *, step_summary: bool = True) -> int:
    """Print the gate table and verdict, append to $GITHUB_STEP_SUMMARY, return the exit code."""
    console.print(fitted(console, gate_table(result)))
    if result.positions:
        console.print(fitted(console, positions_table(result)))
    for line in result.skipped_lines():
        console.print(line)
    for warning in result.warnings:
        console.print(warning, style="yellow", highlight=False)
    if result.passed:
        allowed = (
            f"{result.relative_tolerance:.3g} × its baseline AL"
            if result.relative_tolerance is not None
            else f"{result.tolerance:g}"
        )
        console.print(
            f"[bold green]PASS[/]: no K fell credibly more than {allowed} below the baseline"
            + (
                f", and no draft position's conditional acceptance more than {result.position_tolerance:g}"
                if result.per_position
                else ""
            )
        )
    else:
        what = "AL regression" if any(r.regression for r in result.rows) else "draft-position regression"
        console.print(f"[bold red]FAIL[/]: {what}", highlight=False)
        for line in result.failures():
            console.print("  " + line, highlight=False)
    if step_summary:
        try:
            append_step_summary(result)
        except AlcheckError as exc:  # the verdict stands: the step summary only mirrors it on GitHub's page
            print(
                f"warning: {exc.format_message()}; the verdict above stands (exit {result.exit_code})",
                file=sys.stderr,
            )
    return result.exit_code
