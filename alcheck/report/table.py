"""The main results table (one row per K) as plain rows, a rich Table and GitHub markdown.

AL is labelled explicitly everywhere: tokens per verification step, the bonus/recovered
token included (gpt-fast's "mean accepted" is AL - 1). Numbers are shown to 2 decimals;
a reference without a value for some K shows "–".
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from alcheck.metrics import verdict as V

DASH = "–"
WARN = "⚠"
AL_LABEL = "AL = tokens per verification step (accepted drafts + 1 bonus token)"
AL_NOTE = ("AL counts every token a verification step emits: the accepted drafts plus the "
           "target's bonus/recovered token (gpt-fast's \"mean accepted\" = AL − 1). "
           "95% CI: bootstrap over questions.")
_VERDICT_STYLE = {V.WITHIN_NOISE: "green", V.BELOW: "bold red", V.ABOVE: "bold yellow"}


def fmt(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{float(x):.{digits}f}"


def fmt_signed(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{float(x):+.{digits}f}"


def fmt_ci(ci) -> str:
    if not ci or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in ci[:2]):
        return DASH
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def fmt_mean_std(mean, std) -> str:
    if mean is None:
        return DASH
    return f"{fmt(mean)} ± {fmt(std or 0.0)}"


def fmt_per_position(values) -> str:
    return " / ".join(fmt(v) for v in values) if values else DASH


def run_protocol(meta: dict) -> str | None:
    return (meta.get("config") or {}).get("protocol")


def protocol_mismatch(meta: dict, ref: dict) -> bool:
    mine, theirs = run_protocol(meta), ref.get("protocol")
    return bool(mine and theirs and mine != theirs)


def reference_label(ref: dict, index: int = 0) -> str:
    return str(ref.get("name") or f"reference {index + 1}")


def protocol_warnings(meta: dict) -> list[str]:
    """One line per reference measured under another protocol than the run's."""
    return [
        f"{WARN} {reference_label(ref, i)} was measured with protocol '{ref.get('protocol')}', "
        f"this run used '{run_protocol(meta)}': the numbers are not directly comparable."
        for i, ref in enumerate(meta.get("references") or []) if protocol_mismatch(meta, ref)
    ]


def _ref_value(ref: dict, k: int):
    values = ref.get("values") or {}
    value = values.get(str(k), values.get(k))
    return None if value is None else float(value)


def comparison_rows(meta: dict) -> list[dict]:
    """Per K: the summary numbers plus, for every reference, its value, diff and verdict."""
    rows = []
    for entry in sorted(meta.get("summary") or [], key=lambda e: int(e["k"])):
        k = int(entry["k"])
        row = {
            "k": k,
            "al_mean": entry.get("al_mean"),
            "al_std": entry.get("al_std"),
            "al_ci95": entry.get("al_ci95"),
            "al_repeats": entry.get("al_repeats") or [],
            "per_position": entry.get("per_position") or [],
            "tokens_per_s": entry.get("tokens_per_s"),
        }
        for optional in ("lossless_rate", "slot_violations"):
            if optional in entry:
                row[optional] = entry[optional]
        row["references"] = []
        for i, ref in enumerate(meta.get("references") or []):
            value = _ref_value(ref, k)
            have = value is not None and entry.get("al_mean") is not None
            row["references"].append({
                "name": reference_label(ref, i),
                "protocol": ref.get("protocol"),
                "protocol_mismatch": protocol_mismatch(meta, ref),
                "value": value,
                "diff": float(entry["al_mean"]) - value if have else None,
                "verdict": V.reference_verdict(entry["al_mean"], entry.get("al_ci95"),
                                               entry.get("al_repeats"), value) if have else None,
            })
        rows.append(row)
    return rows


def _optional_columns(rows: list[dict]) -> list[str]:
    return [c for c in ("lossless_rate", "slot_violations") if any(c in r for r in rows)]


def _ref_cell_text(ref: dict) -> str:
    if ref["value"] is None:
        return DASH
    if ref["verdict"] is None:
        return fmt(ref["value"])
    return f"{fmt(ref['value'])} ({fmt_signed(ref['diff'])}) {ref['verdict']}"


def _optional_text(column: str, value) -> str:
    if value is None:
        return DASH
    return fmt(value) if column == "lossless_rate" else str(int(value))


def rich_table(meta: dict) -> Table:
    rows = comparison_rows(meta)
    refs = meta.get("references") or []
    table = Table(title=f"Acceptance length by K — {AL_LABEL}", title_justify="left")
    table.add_column("K", justify="right")
    table.add_column("AL mean ± std\n(incl. bonus token)", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("per-position acceptance\nP(a ≥ 1) / P(a ≥ 2) / …")
    table.add_column("tokens/s", justify="right")
    optional = _optional_columns(rows)
    for column in optional:
        table.add_column(column.replace("_", " "), justify="right")
    for i, ref in enumerate(refs):
        label = reference_label(ref, i)
        if protocol_mismatch(meta, ref):
            label = f"{WARN} {label}\n(protocol {ref.get('protocol')})"
        table.add_column(f"{label}\nvalue (diff) verdict", style="yellow" if
                         protocol_mismatch(meta, ref) else None)
    for row in rows:
        cells: list = [str(row["k"]), fmt_mean_std(row["al_mean"], row["al_std"]),
                       fmt_ci(row["al_ci95"]), fmt_per_position(row["per_position"]),
                       fmt(row["tokens_per_s"], 1)]
        cells += [_optional_text(c, row.get(c)) for c in optional]
        for ref in row["references"]:
            cells.append(Text(_ref_cell_text(ref), style=_VERDICT_STYLE.get(ref["verdict"], "")))
        table.add_row(*cells)
    table.caption = "\n".join([AL_NOTE, *protocol_warnings(meta)])
    table.caption_justify = "left"
    return table


def md_escape(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_grid(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GitHub-flavoured markdown table; align entries are 'l' or 'r'."""
    align = align or ["l"] * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |",
             "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_table(meta: dict) -> str:
    rows = comparison_rows(meta)
    refs = meta.get("references") or []
    optional = _optional_columns(rows)
    header = ["K", "AL mean ± std (tokens/step)", "95% CI", "per-position acceptance", "tokens/s",
              *[c.replace("_", " ") for c in optional]]
    align = ["r", "r", "r", "l", "r", *["r"] * len(optional)]
    for i, ref in enumerate(refs):
        label = reference_label(ref, i)
        header.append(f"{WARN} {label}" if protocol_mismatch(meta, ref) else label)
        align.append("l")
    body = []
    for row in rows:
        cells = [str(row["k"]), fmt_mean_std(row["al_mean"], row["al_std"]),
                 fmt_ci(row["al_ci95"]), fmt_per_position(row["per_position"]),
                 fmt(row["tokens_per_s"], 1), *[_optional_text(c, row.get(c)) for c in optional]]
        cells += [_ref_cell_text(ref) for ref in row["references"]]
        body.append(cells)
    notes = [f"{AL_LABEL}. {AL_NOTE}"]
    if refs:
        notes.append("Reference cells: value (run − reference) verdict; `below`/`above` "
                     "only when "
                     "the difference exceeds both the repeat spread and the 95% CI.")
    notes += protocol_warnings(meta)
    quoted = "\n".join(f"> {n}  " for n in notes).rstrip()
    return markdown_grid(header, body, align) + "\n\n" + quoted + "\n"
