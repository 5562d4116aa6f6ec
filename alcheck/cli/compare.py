"""`alcheck compare RUN_A RUN_B`: paired comparison of two runs, K by K."""

from __future__ import annotations

import json

import click


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=str))
@click.argument("run_b", type=click.Path(path_type=str))
@click.option("--force", is_flag=True,
              help="Compare even when protocol, dataset, max_tokens or temperature differ.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--n-boot", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Bootstrap resamples.")
def compare_cmd(run_a: str, run_b: str, force: bool, as_json: bool, n_boot: int) -> None:
    """Is the AL difference between RUN_A and RUN_B real or noise?

    Per K: AL of each run on their common (question_id, turn) units, B − A, and a paired
    bootstrap 95% CI over questions. Verdict: no detectable change / A higher / B higher.
    """
    from alcheck.cli.console import make_console
    from alcheck.report.compare import compare_runs, print_compare

    result = compare_runs(run_a, run_b, force=force, n_boot=n_boot)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        print_compare(result, make_console())
