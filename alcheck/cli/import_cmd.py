"""`alcheck import FORMAT FILE`: another tool's output file as an alcheck run or reference."""

from __future__ import annotations

import click

from alcheck.cli.help_panels import IMPORT, panelled
from alcheck.imports import FORMATS
from alcheck.options import DRAFT_SAMPLING


def _summary_lines(result) -> list[str]:
    """What the import holds, in a few lines (the numbers come from what was written)."""
    from alcheck.report.import_notes import import_lines

    if result.kind == "reference":
        lines = []
        for table, path in zip(result.tables, result.paths):
            values = ", ".join(f"K={k}: AL {v:.3f}" for k, v in table["values"].items())
            lines.append(f"reference {table['name']} ({values}) -> {path}")
            lines += [f"  {line}" for line in import_lines(table, table["imported"])]
        return lines
    meta = result.meta
    lines = [f"run -> {result.paths[0]}"]
    for entry in meta["summary"]:
        lines.append(
            f"K={entry['k']}: AL {entry['al_mean']:.3f} (1 + accepted / steps, pooled over "
            f"{sum(c['steps'] for c in meta['cells'])} steps)"
        )
    return lines + import_lines(meta["config"], meta["imported"])


@click.command(
    "import", short_help="Read another tool's output file as a run or a reference table.", **panelled(IMPORT)
)
@click.argument("fmt", metavar="FORMAT", type=click.Choice(list(FORMATS)))
@click.argument("file", type=click.Path(path_type=str))
@click.option(
    "--k",
    type=click.IntRange(min=1),
    default=None,
    help="Draft tokens per step (draft steps for trees), when the file does not record it.",
)
@click.option("--target", default=None, help="The target model (hub id or folder name).")
@click.option("--draft", default=None, help="The draft head.")
@click.option(
    "--method",
    default=None,
    help="The drafting method (eagle, eagle3; Spec-Bench: eagle2, pld, ...): how Spec-Bench counted EOS.",
)
@click.option("--dataset", default=None, help="The dataset the file was measured on (e.g. mt_bench).")
@click.option("--protocol", default=None, help="The prompt protocol (e.g. eagle-repo-llama2, vllm-example).")
@click.option(
    "--temperature", type=click.FloatRange(min=0), default=None, help="Sampling temperature (0 = greedy)."
)
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="New tokens per generation.")
@click.option("--dtype", default=None, help="The dtype the source ran in.")
@click.option("--topk", type=click.IntRange(min=1), default=None, help="Tree branching (1 = chain).")
@click.option(
    "--num-draft-tokens",
    type=click.IntRange(min=2),
    default=None,
    help="Tokens verified per step for a tree, root included.",
)
@click.option(
    "--draft-sampling",
    type=click.Choice(DRAFT_SAMPLING),
    default=None,
    help=f"The source's temperature > 0 convention: {' or '.join(DRAFT_SAMPLING)}.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Questions measured, when not the whole dataset.",
)
@click.option(
    "--baseline",
    default=None,
    type=click.Path(path_type=str),
    help="The baseline (target-only) answer file of the same tool: speedup, both ways.",
)
@click.option(
    "--tokenizer",
    default=None,
    type=click.Path(path_type=str),
    help="The target's tokenizer folder: re-tokenizes the baseline's answers as the source does.",
)
@click.option(
    "--against",
    default=None,
    type=click.Path(path_type=str),
    help="A run directory whose turn-1 answer texts to compare with the file's.",
)
@click.option(
    "--out",
    default=None,
    type=click.Path(path_type=str),
    help="The run directory (default results/runs/import-<file>-<format>) or the tables' folder.",
)
@click.option("--name", default=None, help="Reference name (whole-run formats; default import-<file>).")
@click.option(
    "--reference",
    default="auto",
    show_default=True,
    help="References to store with an imported run: auto, none, or names.",
)
def import_cmd(fmt, file, baseline, tokenizer, against, out, name, reference, **settings) -> None:
    """Import FILE, written by another tool in FORMAT, as an alcheck run or reference table.

    Per-question files (eagle-answers, spec-bench, aiperf) become a run directory that report,
    compare and gate read like any run; whole-run files (vllm-spec-decode, vllm-bench-serve,
    sglang-bench-speculative) become reference tables for `run --reference` and `gate`. Counts are
    converted to alcheck's AL (1 + accepted drafts / verification step) and the source's counting
    rule is kept with them. Settings the file does not record come from the options; each is
    stored with its origin, and comparisons warn about the ones nobody stated.
    """
    from pathlib import Path

    from alcheck.imports.importer import ImportRequest, run_import
    from alcheck.imports.settings import Given

    def path(value):
        return None if value is None else Path(value)

    result = run_import(
        ImportRequest(
            fmt,
            Path(file),
            Given(**settings),
            path(out),
            name,
            path(baseline),
            path(tokenizer),
            path(against),
            reference,
        )
    )
    for line in _summary_lines(result):
        click.echo(line)
