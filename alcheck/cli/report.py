"""`alcheck report RUN_DIR [-o report.md]`: markdown report with tables and plots."""

from __future__ import annotations

import click


@click.command("report", short_help="Write a markdown report with plots for a run or ablation.")
@click.argument("run_dir", type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="Markdown file to write (default: RUN_DIR/report.md). Plots are written next to it.",
)
def report_cmd(run_dir: str, output: str | None) -> None:
    """Write a GitHub-flavoured markdown report of a run, with PNG plots beside it.

    RUN_DIR may also be an `alcheck ablate` directory (holding ablation.json).
    """
    from pathlib import Path

    from alcheck.report.markdown import write_report
    from alcheck.report.verify import disagreement_line

    if (Path(run_dir) / "ablation.json").is_file():
        from alcheck.report.ablation import write_ablation_report

        path = write_ablation_report(Path(run_dir), output)
        click.echo(f"wrote {path}")
        return

    path, images, problems = write_report(run_dir, output)
    if problems:  # the report itself uses the recomputed numbers and says so
        click.echo(f"warning: {disagreement_line(problems)}", err=True)
    click.echo(
        f"wrote {path}"
        + (f" and {len(images)} plots: " + ", ".join(p.name for p in images) if images else "")
    )
