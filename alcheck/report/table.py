"""The main results table (one row per K) as plain rows, a rich Table and GitHub markdown.
A run of several datasets has one row per (dataset, K), then its pooled rows ("all"), each
dataset's references judged on that dataset's rows only (report/dataset_views.py).

AL is labelled explicitly everywhere: tokens per verification step, the bonus/recovered
token included (gpt-fast's "mean accepted" is AL - 1). Numbers are shown to 2 decimals;
a reference without a value for some K shows "–".
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from alcheck.metrics import verdict as V
from alcheck.metrics.conventions import ALCHECK, CONVENTIONS, VLLM_DRAFTED, from_summary
from alcheck.metrics.noise import combine, declared_deterministic, reference_noise, summary_noise
from alcheck.references.tables import drafting_shape, hard_mismatches, mismatches
from alcheck.report.dataset_views import meta_views
from alcheck.report.numbers import DASH, finite_number
from alcheck.report.speedup import speedup_labels, speedups

NA = "n/a"  # a spread or interval the data cannot give (one question, one repeat), not a zero
WARN = "⚠"
AL_LABEL = "AL = tokens per verification step (accepted drafts + 1 bonus token)"
AL_NOTE = (
    "AL counts every token a verification step emits: the accepted drafts plus the "
    "target's bonus/recovered token (gpt-fast's \"mean accepted\" = AL − 1). "
    "95% CI: studentized bootstrap over questions (what AL would be on other prompts)."
)
VERDICT_NOTE = (
    "Reference verdicts compare run − reference on the same prompts under run-to-run "
    "noise (our repeats plus the reference's stated noise and rounding); `below` / "
    f"`above` need a credible difference (Holm across K, {V.ALPHA:.0%} family-wise) "
    f"larger than {V.DEFAULT_TOLERANCE:g}; credible but smaller is `within "
    "tolerance`. A reference measured with other settings (a different target, "
    "draft, method, dataset, protocol, question count, max tokens or temperature) "
    "gets no verdict: `not comparable`."
)
DATASETS_NOTE = (
    "Several datasets: each dataset's rows are computed from its questions alone (as a run of "
    "that dataset would be) and its references are judged on them only; `all` pools every "
    "dataset's steps; tokens/s only there (one batch decodes every dataset)."
)
_VERDICT_STYLE = {
    V.WITHIN_NOISE: "green",
    V.WITHIN_TOLERANCE: "green",
    V.BELOW: "bold red",
    V.ABOVE: "bold yellow",
    V.NO_NOISE: "dim",
    V.NOT_COMPARABLE: "dim",
    V.TOO_FEW_QUESTIONS: "dim",
}


# summary fields shown as a column when a run has them
OPTIONAL_COLUMNS = ("lossless_rate", "lossless_test", "slot_violations")


ROUNDING_NOISE = 1e-9  # a spread or difference below this is float rounding (5e-16), printed as 0
MIN_HIDDEN_TAIL = 3  # per-position rates: a tail this long that prints as 0.00 is not listed


def fmt(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{float(x):.{digits}f}"


def fmt_signed(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    x = float(x)
    if abs(x) < ROUNDING_NOISE:  # float rounding, not a difference: +0.00, never "+5e-16"
        x = 0.0
    if x != 0 and abs(x) < 0.5 * 10**-digits:  # never "-0.00": a tiny difference keeps its size
        return f"{x:+.1g}"
    return f"{x:+.{digits}f}"


def fmt_ci(ci) -> str:
    if not ci or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in ci[:2]):
        return NA
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def fmt_mean_std(mean, std, repeats: int | None = None) -> str:
    """repeats: how many al_repeats the std is over (one shows no spread: n/a, not ± 0.00)."""
    if mean is None:
        return DASH
    if repeats is not None and repeats < 2:
        return f"{fmt(mean)} ± {NA}"
    std = float(std or 0.0)
    if std < ROUNDING_NOISE:  # identical repeats summed in another order: 5e-16 is no spread
        std = 0.0
    # a noisy run must not read as deterministic: 0.0039 prints as 0.004, not 0.00
    return f"{fmt(mean)} ± {fmt(std) if std == 0 or std >= 0.005 else f'{std:.1g}'}"


def shown_positions(values, digits: int = 2) -> int:
    """How many leading per-position rates to print: a tail of MIN_HIDDEN_TAIL or more that prints
    as 0.00 (--ks 100, where no step accepts 90 drafts) is left out, and the caller says so."""
    end = len(values)
    zero = fmt(0.0, digits)
    while end and values[end - 1] is not None and fmt(values[end - 1], digits) == zero:
        end -= 1
    return end if len(values) - end >= MIN_HIDDEN_TAIL else len(values)


def fmt_per_position(values) -> str:
    """'0.60 / 0.35 / 0.21'; a long tail of 0.00 as 'then 0.00 to position 100'."""
    if not values:
        return DASH
    shown = shown_positions(values)
    text = " / ".join(fmt(v) for v in values[:shown])
    if shown == len(values):
        return text
    return (
        f"{text}, then {fmt(0.0)} to position {len(values)}"
        if text
        else f"{fmt(0.0)} to position {len(values)}"
    )


def run_protocol(meta: dict) -> str | None:
    return (meta.get("config") or {}).get("protocol")


def protocol_mismatch(meta: dict, ref: dict) -> bool:
    mine, theirs = run_protocol(meta), ref.get("protocol")
    return bool(mine and theirs and mine != theirs)


def reference_label(ref: dict, index: int = 0) -> str:
    return str(ref.get("name") or f"reference {index + 1}")


def reference_mismatches(meta: dict) -> dict[str, list[str]]:
    """Per reference (by label): the settings in which it differs from the run (see
    alcheck.references.tables.mismatches); an empty list when it matches. In a run of several datasets
    a reference is checked against the dataset it is judged on."""
    return {
        reference_label(ref, i): mismatches(ref, view.get("config") or {})
        for _, view in meta_views(meta, pooled=True)
        for i, ref in enumerate(view.get("references") or [])
    }


def reference_warnings(meta: dict) -> list[str]:
    """One warning line per reference that differs from the run in a setting that moves AL
    (the table caption, the markdown report and the gate all print these)."""
    return [
        f"{WARN} {name} is not directly comparable: it differs in " + "; ".join(found) + "."
        for name, found in reference_mismatches(meta).items()
        if found
    ] + convention_notes(meta)


def convention_notes(meta: dict) -> list[str]:
    """One line per reference counted in another convention than alcheck's: what it counts, and
    that the diff uses the run's number in that convention, computed from the run's counts."""
    out = {}
    for _, view in meta_views(meta, pooled=True):
        for i, ref in enumerate(view.get("references") or []):
            conv = CONVENTIONS.get(ref_convention(ref))
            if conv is not None and conv.name != ALCHECK:
                out[reference_label(ref, i)] = (
                    f"{reference_label(ref, i)} is a {conv.label} ({conv.formula}): its diff and "
                    "verdict use this run's number in that convention, from the run's counts."
                )
    return list(out.values())


protocol_warnings = reference_warnings  # the earlier name (protocol was the only check)


def _ref_value(ref: dict, k: int):
    values = ref.get("values") or {}
    value = values.get(str(k), values.get(k))
    return None if value is None else float(value)


def ref_convention(ref: dict) -> str:
    """The counting convention a reference's numbers are in (metrics/conventions.py); alcheck's
    when the table states none."""
    return str(ref.get("convention") or ALCHECK)


def run_value(entry: dict, ref: dict) -> float | None:
    """The run's number in the reference's convention: computed from the run's own counts (its
    summary), so a table in vLLM's drafted-steps AL or TensorRT-LLM's AL − 1 is met on its terms."""
    conv = ref_convention(ref)
    if conv == ALCHECK:
        return finite_number(entry.get("al_mean"))
    return finite_number(from_summary(conv, entry))


def _reference_decisions(entries: list[dict], ref: dict, declared: bool) -> dict[int, tuple]:
    """K -> (value, Decision) for one reference, Holm across the Ks it shares with the run."""
    stated = finite_number(ref.get("noise"))
    ks, diffs, noises, values = [], [], [], []
    for entry in entries:
        value, mean = _ref_value(ref, int(entry["k"])), run_value(entry, ref)
        if value is None or mean is None:
            continue
        ks.append(int(entry["k"]))
        values.append(value)
        diffs.append(mean - value)
        noises.append(combine(summary_noise(entry, declared), reference_noise(value, stated)))
    decisions = V.decide(diffs, noises, tolerance=V.DEFAULT_TOLERANCE, side="two-sided")
    return {k: (v, d) for k, v, d in zip(ks, values, decisions)}


def comparison_rows(meta: dict) -> list[dict]:
    """Per K: the summary numbers plus, for every reference, its value, diff and verdict."""
    entries = sorted(meta.get("summary") or [], key=lambda e: int(e["k"]))
    refs = meta.get("references") or []
    declared = declared_deterministic(meta)
    decided = [_reference_decisions(entries, ref, declared) for ref in refs]
    found = reference_mismatches(meta)
    config = meta.get("config") or {}
    incomparable = [bool(hard_mismatches(ref, config)) for ref in refs]
    rows = []
    for entry in entries:
        k = int(entry["k"])
        row = {
            "k": k,
            "al_mean": entry.get("al_mean"),
            "al_std": entry.get("al_std"),
            "al_ci95": entry.get("al_ci95"),
            "al_repeats": entry.get("al_repeats") or [],
            "per_position": entry.get("per_position") or [],
            "tokens_per_s": entry.get("tokens_per_s"),
            "al_drafted_steps": entry.get("al_drafted_steps"),  # vLLM's convention (drafted_differs)
        }
        for optional in OPTIONAL_COLUMNS:
            if optional in entry:
                row[optional] = entry[optional]
        row["speedup"] = speedups(meta, k)
        row["references"] = []
        for i, ref in enumerate(refs):
            name = reference_label(ref, i)
            value, decision = decided[i].get(k, (_ref_value(ref, k), None))
            row["references"].append(
                {
                    "name": name,
                    "protocol": ref.get("protocol"),
                    "protocol_mismatch": protocol_mismatch(meta, ref),
                    "mismatches": found[name],
                    "value": value,
                    "convention": ref_convention(ref),
                    "run_value": run_value(entry, ref),  # the run's number in that convention
                    "diff": decision.diff if decision else None,
                    "noise": decision.noise.to_dict() if decision and decision.noise else None,
                    "p_value": decision.p_value if decision else None,
                    "ci95": decision.ci95() if decision else None,
                    "verdict": (
                        V.NOT_COMPARABLE
                        if incomparable[i]
                        else V.reference_verdict(decision, entry.get("n_questions"))
                    )
                    if decision
                    else None,
                }
            )
        rows.append(row)
    return rows


def table_rows(meta: dict) -> list[tuple[str | None, dict]]:
    """(dataset label, comparison row) per table row: one dataset's rows labelled None; a run of
    several datasets, each dataset's rows and then the pooled ones."""
    return [(label, row) for label, view in meta_views(meta, pooled=True) for row in comparison_rows(view)]


def noise_lines(meta: dict) -> list[str]:
    """Which noise each reference verdict used (the table says so, issue 10)."""
    basis: dict[str, str] = {}
    for _, row in table_rows(meta):
        for ref in row["references"]:
            if ref["noise"]:
                basis.setdefault(ref["name"], ref["noise"]["basis"])
    return [f"{name}: run-to-run noise = {text}" for name, text in basis.items()]


def tree_note(meta: dict) -> str | None:
    """One line for a tree run (--topk > 1): its shape, and what K and the per-position columns mean."""
    config = meta.get("config") or {}
    if (config.get("topk") or 1) <= 1:
        return None
    return (
        f"Tree drafting: {drafting_shape(config.get('topk'), config.get('num_draft_tokens'))} verified per "
        "step (root included); K = draft steps (the longest draft path); per-position acceptance is by depth."
    )


def lossless_test_note(meta: dict) -> str | None:
    """What the `lossless test` column is, when the run has one (an engine's --check-lossless above T=0)."""
    if not any("lossless_test" in e for e in meta.get("summary") or [] if isinstance(e, dict)):
        return None
    return (
        "lossless test: the server's turn-1 samples of every "
        "repeat against as many target-only samples, both "
        "scored by the target (permutation test, alpha 0.05); "
        "NOT lossless means its sampler does not draw from "
        "the target's distribution, so AL at this temperature is not the method's."
    )


def _optional_columns(rows: list[dict]) -> list[str]:
    return [c for c in OPTIONAL_COLUMNS if any(c in r for r in rows)]


def drafted_differs(rows: list[dict]) -> bool:
    """vLLM's drafted-steps AL gets its own column when it differs from alcheck's AL in any row:
    a method that skips steps (n-gram, suffix). For EAGLE every step drafts and the two agree."""
    return any(
        r.get("al_drafted_steps") is not None and abs(r["al_drafted_steps"] - r["al_mean"]) > 1e-9
        for r in rows
        if r.get("al_mean") is not None
    )


def drafted_note() -> str:
    c = CONVENTIONS[VLLM_DRAFTED]
    return (
        f"{c.label}: {c.formula} — the number vLLM prints as its mean acceptance length; it reads "
        "above alcheck's AL when steps proposed nothing (plain decoding steps it does not count)."
    )


def _ref_cell_text(ref: dict) -> str:
    if ref["value"] is None:
        return DASH
    if ref["verdict"] is None:
        return fmt(ref["value"])
    return f"{fmt(ref['value'])} ({fmt_signed(ref['diff'])}) {ref['verdict']}"


def _speedup_text(value) -> str:
    return DASH if value is None else f"{value:.2f}×"


def _optional_text(column: str, value) -> str:
    if value is None:
        return DASH
    if column == "lossless_test":  # an engine's temperature > 0 test (alcheck/diagnostics/sampler_check.py)
        p, word = float(value.get("p_value", "nan")), "lossless" if value.get("lossless") else "NOT lossless"
        return f"{word} (p {p:.3f})" if p >= 0.001 else f"{word} (p {p:.0e})"
    return fmt(value) if column == "lossless_rate" else str(int(value))


def _ref_cells(row: dict, refs: list[dict]) -> list[dict | None]:
    """The row's entry for each of the run's references, in the run's order; None for a
    reference judged on another dataset's rows."""
    mine = {ref["name"]: ref for ref in row["references"]}
    return [mine.get(reference_label(ref, i)) for i, ref in enumerate(refs)]


def rich_table(meta: dict) -> Table:
    labelled = table_rows(meta)
    rows = [row for _, row in labelled]
    several = any(label is not None for label, _ in labelled)
    refs = meta.get("references") or []
    shape = drafting_shape(
        (meta.get("config") or {}).get("topk"), (meta.get("config") or {}).get("num_draft_tokens")
    )
    suffix = "" if shape == "chain" else f" ({shape})"
    by = "dataset and K" if several else "K"
    table = Table(title=f"Acceptance length by {by}{suffix} — {AL_LABEL}", title_justify="left")
    if several:
        table.add_column("dataset")
    table.add_column("K", justify="right")
    table.add_column("AL mean ± std\n(incl. bonus token)", justify="right")
    table.add_column("95% CI", justify="right")
    drafted = drafted_differs(rows)
    if drafted:
        table.add_column(CONVENTIONS[VLLM_DRAFTED].label.replace(" AL", "\nAL"), justify="right")
    table.add_column("per-position acceptance\nP(a ≥ 1) / P(a ≥ 2) / …")
    table.add_column("tokens/s", justify="right")
    optional = _optional_columns(rows)
    for column in optional:
        table.add_column(column.replace("_", " "), justify="right")
    gains = speedup_labels(meta, [r["k"] for r in rows])
    for label in gains:
        table.add_column(label.replace(" (", "\n("), justify="right")
    found = reference_mismatches(meta)
    for i, ref in enumerate(refs):
        label = reference_label(ref, i)
        if found[label]:
            label = f"{WARN} {label}\n(not comparable: see below)"
        table.add_column(
            f"{label}\nvalue (diff) verdict", style="yellow" if found[reference_label(ref, i)] else None
        )
    for dataset, row in labelled:
        cells: list = [dataset] if several else []
        cells += [
            str(row["k"]),
            fmt_mean_std(row["al_mean"], row["al_std"], len(row["al_repeats"])),
            fmt_ci(row["al_ci95"]),
            *([fmt(row.get("al_drafted_steps"))] if drafted else []),
            fmt_per_position(row["per_position"]),
            fmt(row["tokens_per_s"], 1),
        ]
        cells += [_optional_text(c, row.get(c)) for c in optional]
        cells += [_speedup_text(row["speedup"].get(label)) for label in gains]
        for ref in _ref_cells(row, refs):
            cells.append(
                Text(_ref_cell_text(ref), style=_VERDICT_STYLE.get(ref["verdict"], "")) if ref else DASH
            )
        table.add_row(*cells, end_section=several and _last_of_dataset(labelled, dataset, row))
    notes = [
        AL_NOTE,
        *filter(
            None,
            [
                drafted_note() if drafted else None,
                tree_note(meta),
                lossless_test_note(meta),
                DATASETS_NOTE if several else None,
            ],
        ),
    ]
    notes += [VERDICT_NOTE, *noise_lines(meta)] if refs else []
    table.caption = "\n".join([*notes, *reference_warnings(meta)])
    table.caption_justify = "left"
    return table


def fitted(console, table: Table):
    """The table when it fits the console's width unwrapped; else the same cells stacked, one
    "header: value" line per present cell under a line per row, so no number is cut to "[-0.0…"
    in an 80-column terminal."""
    from rich.measure import Measurement

    unbounded = console.options.update_width(1_000_000)  # the width the table wants, not the console's
    if Measurement.get(console, unbounded, table).maximum <= console.width:
        return table
    return stacked(table)


def stacked(table: Table):
    from rich.console import Group

    def text(cell) -> Text:
        return cell.copy() if isinstance(cell, Text) else Text.from_markup(str(cell))

    headers = [" ".join(str(column.header).split()) for column in table.columns]
    cells = [list(column.cells) for column in table.columns]
    lead = 2 if headers[:2] == ["dataset", "K"] else 1  # several datasets: "gsm8k K=3" heads a row
    lines: list = [Text(str(table.title), style="bold")] if table.title else []
    for row in range(table.row_count):
        first = text(cells[0][row]).plain
        if lead == 2:
            first = f"{first} K={text(cells[1][row]).plain}"
        lines.append(Text(f"{headers[0]}={first}" if headers[0] == "K" else first, style="bold"))
        for header, column in zip(headers[lead:], cells[lead:]):
            value = text(column[row])
            if value.plain.strip() not in ("", "-", DASH):  # a missing value needs no line of its own
                lines.append(Text.assemble("  ", (f"{header}: ", "dim"), value))
    if table.caption:
        lines.append(Text(str(table.caption), style="dim"))
    return Group(*lines)


def md_escape(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_grid(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GitHub-flavoured markdown table; align entries are 'l' or 'r'."""
    align = align or ["l"] * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _last_of_dataset(labelled: list, dataset, row) -> bool:
    same = [r for label, r in labelled if label == dataset]
    return same[-1] is row


def markdown_table(meta: dict) -> str:
    labelled = table_rows(meta)
    rows = [row for _, row in labelled]
    several = any(label is not None for label, _ in labelled)
    refs = meta.get("references") or []
    optional = _optional_columns(rows)
    gains = speedup_labels(meta, [r["k"] for r in rows])
    drafted = drafted_differs(rows)
    header = [
        *(["dataset"] if several else []),
        "K",
        "AL mean ± std (tokens/step)",
        "95% CI",
        *([CONVENTIONS[VLLM_DRAFTED].label] if drafted else []),
        "per-position acceptance",
        "tokens/s",
        *[c.replace("_", " ") for c in optional],
        *gains,
    ]
    align = [*(["l"] if several else []), "r", "r", "r", *(["r"] if drafted else []), "l", "r"]
    align += ["r"] * (len(optional) + len(gains))
    found = reference_mismatches(meta)
    for i, ref in enumerate(refs):
        label = reference_label(ref, i)
        header.append(f"{WARN} {label}" if found[label] else label)
        align.append("l")
    body = []
    for dataset, row in labelled:
        cells = [
            *([dataset] if several else []),
            str(row["k"]),
            fmt_mean_std(row["al_mean"], row["al_std"], len(row["al_repeats"])),
            fmt_ci(row["al_ci95"]),
            *([fmt(row.get("al_drafted_steps"))] if drafted else []),
            fmt_per_position(row["per_position"]),
            fmt(row["tokens_per_s"], 1),
            *[_optional_text(c, row.get(c)) for c in optional],
            *[_speedup_text(row["speedup"].get(label)) for label in gains],
        ]
        cells += [_ref_cell_text(ref) if ref else DASH for ref in _ref_cells(row, refs)]
        body.append(cells)
    notes = [f"{AL_LABEL}. {AL_NOTE}"] + [
        n
        for n in (
            drafted_note() if drafted else None,
            tree_note(meta),
            lossless_test_note(meta),
            DATASETS_NOTE if several else None,
        )
        if n
    ]
    if refs:
        notes.append("Reference cells: value (run − reference) verdict. " + VERDICT_NOTE)
        notes += noise_lines(meta)
    notes += reference_warnings(meta)
    quoted = "\n".join(f"> {n}  " for n in notes).rstrip()
    return markdown_grid(header, body, align) + "\n\n" + quoted + "\n"
