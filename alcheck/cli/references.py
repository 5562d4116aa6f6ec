"""`alcheck references`: list the published reference AL tables."""

from __future__ import annotations

import json

import click

from alcheck.options import is_tree


def _fmt_al(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if round(v, 2) == v else f"{v:.3f}"


@click.command("references", short_help="List the published reference AL tables.")
@click.option("--json", "as_json", is_flag=True, help="Print the tables as a JSON list instead.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Reference directory (default: the shipped tables and ./results/references/); bad files skipped.",
)
def references_cmd(as_json: bool, directory: str | None):
    """List the published reference AL tables (AL = 1 + accepted drafts per verification step)."""
    from alcheck.references.tables import load_references

    # a folder may hold other JSON (a run.json, a stray file): name each one and list the rest
    refs = load_references(directory, on_bad=lambda path, why: click.echo(f"skipped: {why}", err=True))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in refs], indent=2, allow_nan=False))
        return

    from rich.console import Console

    from alcheck.report.table import fitted

    table = references_table(refs)
    # A pipe or test runner gets a wide table; a terminal narrower than the table gets one block
    # per reference (every column), not a name column squeezed beside empty ones.
    console = Console()
    if not console.is_terminal:
        console = Console(width=300)
    console.print(fitted(console, table))


def references_table(refs):
    """One row per reference table: its settings, its AL per K, its source."""
    from rich.table import Table

    from alcheck.references.tables import short_source

    ks = sorted({k for r in refs for k in r.ks})
    table = Table(
        title="Reference acceptance lengths (AL = 1 + accepted drafts / verification step)",
        caption=f"{len(refs)} reference table(s); temp: sampling temperature (0 = greedy); drafting: chain, "
        "or tree topk/T (T tokens verified per step, K = draft steps); "
        "noise: run-to-run SD the source states (- = not stated)",
    )
    table.add_column("name", no_wrap=True)
    table.add_column("target")
    table.add_column("draft")
    table.add_column("method")
    table.add_column("protocol")
    table.add_column("dataset")
    table.add_column("max tok", justify="right")
    table.add_column("temp", justify="right")
    table.add_column("drafting")
    table.add_column("noise", justify="right")
    for k in ks:
        table.add_column(f"K={k}", justify="right")
    table.add_column("source")
    for r in refs:
        table.add_row(
            r.name,
            r.target,
            r.draft,
            r.method,
            r.protocol,
            r.dataset,
            "?" if r.max_tokens is None else str(r.max_tokens),
            "?" if r.temperature is None else f"{r.temperature:g}",
            f"tree {r.topk}/{r.num_draft_tokens}" if is_tree(r.topk) else "chain",
            "-" if r.noise is None else f"±{r.noise:g}",
            *(_fmt_al(r.value(k)) for k in ks),
            short_source(r.source),
        )
    return table
