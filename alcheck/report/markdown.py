"""`alcheck report`: one GitHub-flavoured markdown file with tables and linked PNG plots."""

from __future__ import annotations

from pathlib import Path

from alcheck.metrics.acceptance import al_by
from alcheck.report import plots
from alcheck.report.run_io import Run, load_run
from alcheck.report.table import DASH, fmt, markdown_grid, markdown_table


def _value(x) -> str:
    if x is None or x == "":
        return DASH
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def header_section(run: Run) -> str:
    meta, config, env = run.meta, run.config, run.meta.get("environment") or {}
    title = f"# alcheck report: {config.get('target', '?')} + {config.get('draft', '?')}"
    versions = ", ".join(f"{name} {env[name]}" for name in ("alcheck", "torch", "transformers",
                                                              "python") if env.get(name))
    device = config.get("device")
    if env.get("device_name"):
        device = f"{device} ({env['device_name']})" if device else env["device_name"]
    fields = [
        ("target", config.get("target")), ("draft", config.get("draft")),
        ("method", config.get("method")), ("protocol", config.get("protocol")),
        ("dataset", config.get("dataset")), ("limit", config.get("limit")),
        ("turns", config.get("turns")), ("max tokens", config.get("max_tokens")),
        ("temperature", config.get("temperature")), ("repeats", config.get("repeats")),
        ("dtype", env.get("dtype") or config.get("dtype")), ("device", device),
        ("attention backend", env.get("attention_backend")), ("versions", versions),
        ("date", meta.get("created")), ("status", meta.get("status")),
    ]
    table = markdown_grid(["setting", "value"],
                          [[name, f"`{_value(v)}`" if v not in (None, "") else DASH]
                           for name, v in fields])
    parts = [title, "", table]
    if meta.get("status") == "partial":
        parts += ["", "> ⚠ This run is **partial**: only finished (K, repeat) passes are "
                  "counted. "
                  "Finish it with `alcheck run --resume DIR`."]
    return "\n".join(parts)


def per_position_section(run: Run, image: str | None) -> str:
    summary = sorted(run.summary, key=lambda e: int(e["k"]))
    width = max((len(e.get("per_position") or []) for e in summary), default=0)
    header = ["K", *[f"P(a ≥ {i})" for i in range(1, width + 1)], "1 + Σ = AL"]
    rows = []
    for e in summary:
        pp = list(e.get("per_position") or [])
        total = 1 + sum(v for v in pp if v is not None) if pp else None
        rows.append([str(e["k"]), *[fmt(v) for v in pp], *[DASH] * (width - len(pp)), fmt(total)])
    parts = ["## Per-position acceptance", "",
             "P(a ≥ i) = share of verification steps with at least i drafts accepted "
             "(not a conditional rate), pooled over all steps.", "",
             markdown_grid(header, rows, ["r"] * len(header))]
    if image:
        parts += ["", f"![Per-position acceptance]({image})"]
    return "\n".join(parts)


def breakdown_section(run: Run, by: str, title: str) -> str:
    if not run.has_questions or by not in run.questions.columns:
        return f"## {title}\n\n_No per-question data (questions.csv) in this run._"
    table = al_by(run.questions, by=[by])
    ks = sorted(table["k"].unique().tolist())
    groups = sorted(table[by].unique().tolist(), key=str)
    n = table.groupby(by)["n_questions"].max()
    header = [by, "questions", *[f"AL K={k}" for k in ks]]
    lookup = {(int(r.k), r[by]): r.al for _, r in table.iterrows()}
    rows = [[str(g), str(int(n[g])), *[fmt(lookup.get((k, g))) for k in ks]] for g in groups]
    return "\n".join([f"## {title}", "",
                      "Pooled AL (Σ emitted / Σ steps) over every repeat of the group's "
                      "generations.",
                      "", markdown_grid(header, rows, ["l", "r", *["r"] * len(ks)])])


def render_report(run: Run, out_path) -> tuple[str, list[Path]]:
    """Write the plots beside `out_path`; return the markdown text (not written) and the PNGs."""
    out_path = Path(out_path)
    stem = out_path.stem
    al_png = out_path.with_name(f"{stem}-al-vs-k.png")
    pp_png = out_path.with_name(f"{stem}-per-position.png")
    have_data = bool(run.summary)
    images = []
    if have_data:
        images = [plots.plot_al_vs_k(run.meta, al_png), plots.plot_per_position(run.meta, pp_png)]
    sections = [
        header_section(run),
        "## Acceptance length\n\n" + markdown_table(run.meta).rstrip()
        + (f"\n\n![AL vs K]({al_png.name})" if have_data else ""),
        per_position_section(run, pp_png.name if have_data else None),
        breakdown_section(run, "category", "AL per category"),
        breakdown_section(run, "turn", "AL per turn"),
    ]
    return "\n\n".join(sections).rstrip() + "\n", images


def write_report(run_path, out=None) -> tuple[Path, list[Path]]:
    """Load a run, write the markdown report (default RUN_DIR/report.md) and its plots."""
    run = load_run(run_path)
    out_path = Path(out) if out else run.dir / "report.md"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    text, images = render_report(run, out_path)
    out_path.write_text(text, encoding="utf-8")
    return out_path, images
