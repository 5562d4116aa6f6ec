"""Tables for `ablation.json` (alcheck ablate kv-lookahead): rich for the terminal, markdown for PRs."""

from __future__ import annotations

from rich.table import Table

from alcheck.report.table import fmt, fmt_ci, fmt_signed, markdown_grid

HEADER = [
    "K",
    "AL with",
    "AL without",
    "Δ with−without",
    "95% CI (paired)",
    "verdict",
    "lossless with",
    "lossless without",
    "foreign KV writes with",
    "foreign KV writes without",
]


def _cells(row: dict) -> list[str]:
    def count(x):
        return "–" if x is None else str(int(x))

    return [
        str(row["k"]),
        fmt(row["al_with"]),
        fmt(row["al_without"]),
        fmt_signed(row["al_diff"]),
        fmt_ci(row["al_diff_ci95"]),
        row["verdict"],
        fmt(row["lossless_rate_with"]),
        fmt(row["lossless_rate_without"]),
        count(row["slot_violations_with"]),
        count(row["slot_violations_without"]),
    ]


def ablation_rich_table(meta: dict) -> Table:
    table = Table(title="KV-lookahead ablation — AL = tokens per verification step (incl. bonus token)")
    for i, name in enumerate(HEADER):
        table.add_column(name, justify="left" if i == 5 else "right")
    for row in meta["summary"]:
        table.add_row(*_cells(row))
    return table


def ablation_markdown(meta: dict) -> str:
    cfg, env = meta["config"], meta.get("environment", {})
    lines = [
        "# alcheck ablation: KV lookahead slots",
        "",
        f"- target: `{cfg['target']}`",
        f"- draft: `{cfg['draft']}`",
        f"- protocol: {cfg['protocol']}, dataset: {cfg['dataset']}, max tokens: {cfg['max_tokens']}, "
        f"block size: {cfg['block_size']}, repeats: {cfg['repeats']}",
        f"- device: {env.get('device_name', '?')} ({env.get('dtype', '?')}), alcheck "
        f"{env.get('alcheck', '?')}, "
        f"torch {env.get('torch', '?')}",
        "",
        '"foreign KV writes": KV writes (target or draft) into blocks the writing request does not own. '
        '"without" reproduces the runner before lookahead slots were allocated: the draft writes '
        "past the request's blocks through unset block-table entries into block 0.",
        "",
        markdown_grid(HEADER, [_cells(r) for r in meta["summary"]], ["right"] * 5 + ["left"] + ["right"] * 4),
        "",
    ]
    return "\n".join(lines)


def write_ablation_report(directory, output=None):
    """`alcheck report ABLATION_DIR`: ablation.json -> markdown (default ABLATION_DIR/report.md)."""
    from pathlib import Path

    from alcheck.errors import AlcheckError
    from alcheck.report.markdown import unwritable
    from alcheck.report.run_files import refuse_run_file
    from alcheck.report.run_io import read_json

    path = Path(output) if output else Path(directory) / "report.md"
    refuse_run_file(path)
    meta = read_json(Path(directory) / "ablation.json", "ablation.json")
    try:
        text = ablation_markdown(meta)
    except (KeyError, TypeError, AttributeError):
        raise AlcheckError(
            f"{Path(directory) / 'ablation.json'} is not an ablation written by `alcheck ablate`: "
            "re-run the ablation"
        ) from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise unwritable(path, exc) from None
    return path
