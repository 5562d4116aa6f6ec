"""`alcheck gate RUN_DIR --baseline BASELINE`: exit 1 when AL regressed (CI use)."""

from __future__ import annotations

import click
from click.core import ParameterSource

from alcheck.cli.option_specs import shared_option
from alcheck.errors import AlcheckError
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
    "--relative-tolerance",
    type=float,
    default=None,
    help="Allowed AL drop as a fraction of the baseline's AL, per K (vLLM's CI: 0.02), "
    "instead of --tolerance.",
)
@click.option(
    "--per-position",
    is_flag=True,
    help="Also gate each draft position's conditional acceptance (needs a baseline's questions.csv).",
)
@click.option(
    "--position-tolerance",
    type=float,
    default=0.02,
    show_default=True,
    help="With --per-position: allowed drop of a position's conditional acceptance rate.",
)
@click.option(
    "--ks",
    default=None,
    help="K values to check, e.g. 1,2,3 or 1-5 (default: every K the run and the baseline share).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Gate even when the baseline was measured with other settings (target, protocol, ...).",
)
@click.pass_context
def gate_cmd(
    ctx: click.Context,
    run_dir: str,
    baseline: str,
    tolerance: float,
    relative_tolerance: float | None,
    per_position: bool,
    position_tolerance: float,
    ks: str | None,
    force: bool,
) -> None:
    """Exit 0 if RUN_DIR's AL holds up against BASELINE, 1 on a regression, 2 on bad input.

    A K regresses when its drop is credible under run-to-run noise (paired over common
    questions when the baseline is a run with questions.csv; one-sided, Holm across the gated
    K, 5% family-wise) AND larger than --tolerance (or --relative-tolerance x the baseline's
    AL). With --per-position each draft position of each K is gated too (its conditional
    acceptance, --position-tolerance), in one Holm family with the K rows; a failure names K and
    position. With GITHUB_STEP_SUMMARY set, the table is appended there.
    """
    from alcheck.cli.console import make_console
    from alcheck.report.gate import gate
    from alcheck.report.gate_render import print_gate

    if (
        relative_tolerance is not None
        and ctx.get_parameter_source("tolerance") is not ParameterSource.DEFAULT
    ):
        raise AlcheckError(
            "--tolerance and --relative-tolerance both given: pass one (a fixed AL drop, or a fraction "
            "of the baseline's AL)"
        )
    if ctx.get_parameter_source("position_tolerance") is not ParameterSource.DEFAULT and not per_position:
        raise AlcheckError("--position-tolerance without --per-position: add --per-position, or drop it")
    result = gate(
        run_dir,
        baseline,
        tolerance=tolerance,
        ks=None if ks is None else parse_ks(ks),
        force=force,
        relative_tolerance=relative_tolerance,
        per_position=per_position,
        position_tolerance=position_tolerance,
    )
    ctx.exit(print_gate(result, make_console()))
