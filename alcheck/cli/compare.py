"""`alcheck compare RUN_A RUN_B`: paired comparison of two runs, K by K."""

from __future__ import annotations

import json

import click

from alcheck.cli.option_specs import shared_option
from alcheck.errors import AlcheckError

MIN_N_BOOT, MAX_N_BOOT = 100, 100_000  # a (n_boot, questions) matrix of counts: 100,000 x 80 is 64 MB


def n_boot_value(value) -> int:
    """--n-boot as an integer in range: '2000' or '1e4'; anything else is one line, exit 2."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AlcheckError(
            f"--n-boot {value!r}: not a number: pass a count of resamples, e.g. 2000"
        ) from None
    if number != number or not number.is_integer() or not MIN_N_BOOT <= number <= MAX_N_BOOT:
        raise AlcheckError(
            f"--n-boot {value}: use a whole number from {MIN_N_BOOT} to {MAX_N_BOOT:,} (each resample "
            "holds a row of counts per question in memory; the default is 2000)"
        )
    return int(number)


@click.command("compare", short_help="Tell a real AL change between two runs from noise.")
@click.argument("run_a", type=click.Path(path_type=str))
@click.argument("run_b", type=click.Path(path_type=str))
@click.option(
    "--force",
    is_flag=True,
    help="Compare even when protocol, dataset, max tokens, temperature or draft sampling differ.",
)
@shared_option("tolerance", help="Report A/B higher only when the credible change is larger than this AL.")
@click.option(
    "--position-tolerance",
    type=float,
    default=0.02,
    show_default=True,
    help="Per draft position: call A or B higher only past this credible change of acceptance rate.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--n-boot",
    default="2000",
    show_default=True,
    callback=lambda ctx, param, value: n_boot_value(value),
    help=f"Bootstrap resamples ({MIN_N_BOOT}..{MAX_N_BOOT}; 1e4 also reads as 10000).",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    help="KV block size for the divergence map (default: run A's --block-size).",
)
def compare_cmd(
    run_a: str,
    run_b: str,
    force: bool,
    tolerance: float,
    position_tolerance: float,
    as_json: bool,
    n_boot: int,
    block_size: int | None,
) -> None:
    """Is the AL difference between RUN_A and RUN_B real or noise?

    Per K: AL of each run on their common (question_id, turn) units and B − A, judged against
    the run-to-run noise of both runs (Holm across K, 5% family-wise). Verdict: no detectable
    change / within tolerance / A higher / B higher. The paired question bootstrap CI (other
    prompts) is shown separately. Per draft position, the conditional acceptance (accepted there
    among the steps that reached it) gets a verdict in the same words (Holm across K x
    positions), and the first position that changed is named. When a run has per-step traces
    (traces.csv), compare also says where the runs diverge: per question turn the first differing
    verification step, its output position and place in the KV block, and whether the divergences
    point at lookahead slots.
    """
    from alcheck.cli.console import make_console
    from alcheck.report.compare import compare_runs, print_compare
    from alcheck.report.divergence import divergence_of_runs, has_traces
    from alcheck.report.divergence_text import divergence_lines

    result = compare_runs(
        run_a, run_b, force=force, n_boot=n_boot, tolerance=tolerance, position_tolerance=position_tolerance
    )
    same = _same_run(run_a, run_b)
    if same:  # a slip of the arguments, most likely: say so, and still show the (all-zero) table
        click.echo(
            f"note: {run_a} and {run_b} are the same run: every difference is 0 by construction; "
            "pass another run to compare with",
            err=True,
        )
    # traces.csv keys a turn by question_id alone: ids repeat across the datasets of a run of several
    divergence = (
        divergence_of_runs(run_a, run_b, block_size, decode=_decoder(run_a))
        if has_traces(run_a, run_b) and not result.several
        else None
    )
    if as_json:
        out = {**result.to_dict(), "same_run": same}
        if divergence is not None:
            out["divergence"] = divergence.to_dict()
            out["divergence"]["first_changed_position"] = _first_changed(result)
        click.echo(json.dumps(out, indent=2, allow_nan=False))
        return
    console = make_console()
    print_compare(result, console)
    if divergence is not None:
        for line in divergence_lines(divergence, _first_changed(result)):
            console.print(line, highlight=False, markup=False)


def _same_run(run_a: str, run_b: str) -> bool:
    """Both arguments name one run.json (a folder and its run.json, a link, ./x and x)."""
    from alcheck.report.run_io import resolve_run_json

    return resolve_run_json(run_a).resolve() == resolve_run_json(run_b).resolve()


def _first_changed(result) -> dict | None:
    """K -> compare's first changed draft position (None at a K where none changed); None when no
    row has per-position verdicts (a run without per-position counts)."""
    if not any(r.per_position for r in result.rows):
        return None
    return {r.k: r.first_changed_position for r in result.rows if r.per_position}


def _decoder(run):
    """The target's tokenizer decode (text around a divergence), when its folder is on this machine."""
    from pathlib import Path

    from alcheck.report.run_io import load_run

    target = load_run(run).config.get("target")
    if not target or not Path(target).is_dir():
        return None
    try:
        from alcheck.prompts.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(Path(target), "target")
    except Exception:  # noqa: BLE001 - the text is a convenience; the step and position still print
        return None
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
