"""`alcheck merge DIR... --out M`: join the shares of one sweep (`alcheck run --shard I/N`) into one run."""

from __future__ import annotations

from pathlib import Path

import click

from alcheck.errors import AlcheckError
from alcheck.rundir.folder import out_option_value


@click.command("merge", short_help="Join the shares of a sweep (run --shard I/N) into one run.")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    callback=out_option_value,
    help="The joined run's directory (new).",
)
def merge_cmd(dirs: tuple[Path, ...], out: Path) -> None:
    """Join the run directories of `alcheck run --shard I/N` (one per share) into one run in OUT,
    whose questions.csv and summary are those of the whole sweep run at once.

    Shares of different sweeps (settings, checkpoints, data, device kind or dtype), a share given
    twice or two shares holding the same cell are refused. Missing shares leave the run partial:
    it names the absent (K, repeat) cells, and `alcheck run --resume OUT` computes them.
    """
    from alcheck.cli.console import make_console
    from alcheck.cli.run import print_result
    from alcheck.rundir.folder import claim_run_dir, refuse_other_kind
    from alcheck.rundir.merge import check_shares, missing_cells, read_share, write_merged

    console = make_console()
    shares = [read_share(d) for d in dirs]
    check_shares(shares)
    if not any(s.cells for s in shares):
        raise AlcheckError("merge: no share holds a finished (K, repeat) cell: run the shares first")
    if (out / "run.json").exists() or (out / "questions.csv").exists():
        raise AlcheckError(f"merge: --out {out} already holds a run: pass a new folder")
    refuse_other_kind(out, "run")
    with claim_run_dir(out) as claim:
        meta = write_merged(shares, claim.path)
    print_result(meta, out, console)
    total = len(meta["cells"]) + len(meta.get("missing_cells") or [])
    plural = "s" * (len(shares) != 1)
    console.print(f"merged {len(shares)} share{plural}: {len(meta['cells'])} of {total} cells")
    missing = missing_cells(shares)
    if missing:
        console.print(
            f"[yellow]partial[/]: no share holds {cells_text(missing)}: run the missing shares and merge "
            f"again, or compute them here with: alcheck run --resume {out}",
            highlight=False,
        )


def cells_text(cells: list[tuple[int, int]]) -> str:
    """'K=1 repeat 2, K=2 repeats 1,2' (repeats counted from 1, as everywhere a person reads)."""
    from alcheck.report.repeat_numbers import passes_text

    return passes_text(cells, sort=False)
