"""`alcheck report`: one GitHub-flavoured markdown file with tables and linked PNG plots."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import al_by
from alcheck.metrics.keys import DATASET_COLUMN
from alcheck.references.tables import drafting_shape
from alcheck.report import plots
from alcheck.report.dataset_views import dataset_text, is_several, labels, meta_views
from alcheck.report.import_notes import import_section, imported, origin_text
from alcheck.report.repeat_numbers import cell_name
from alcheck.report.run_files import refuse_run_file
from alcheck.report.run_io import QUESTIONS_FILE, Run, load_run, resolve_run_json
from alcheck.report.table import DASH, fmt, markdown_grid, markdown_table, shown_positions
from alcheck.report.verify import verified_run


def _value(x) -> str:
    if x is None or x == "":
        return DASH
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def link(name: str) -> str:
    """A file name as a markdown link destination: percent-encoded, since CommonMark ends a bare
    destination at a space ('my report-al-vs-k.png' would not render) and GitHub reads %20 and UTF-8."""
    return quote(name)


def draft_head_line(meta: dict) -> str:
    """An engine run's draft head: what --draft/--method stated, and whether the server confirmed it."""
    config, env = meta.get("config") or {}, meta.get("environment") or {}
    stated = " ".join(
        x for x in (config.get("draft"), f"({config['method']})" if config.get("method") else "") if x
    )
    heads = list((env.get("draft_heads") or {}).values())
    reported = sorted(
        {
            f"{h.get('reported_draft') or '?'} ({h.get('reported_method') or '?'})"
            for h in heads
            if h.get("reported_draft") or h.get("reported_method")
        }
    )
    if env.get("draft_verified"):
        return f"{stated or ', '.join(reported)}, as the server reports it"
    if reported:
        return f"{stated or 'not stated'}; the server reports {', '.join(reported)}"
    return f"{stated or 'not stated'} (unverified: the server does not report its draft head)"


def _engine_name(env: dict) -> str:
    """'vllm 0.29.0' for an engine run (the version as the server reported it)."""
    return f"{env.get('engine', '?')} {env.get('engine_version') or '(version not reported)'}"


def _endpoints(env: dict) -> str:
    """The server's URL, or every server's when the requests were spread over several."""
    return ", ".join(env.get("endpoints") or [str(env.get("endpoint", "?"))])


def header_section(run: Run) -> str:
    meta, config, env = run.meta, run.config, run.meta.get("environment") or {}
    engine = env.get("backend") == "engine"
    title = f"# alcheck report: {config.get('target', '?')} + {config.get('draft', '?')}"
    if engine:  # the server held the draft: name it instead
        where = f"{_engine_name(env)} at {_endpoints(env)}"
        title = f"# alcheck report: {config.get('target', '?')} on {where}"
    block = imported(meta)
    if block is not None:  # another tool's file: name the file (target and draft may be unknown)
        title = f"# alcheck report: {block.get('format')} file {Path(str(block.get('file'))).name} (imported)"
    versions = ", ".join(
        f"{name} {env[name]}" for name in ("alcheck", "torch", "transformers", "python") if env.get(name)
    )
    device = None if engine else config.get("device")  # the server chose its device, not --device
    if env.get("device_name"):
        device = f"{device} ({env['device_name']})" if device else env["device_name"]
    tp = env.get("tensor_parallel")
    if tp:
        device = f"{device}, tensor parallel {tp['tensor_parallel_size']} ranks over {tp['backend']}"
    fields = [
        ("target", config.get("target")),
        *(
            [
                ("engine", _engine_name(env)),
                ("endpoint", _endpoints(env)),
                ("served model", env.get("served_model")),
                ("draft head", draft_head_line(meta)),
                ("counting", env.get("counting")),
                ("concurrency", env.get("concurrency")),
            ]
            if engine
            else [("draft", config.get("draft"))]
        ),
        ("method", config.get("method")),
        ("protocol", config.get("protocol")),
        ("dataset", dataset_text(config)),
        ("limit", config.get("limit")),
        ("turns", config.get("turns")),
        ("max tokens", config.get("max_tokens")),
        ("temperature", config.get("temperature")),
        ("repeats", config.get("repeats")),
        *(
            [("drafting", drafting_shape(config.get("topk"), config.get("num_draft_tokens")))]
            if (config.get("topk") or 1) > 1
            else []
        ),
        ("dtype", env.get("dtype") or config.get("dtype")),
        ("device", device),
        ("attention backend", env.get("attention_backend")),
        ("versions", versions),
        ("date", meta.get("created")),
        ("status", meta.get("status")),
    ]
    if engine:  # settings of alcheck's built-in runner: the server's are in the rows above
        fields = [(name, v) for name, v in fields if name not in ("method", "attention backend")]
    keys = {"max tokens": "max_tokens", "drafting": "topk"}  # the origins' names of the shown settings
    table = markdown_grid(
        ["setting", "value"],
        [
            [
                name,
                (f"`{_value(v)}`" if v not in (None, "") else DASH)
                + origin_text(config, keys.get(name, name)),
            ]
            for name, v in fields
        ],
    )
    parts = [title, "", table]
    if meta.get("status") == "partial":
        parts += [
            "",
            "> ⚠ This run is **partial**: only finished (K, repeat) passes are "
            "counted. "
            "Finish it with `alcheck run --resume DIR`.",
        ]
        if meta.get("missing_cells"):  # a merge of shares (alcheck merge) that lacks some
            absent = ", ".join(cell_name(k, r) for k, r in meta["missing_cells"])
            parts[-1] += f" No share held {absent}."
    return "\n".join(parts)


def per_position_section(run: Run, image: str | None) -> str:
    views = meta_views(run.meta, pooled=True)  # a run of several datasets: each, then all pooled
    summary = [
        (label, e)
        for label, view in views
        for e in sorted(view.get("summary") or [], key=lambda e: int(e["k"]))
    ]
    longest = max((len(e.get("per_position") or []) for _, e in summary), default=0)
    width = max((shown_positions(e.get("per_position") or []) for _, e in summary), default=0)
    several = views[0][0] is not None
    header = [
        *(["dataset"] if several else []),
        "K",
        *[f"P(a ≥ {i})" for i in range(1, width + 1)],
        "1 + Σ = AL",
    ]
    rows = []
    for label, e in summary:
        pp = list(e.get("per_position") or [])
        total = 1 + sum(v for v in pp if v is not None) if pp else None
        rows.append(
            [
                *([label] if several else []),
                str(e["k"]),
                *[fmt(v) for v in pp[:width]],
                *[DASH] * (width - len(pp)),
                fmt(total),
            ]
        )
    parts = [
        "## Per-position acceptance",
        "",
        "P(a ≥ i) = share of verification steps with at least i drafts accepted "
        "(not a conditional rate), pooled over all steps.",
        "",
        markdown_grid(header, rows, [*(["l"] if several else []), *["r"] * (len(header) - several)]),
    ]
    if width < longest:
        parts += [
            "",
            f"P(a ≥ {width + 1}) to P(a ≥ {longest}) print as {fmt(0.0)} at every K and are not listed "
            "(no step accepted that many drafts, or too few to show); 1 + Σ sums them all, and "
            "run.json's summary holds each.",
        ]
    if image:
        parts += ["", f"![Per-position acceptance]({link(image)})"]
    return "\n".join(parts)


def breakdown_section(run: Run, by: str, title: str) -> str:
    """AL per K of each group of `by`; in a run of several datasets per (dataset, group), the
    datasets in the run's order (their categories may share names: mt_bench's and gsm8k's math)."""
    if not run.has_questions or by not in run.questions.columns:
        return f"## {title}\n\n_No per-question data (questions.csv) in this run._"
    keys = [DATASET_COLUMN, by] if DATASET_COLUMN in run.questions.columns and by != DATASET_COLUMN else [by]
    table = al_by(run.questions, by=keys)
    ks = sorted(table["k"].unique().tolist())
    order = {label: i for i, label in enumerate(labels(run.meta))} if DATASET_COLUMN in keys else {}
    groups = sorted(
        set(table[keys].itertuples(index=False, name=None)),  # itertuples keeps each column's type
        key=lambda g: (order.get(g[0], len(order)), *map(str, g)) if order else tuple(map(str, g)),
    )
    n = {
        tuple(g if isinstance(g, tuple) else (g,)): v
        for g, v in table.groupby(keys)["n_questions"].max().items()
    }
    lookup = {(int(k), *g): al for k, al, *g in table[["k", "al", *keys]].itertuples(index=False, name=None)}
    rows = [[*map(str, g), str(int(n[g])), *[fmt(lookup.get((k, *g))) for k in ks]] for g in groups]
    return "\n".join(
        [
            f"## {title}",
            "",
            "Pooled AL (Σ emitted / Σ steps) over every repeat of the group's generations.",
            "",
            markdown_grid(
                [*keys, "questions", *[f"AL K={k}" for k in ks]],
                rows,
                [*["l"] * len(keys), "r", *["r"] * len(ks)],
            ),
        ]
    )


def summary_note(problems: list[str], have_questions: bool) -> str:
    if not have_questions:
        return (
            "> ⚠ No questions.csv: the numbers below are run.json's stored summary, not "
            "recomputed from per-question counts."
        )
    if not problems:
        return (
            "Every number below is recomputed from questions.csv and agrees with run.json's stored summary."
        )
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return (
        "> ⚠ run.json's stored summary **disagrees** with questions.csv (" + shown + "). "
        "The numbers below are recomputed from questions.csv."
    )


def skipped_section(run: Run) -> str | None:
    context = run.meta.get("context") or {}
    skipped = list(context.get("skipped") or [])
    skipped += [s for c in run.meta.get("cells") or [] for s in c.get("skipped") or []]
    if not skipped:
        return None
    several = any(DATASET_COLUMN in s for s in skipped)  # ids repeat across datasets
    unique = {
        ((s.get(DATASET_COLUMN),) if several else ()) + (s.get("question_id"), s.get("turn")): s
        for s in skipped
    }
    rows = [[*map(str, key), str(s.get("positions"))] for key, s in sorted(unique.items(), key=str)]
    return "\n".join(
        [
            "## Skipped (longer than the context)",
            "",
            f"{len(unique)} question turn{'s' if len(unique) != 1 else ''} "
            "did not fit the target's context of "
            f"{context.get('limit')} positions (prompt + max "
            "tokens + K − 1) and were skipped by `--skip-long`; "
            "AL is measured over the rest.",
            "",
            markdown_grid(
                [*([DATASET_COLUMN] if several else []), "question", "turn", "positions needed"],
                rows,
                [*(["l"] if several else []), "r", "r", "r"],
            ),
        ]
    )


def render_report(run: Run, out_path, problems: list[str] | None = None) -> tuple[str, list[Path]]:
    """Write the plots beside `out_path`; return the markdown text (not written) and the PNGs.
    `problems` given means `run` is already verified_run()'s result."""
    out_path = Path(out_path)
    stem = out_path.stem
    al_png = out_path.with_name(f"{stem}-al-vs-k.png")
    pp_png = out_path.with_name(f"{stem}-per-position.png")
    have_data = bool(run.summary)
    images = []
    if have_data:
        images = [plots.plot_al_vs_k(run.meta, al_png), plots.plot_per_position(run.meta, pp_png)]
    if problems is None:
        run, problems = verified_run(run)
    sections = [
        header_section(run),
        import_section(run.meta),
        "## Acceptance length\n\n"
        + summary_note(problems, run.has_questions)
        + "\n\n"
        + markdown_table(run.meta).rstrip()
        + (f"\n\n![AL vs K]({link(al_png.name)})" if have_data else ""),
        per_position_section(run, pp_png.name if have_data else None),
        breakdown_section(run, DATASET_COLUMN, "AL per dataset") if is_several(run.meta) else None,
        breakdown_section(run, "category", "AL per category"),
        breakdown_section(run, "turn", "AL per turn"),
        skipped_section(run),
    ]
    return "\n\n".join(s for s in sections if s).rstrip() + "\n", images


def write_report(run_path, out=None) -> tuple[Path, list[Path], list[str]]:
    """Load a run, write the markdown report (default RUN_DIR/report.md) and its plots.
    Returns the paths and the disagreements between the stored and recomputed summary."""
    run = load_run(run_path)
    out_path = Path(out) if out else run.dir / "report.md"
    refuse_run_file(out_path, inputs=(resolve_run_json(run_path), run.dir / QUESTIONS_FILE))
    run, problems = verified_run(run)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        text, images = render_report(run, out_path, problems)
        out_path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise unwritable(out_path, exc) from None
    return out_path, images, problems


def unwritable(path: Path, exc: OSError) -> AlcheckError:
    blocker = next((parent for parent in Path(path).parents if parent.is_file()), None)
    reason = f"{blocker} is a file, not a folder" if blocker else exc.strerror or type(exc).__name__
    return AlcheckError(f"cannot write the report {path} ({reason}): pass -o in a folder you can write to")
