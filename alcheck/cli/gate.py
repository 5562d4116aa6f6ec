"""`alcheck gate RUN_DIR --baseline BASELINE`: exit 1 when AL regressed (CI use)."""

from __future__ import annotations

import click

from alcheck.cli.option_specs import shared_option
from alcheck.options import parse_ks


@click.command("gate", short_help="CI gate: exit 1 when AL regressed against a baseline.")
@click.argument("run_dir", type=click.Path(path_type=str))
@click.option(
    "--baseline",
    required=True,
    help="A run directory, a run.json, a reference table json, or a reference name.",
)
@shared_option("tolerance", help="Allowed AL drop below the baseline (a credible drop this small passes).")
@click.option(
    "--ks",
    default=None,
    help="K values to check, e.g. 1,2,3 or 1-5 (default: every K the run and the baseline share).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Gate even when the baseline was measured with other "
    "settings (target, draft, protocol, max tokens, temperature, ...).",
)
@click.pass_context
def gate_cmd(
    ctx: click.Context, run_dir: str, baseline: str, tolerance: float, ks: str | None, force: bool
) -> None:
    """Exit 0 if RUN_DIR's AL holds up against BASELINE, 1 on a regression, 2 on bad input.

    A K regresses when its drop is credible under run-to-run noise (paired over common
    questions when the baseline is a run with questions.csv; one-sided, Holm across the gated
    K, 5% family-wise) AND larger than --tolerance. With GITHUB_STEP_SUMMARY set, the table is
    appended there.
    """
    from alcheck.cli.console import make_console
    from alcheck.report.gate import gate, print_gate

    result = gate(
        run_dir, baseline, tolerance=tolerance, ks=None if ks is None else parse_ks(ks), force=force
    )
    ctx.exit(print_gate(result, make_console()))
