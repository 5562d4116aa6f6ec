"""report/divergence.py's report as text: console lines (`alcheck compare`) and markdown."""

from __future__ import annotations

from alcheck.report.divergence import DivergenceReport, TurnDivergence
from alcheck.report.repeat_numbers import shown

SHOWN = 10  # divergent turns listed per K


def _turn_line(t: TurnDivergence) -> str:
    where = f"question {t.question_id} turn {t.turn} repeat {shown(t.repeat)}"
    if t.basis == "totals":
        return f"{where}: totals differ (A {t.totals_a}; B {t.totals_b})"
    parts = []
    if t.step is not None:
        got = lambda a: "no such step" if a is None else f"{a} accepted"  # noqa: E731
        block = (
            "prompt length not recorded, so no KV block offset"
            if t.seq_len is None
            # an import
            else f"sequence length {t.seq_len} (offset {t.block_offset} in its block, "
            f"{t.slots_left} slots left{'; exposed to missing lookahead slots' if t.exposed else ''})"
        )
        parts.append(
            f"step {t.step} ({got(t.accepted_a)} vs {got(t.accepted_b)}) "
            f"at output token {t.position}, {block}"
        )
    if t.first_token_diff is not None:
        parts.append(
            f"outputs differ from token {t.first_token_diff}" + (f": {t.context!r}" if t.context else "")
        )
    elif t.step is not None:
        parts.append("same tokens")
    return f"{where}: " + "; ".join(parts)


def _side_note(report: DivergenceReport) -> list[str]:
    return [
        f"run {side} has no per-step traces for {n} turn{'s' * (n != 1)}: those are compared on totals "
        "(steps, accepted, per position) only"
        for side, n in sorted(report.without_traces.items())
    ]


def _position_rows(report: DivergenceReport) -> dict[int, list[int]]:
    return {k: row for k, row in report.position_map().items() if any(row)}


def _changed_text(first_changed: dict | None) -> str | None:
    """'K=3 position 3, K=5 position 3' from compare's first changed position per K (None: none given)."""
    if first_changed is None:
        return None
    named = [f"K={k} position {p}" for k, p in sorted(first_changed.items()) if p is not None]
    return ", ".join(named) if named else "none"


def divergence_lines(report: DivergenceReport, first_changed: dict | None = None) -> list[str]:
    """first_changed: K -> the first draft position whose conditional acceptance changed (compare's
    verdict, report/positions.py), shown beside the map of where the steps diverge."""
    lines = [f"Where the runs diverge (per-step traces, KV block size {report.block_size}):"]
    lines += ["  " + note for note in _side_note(report)]
    for k, s in report.summary().items():
        diverged = s["turns"] - s["identical"]
        lines.append(
            f"  K={k}: {s['identical']} of {s['turns']} turns identical"
            + (
                f" ({s['traced_identical']}/{s['traced']} step by step, "
                f"{s['totals_identical']}/{s['totals_only']} on totals)"
                if s["totals_only"]
                else " step by step"
            )
            + (f"; {diverged} diverge" if diverged else "")
        )
        for t in [t for t in report.by_k()[k] if not t.identical][:SHOWN]:
            lines.append("    " + _turn_line(t))
    divergence_map = {k: row for k, row in report.divergence_map().items() if any(row)}
    if divergence_map:
        lines.append(
            f"  first divergences by sequence length mod {report.block_size} (offset "
            f"0..{report.block_size - 1}):"
        )
        lines += [f"    K={k}: {' '.join(map(str, row))}" for k, row in divergence_map.items()]
    by_position = _position_rows(report)
    if by_position:
        lines.append(
            "  first divergences by draft position (the position one run accepted and the other rejected):"
        )
        lines += [f"    K={k}: {' '.join(map(str, row))}" for k, row in by_position.items()]
    changed = _changed_text(first_changed)
    if changed is not None:
        lines.append(f"  first changed position (conditional acceptance, compare's verdict): {changed}")
    lines += ["  " + finding.line() for finding in report.lookahead() if finding.divergences]
    return lines


def divergence_markdown(report: DivergenceReport, first_changed: dict | None = None) -> str:
    out = [
        "## Where the runs diverge",
        "",
        f"Per-step traces, KV block size {report.block_size}. A "
        "step is *exposed* when the drafts it verifies were "
        "written past the KV slots their step allocated without lookahead slots (report/divergence.py).",
        "",
    ]
    out += [f"- {note}" for note in _side_note(report)]
    out += ["| K | turns | identical | diverge | compared on totals only |", "|---|---|---|---|---|"]
    for k, s in report.summary().items():
        out.append(
            f"| {k} | {s['turns']} | {s['identical']} | {s['turns'] - s['identical']} | {s['totals_only']} |"
        )
    divergence_map = report.divergence_map()
    if any(any(row) for row in divergence_map.values()):
        size = report.block_size
        out += [
            "",
            f"First divergences by sequence length mod {size} "
            "(columns), per K (rows); the last row of each K "
            "counts run A's steps at that offset:",
            "",
            "| K | " + " | ".join(str(i) for i in range(size)) + " |",
            "|---" * (size + 1) + "|",
        ]
        for k, row in divergence_map.items():
            out.append(f"| {k} | " + " | ".join(str(x) for x in row) + " |")
            steps = report.steps_by_offset.get(k)
            if steps:
                out.append(f"| {k} (steps) | " + " | ".join(str(x) for x in steps) + " |")
    by_position = _position_rows(report)
    if by_position:
        most = max(by_position)
        out += [
            "",
            "First divergences by draft position (the position one run accepted and the other rejected):",
            "",
            "| K | " + " | ".join(str(i) for i in range(1, most + 1)) + " |",
            "|---" * (most + 1) + "|",
        ]
        out += [
            f"| {k} | " + " | ".join(str(x) for x in row + [""] * (most - k)) + " |"
            for k, row in by_position.items()
        ]
    changed = _changed_text(first_changed)
    if changed is not None:
        out += ["", f"First changed position (conditional acceptance, compare's verdict): {changed}"]
    findings = [f for f in report.lookahead() if f.divergences]
    if findings:
        out += [""] + [f"- {f.line()}" for f in findings]
    shown = [t for t in report.turns if not t.identical][: SHOWN * 2]
    if shown:
        out += ["", "First divergent turns:", ""] + [f"- K={t.k}: {_turn_line(t)}" for t in shown]
    return "\n".join(out) + "\n"
