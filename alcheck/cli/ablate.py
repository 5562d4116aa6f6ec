"""`alcheck ablate kv-lookahead`: AL, losslessness and KV-slot audit with and without lookahead slots."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from alcheck.cli.console import make_console
from alcheck.cli.help_panels import ABLATE, panelled
from alcheck.cli.progress import CellLines
from alcheck.cli.run import turns_note
from alcheck.cli.run_options import build_config, explicit_params, run_options
from alcheck.errors import AlcheckError
from alcheck.rundir.folder import out_option_value
from alcheck.runner.table import RUNNERS

# options the ablation sets itself in both arms: typing one that disagrees would be ignored
ARM_SETTINGS = {
    "no_kv_lookahead": (
        lambda v: bool(v),
        "--no-kv-lookahead: the ablation runs both ways (with and without "
        "lookahead slots) by itself: drop it",
    ),
    "runner": (
        lambda v: not (RUNNERS[v].paged_kv and RUNNERS[v].host_slots),
        "--runner {value}: the ablation needs the paged runner (lookahead slots are a paged-KV setting, "
        "set on the host): drop --runner",
    ),
}


@click.group("ablate", short_help="Run the same sweep two ways and compare them.")
def ablate_cmd():
    """Run the same sweep two ways and compare (paired over questions)."""


@ablate_cmd.command(
    "kv-lookahead",
    short_help="AL, losslessness and KV writes with and without lookahead.",
    **panelled(ABLATE),
)
@run_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    callback=out_option_value,
    help="Directory for both runs and ablation.json (default results/runs/<time>-ablate-kv-lookahead).",
)
@click.pass_context
def kv_lookahead_cmd(ctx, out, **_):
    """Sweep with lookahead KV slots (the fix) and without (the pre-fix bug).

    Prints per K: AL both ways, the paired difference with its 95% CI, the lossless rate both
    ways, and how many KV writes landed outside the writing request's blocks. Re-running with the
    same --out resumes whatever was not finished.
    """
    from alcheck.diagnostics.ablation import arm_configs, summarize_ablation
    from alcheck.report.ablation import ablation_rich_table
    from alcheck.report.table import fitted
    from alcheck.rundir.folder import claim_run_dir, refuse_other_kind
    from alcheck.sweep.driver import AuditFailure, Sweep

    console = make_console()
    params = dict(ctx.params)
    typed = explicit_params(ctx)
    for name, (conflicts, message) in ARM_SETTINGS.items():
        if name in typed and conflicts(params[name]):
            raise AlcheckError(message.format(value=params[name]))
    params["no_kv_lookahead"] = False
    cfg = build_config(params, reference="none")
    if len(cfg.datasets) > 1:  # its table has one row per K
        raise AlcheckError(
            f"--dataset {','.join(cfg.datasets)}: the ablation measures one dataset: run it once per dataset"
        )
    fresh = out is None
    if not fresh:
        refuse_other_kind(out, "ablation")
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = Path("results") / "runs" / f"{stamp}-ablate-kv-lookahead"
    # the whole ablation folder is claimed first, then each arm's run folder inside it
    with claim_run_dir(out, fresh=fresh) as claim:
        out = claim.path
        cfg.out = str(out)
        for arm, arm_cfg in arm_configs(cfg, out).items():
            arm_dir = Path(arm_cfg.out)
            with claim_run_dir(arm_dir):
                sweep = Sweep(arm_cfg, arm_dir, resume=(arm_dir / "run.json").is_file())
                if arm == "with" and turns_note(sweep.questions, arm_cfg):
                    console.print(f"[yellow]note[/]: {turns_note(sweep.questions, arm_cfg)}", highlight=False)
                pending = sweep.pending()
                console.print(
                    f"[bold]{arm} lookahead slots[/]: {len(pending)} (K, repeat) cells to run -> {arm_dir}"
                )
                try:
                    sweep.run(CellLines(console, len(pending), indent="  "))
                except KeyboardInterrupt:
                    if (arm_dir / "run.json").is_file():
                        console.print(
                            "[yellow]interrupted[/]: finished cells are "
                            f"saved; re-run with --out {out} to resume"
                        )
                    else:
                        console.print("[yellow]interrupted[/] before any result was saved")
                    sys.exit(130)
                except AuditFailure as exc:
                    console.print(f"[red]Error:[/] {exc}")
                    sys.exit(1)
        meta = summarize_ablation(out, cfg)
    console.print(fitted(console, ablation_rich_table(meta)))
    console.print(f"saved {out / 'ablation.json'}; markdown: alcheck report {out}")


# the ablation measures one head; run's --draft help ("repeat to rank several") is not true here
ONE_DRAFT_HELP = "Head or draft model: folder or hub id, given once (one head; `alcheck run` ranks several)."


def _one_draft(command: click.Command) -> click.Command:
    """A repeated --draft is refused in one line (run_options.single_draft); the help says so."""
    next(p for p in command.params if p.name == "draft").help = ONE_DRAFT_HELP
    return command


_one_draft(kv_lookahead_cmd)
