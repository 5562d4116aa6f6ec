"""`alcheck compare RUN_A RUN_B`: paired comparison of two runs, K by K."""

from __future__ import annotations

import json

import click


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=str))
@click.argument("run_b", type=click.Path(path_type=str))
@click.option("--force", is_flag=True,
              help="Compare even when protocol, dataset, max_tokens, temperature or (above "
                   "temperature 0) the draft-sampling convention differ.")
@click.option("--tolerance", type=float, default=0.02, show_default=True,
              help="Report A/B higher only when the credible change is larger than this AL.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--n-boot", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Bootstrap resamples.")
def compare_cmd(run_a: str, run_b: str, force: bool, tolerance: float, as_json: bool,
                n_boot: int) -> None:
    """Is the AL difference between RUN_A and RUN_B real or noise?

    Per K: AL of each run on their common (question_id, turn) units and B − A, judged against
    the run-to-run noise of both runs (Holm across K, 5% family-wise). Verdict: no detectable
    change / within tolerance / A higher / B higher. The paired question bootstrap CI (other
    prompts) is shown separately.
    """
    from alcheck.cli.console import make_console
    from alcheck.report.compare import compare_runs, print_compare

    result = compare_runs(run_a, run_b, force=force, n_boot=n_boot, tolerance=tolerance)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        print_compare(result, make_console())
