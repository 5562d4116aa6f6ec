"""`alcheck run`: sweep K over a dataset with repeats, print AL against references, save the run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from alcheck.cli.console import make_console
from alcheck.cli.run_options import build_config, resume_params, run_options
from alcheck.errors import AlcheckError


def live_sweep(sweep, console: Console):
    """Run the sweep under a rich progress display: K, repeat, requests done, tokens/s, ETA."""
    per_cell = sweep.num_generations()
    pending = sweep.pending()
    with Progress(
        TextColumn("[bold]{task.fields[label]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=console, transient=False,
    ) as progress:
        overall = progress.add_task("all", total=per_cell * len(pending), label="sweep", rate="")
        state = {"task": None, "tokens": 0, "start": 0.0}

        def start(k, repeat):
            state.update(task=progress.add_task("cell", total=per_cell, label=f"K={k} repeat {repeat + 1}", rate=""),
                         tokens=0, base=0, start=time.perf_counter())

        def step(finished, tokens):
            # tokens counts this generate() call; a second turn starts again from 0
            if tokens < state["tokens"]:
                state["base"] += state["tokens"]
            state["tokens"] = tokens
            elapsed = max(time.perf_counter() - state["start"], 1e-9)
            rate = f"{(state['base'] + tokens) / elapsed:,.0f} tok/s"
            progress.update(state["task"], advance=finished, rate=rate)
            progress.update(overall, advance=finished)

        def done(cell):
            progress.update(state["task"], completed=per_cell)

        return sweep.run(on_cell_start=start, on_progress=step, on_cell_done=done)


@click.command("run")
@run_options
@click.option("--reference", default="auto", show_default=True, help="auto, none, or reference names (comma-separated).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Run directory (default results/runs/<time>-<target>-<draft>).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False, path_type=Path), help="Finish an interrupted run in DIR.")
@click.option("--gate", "gate_baseline", help="After the run, gate it against BASELINE (run dir, run.json or reference json).")
@click.option("--tolerance", default=0.02, show_default=True, type=float, help="Gate tolerance in AL.")
@click.pass_context
def run_cmd(ctx, reference, out, resume_dir, gate_baseline, tolerance, **_):
    """Measure AL for each K over MT-Bench (or DATASET), repeated, against published references.

    AL = tokens emitted per verification step = 1 + accepted drafts / steps (bonus token included).
    """
    from alcheck.sweep import AuditFailure, Sweep, default_out_dir

    console = make_console()
    if resume_dir is not None:
        if out is not None and Path(out) != resume_dir:
            raise AlcheckError("--resume DIR already names the run directory: drop --out")
        params = resume_params(ctx, resume_dir)
        out = resume_dir
    else:
        params = dict(ctx.params)
    cfg = build_config(params, reference=params["reference"])  # a resumed run keeps its references
    out = Path(out) if out else default_out_dir(cfg)
    cfg.out = str(out)
    sweep = Sweep(cfg, out, resume=resume_dir is not None)
    console.print(f"[bold]alcheck run[/] target={cfg.target} draft={cfg.draft} protocol={cfg.protocol} "
                  f"K={cfg.ks} repeats={cfg.repeats} questions={len(sweep.questions)} -> {out}")
    try:
        meta = live_sweep(sweep, console)
    except KeyboardInterrupt:
        done = len(sweep.meta["cells"])
        console.print(f"[yellow]interrupted[/]: {done} finished (K, repeat) cells are saved in {out}; "
                      f"finish with: alcheck run --resume {out}")
        sys.exit(130)
    except AuditFailure as exc:
        console.print(f"[red]Error:[/] {exc}")
        sys.exit(1)
    print_result(meta, out, console)
    if gate_baseline:
        from alcheck.report.gate import gate, print_gate

        result = gate(out, gate_baseline, tolerance=tolerance)  # the Ks run and baseline share
        sys.exit(print_gate(result, console))


def print_result(meta: dict, out: Path, console: Console):
    from alcheck.report.table import rich_table

    console.print(rich_table(meta))
    env = meta["environment"]
    console.print(f"device {env.get('device_name')} ({env.get('dtype')}, {env.get('attention_backend')}); "
                  f"varied across repeats: {meta['cells'][0]['varied'] if meta['cells'] else '-'}")
    console.print(f"saved {out / 'run.json'} and {out / 'questions.csv'}")
