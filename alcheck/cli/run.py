"""`alcheck run`: sweep K over a dataset with repeats, print AL against references, save the run."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from alcheck.backends.engines.table import engine_named
from alcheck.cli.config_file import config_callback
from alcheck.cli.console import make_console
from alcheck.cli.help_panels import RUN, panelled
from alcheck.cli.option_specs import shared_option
from alcheck.cli.progress import Starting, show_sweep
from alcheck.cli.run_options import build_config, engine_options, resume_params, run_options
from alcheck.errors import AlcheckError
from alcheck.executors.choice import EXECUTORS, ExecutorChoice
from alcheck.report.pass_speed import large_sweep_note, uneven_speed_note
from alcheck.rundir.folder import out_option_value
from alcheck.rundir.shard import parse_shard


@click.command(
    "run", short_help="Measure AL per K over a dataset, against published references.", **panelled(RUN)
)
@run_options
@engine_options
@click.option(
    "--reference", default="auto", show_default=True, help="auto, none, or reference names (comma-separated)."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    callback=out_option_value,
    help="Run directory (default results/runs/<time>-<target>-<draft>).",
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(file_okay=False),
    callback=out_option_value,
    help="Finish an interrupted run in DIR.",
)
@click.option(
    "--devices",
    help="One worker process per device for the (K, repeat) cells: cuda:0,cuda:1 (or cpu,cpu).",
)
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="local",
    show_default=True,
    help="Where the cells run: local (this machine) or ray (one Ray task per (K, repeat) cell).",
)
@click.option("--ray-address", help="--executor ray: the cluster to join (default: start a local Ray).")
@click.option(
    "--shard",
    callback=lambda ctx, param, value: parse_shard(value),
    help="Run only share I/N of the (K, repeat) cells (a SLURM array); join them with `alcheck merge`.",
)
@click.option(
    "--gate",
    "gate_baseline",
    help="After the run, gate it against BASELINE (run dir, run.json or reference json).",
)
@shared_option("tolerance", help="Gate tolerance in AL.")
@click.option(
    "--speculative-config",
    "speculative_config",
    help="vLLM's --speculative-config JSON (or @FILE), read as these options; also passed to --engine-cmd.",
)
@click.option(
    "--config",
    "config",
    is_eager=True,
    expose_value=False,
    callback=config_callback,
    type=click.Path(dir_okay=False),
    help="A TOML or YAML file of run options (ks = [1, 3], ...); flags typed here win.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as JSON on stdout (the table and progress go to stderr).",
)
@click.pass_context
def run_cmd(ctx, reference, out, resume_dir, gate_baseline, tolerance, as_json=False, shard=None, **_):
    """Measure AL for each K over MT-Bench (or DATASET, or several: a,b,c), repeated, against published
    references.

    AL = tokens emitted per verification step = 1 + accepted drafts / steps (bonus token included).

    With --engine vllm|sglang --endpoint URL the same prompts go to a running server, and its
    per-request speculative counts are saved the same way (see "Measuring a running engine").
    """
    from alcheck.cli.speculative_config import with_speculative_config
    from alcheck.rundir.folder import claim_run_dir, refuse_other_kind
    from alcheck.sweep.driver import Sweep, default_out_dir

    console = make_console(stderr=as_json)
    if not math.isfinite(tolerance) or tolerance < 0:
        raise AlcheckError(f"--tolerance {tolerance}: must be a finite number >= 0")
    from alcheck.cli.run_board import SingleRun, is_board, run_board

    if is_board(ctx.params, resume_dir):  # several --draft entries, ranked (alcheck/cli/run_board.py)
        board_params = with_speculative_config(ctx, dict(ctx.params)) if resume_dir is None else {}
        rows = run_board(
            ctx, board_params, out, resume_dir, console, shard, SingleRun(check_shard, sweep_or_exit)
        )
        if as_json:
            from dataclasses import asdict

            from alcheck.rundir.folder import strict_json

            click.echo(strict_json({"leaderboard": [asdict(r) for r in rows]}, "the leaderboard"))
        return
    if resume_dir is not None:
        if ctx.params.get("speculative_config"):
            raise AlcheckError("--resume takes the run's stored settings: drop --speculative-config")
        if out is not None and Path(out) != resume_dir:
            raise AlcheckError("--resume DIR already names the run directory: drop --out")
        params = resume_params(ctx, resume_dir)
        out = resume_dir
    else:
        params = with_speculative_config(ctx, dict(ctx.params))
    # on a terminal, a transient line says what is read before the run's header (a log gets none)
    with Starting(console, "alcheck run: reading the settings, the dataset and the checkpoints") as starting:
        if out is not None:
            refuse_other_kind(out, "run", "--resume" if resume_dir is not None else "--out")
        cfg = build_config(params, reference=params["reference"])  # a resumed run keeps its references
        shard = check_shard(shard, cfg, resume_dir)
        executor = ExecutorChoice(params.get("executor") or "local", params.get("ray_address") or None)
        executor.check(cfg)
        if cfg.tensor_parallel_size > 1 and torchrun_rank() is not None:
            starting.stop()
            return torchrun_rank_run(cfg, out, resume_dir, console, shard)
        baseline = check_gate_baseline(gate_baseline, cfg) if gate_baseline else None
        large = large_sweep_note(
            cfg.ks, cfg.repeats, len(cfg.dataset) if isinstance(cfg.dataset, list) else 1
        )
        if large and resume_dir is None:
            console.print(f"[yellow]warning[/]: {large}", highlight=False)
        fresh = out is None
        # claimed before anything loads: a second run on this folder exits 2 instead of mixing rows
        with claim_run_dir(Path(out) if out else default_out_dir(cfg), fresh=fresh) as claim:
            out = claim.path
            cfg.out = str(out)
            sweep = Sweep(cfg, out, resume=resume_dir is not None, shard=shard, executor=executor)
            if resume_dir is not None and not sweep.pending() and sweep.meta.get("status") == "complete":
                # nothing to compute: load no model and change no file; but a flag typed now that the
                # run's conditions contradict (--dtype, --device, an edited dataset) is still refused
                sweep.prepare()
                console.print(
                    f"[green]already complete[/]: {out} holds every (K, repeat) pass"
                    f"{f' of its share {shard}' if shard else ''}; nothing to resume"
                )
                meta = sweep.meta
            else:
                meta = sweep_or_exit(sweep, cfg, out, console, fresh=resume_dir is None, starting=starting)
    print_result(meta, out, console)
    if as_json:
        import json

        click.echo(
            json.dumps({"run": str(out), "summary": meta.get("summary") or []}, indent=1, allow_nan=False)
        )
    if baseline is not None:
        from alcheck.report.gate import gate
        from alcheck.report.gate_render import print_gate

        result = gate(out, baseline, tolerance=tolerance)  # the Ks run and baseline share
        sys.exit(print_gate(result, console))


def check_shard(shard, cfg, resume_dir):
    """--shard checked against the sweep before any folder is claimed; --resume keeps the run's own."""
    from alcheck.report.run_io import read_json
    from alcheck.rundir.shard import check_shard_size, resumed_shard, sweep_cells

    if resume_dir is not None:
        shard = resumed_shard(shard, read_json(resume_dir / "run.json", "run.json"), resume_dir)
    if shard is None:
        return None
    check_shard_size(shard, sweep_cells(cfg.ks, cfg.repeats))
    if cfg.sampler_test:
        raise AlcheckError(
            "--check-lossless with --engine tests each K's sampling over all its repeats in one run, "
            "which a share may split: drop --shard or --check-lossless"
        )
    return shard


def torchrun_rank() -> int | None:
    """This process's rank when torchrun started it (alcheck.tp.group.under_torchrun), else None."""
    import os

    from alcheck.tp.group import under_torchrun

    return int(os.environ["RANK"]) if under_torchrun() else None


def torchrun_rank_run(cfg, out, resume_dir, console: Console, shard=None):
    """Under torchrun every process runs this command as one rank: rank 0 claims the folder,
    prints and writes as usual; the others run the same cells on their shards, quietly, writing nothing."""
    from alcheck.rundir.folder import claim_run_dir
    from alcheck.sweep.driver import Sweep

    if out is None:  # each process would pick its own time-stamped folder
        raise AlcheckError(
            "under torchrun every rank must name the same run directory: pass --out DIR (or --resume DIR)"
        )
    cfg.out = str(out)
    if torchrun_rank() != 0:
        sweep = Sweep(cfg, Path(out), resume=resume_dir is not None, write=False, shard=shard)
        sweep.prepare()
        sweep.run()
        return None
    with claim_run_dir(Path(out), fresh=False):
        sweep = Sweep(cfg, Path(out), resume=resume_dir is not None, shard=shard)
        meta = sweep_or_exit(sweep, cfg, Path(out), console, fresh=resume_dir is None)
    print_result(meta, Path(out), console)
    return None


def saved_cells(out: Path) -> int:
    """(K, repeat) cells in run.json on disk: an interrupt can land after a cell is added in
    memory and before the file is written, so the file, not memory, says what is saved."""
    import json

    try:
        return len(json.loads((out / "run.json").read_text()).get("cells") or [])
    except (OSError, ValueError):
        return 0


def discard_empty_run(out: Path, fresh: bool) -> bool:
    """A new run that saved no cell leaves no run behind (its run.json would only make the rerun ask
    for --resume); the claim then removes the folder if it made it. True when discarded."""
    if not fresh or saved_cells(out):
        return False
    for name in ("run.json", "questions.csv"):
        (out / name).unlink(missing_ok=True)
    return True


def sweep_or_exit(sweep, cfg, out: Path, console: Console, fresh: bool = False, starting=None) -> dict:
    """Prepare and run the sweep; Ctrl-C, SIGTERM, an audit failure or a failed worker exit here."""
    import signal
    import threading

    from alcheck.backends.engines.launch import raise_terminated

    # SIGTERM exits like Ctrl-C (workers, ranks or a server stopped; what is saved printed; the run
    # folder's lock released), never silently
    sigterm = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    if sigterm:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        # a leaderboard's entry or a torchrun rank 0 shows its own start-up line (entering it twice is one)
        with starting or Starting(console, "alcheck run: reading the dataset and the checkpoints") as shown:
            return _sweep_or_exit(sweep, cfg, out, console, fresh, shown)
    finally:
        if sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _sweep_or_exit(sweep, cfg, out: Path, console: Console, fresh: bool, starting: Starting) -> dict:
    from alcheck.backends.engines.http import EngineError
    from alcheck.backends.engines.launch import Terminated
    from alcheck.executors.processes import WorkerFailed
    from alcheck.sweep.driver import AuditFailure

    try:
        sweep.prepare()
        decoder = (
            f"engine={cfg.engine} {','.join(cfg.endpoints) or 'via --engine-cmd'}"
            if cfg.engine
            else f"draft={cfg.draft}"
        )
        datasets = f" datasets={','.join(cfg.datasets)}" if len(cfg.datasets) > 1 else ""
        share = (
            f" share={sweep.shard} ({len(sweep.cells())} of {len(sweep.all_cells())} cells)"
            if getattr(sweep, "shard", None)
            else ""
        )
        console.print(
            f"[bold]alcheck run[/] target={cfg.target} {decoder} protocol={cfg.protocol}{datasets} "
            f"K={cfg.ks} repeats={cfg.repeats}{share} questions={len(sweep.questions)} -> {out}"
        )
        for note in (skipped_note(sweep.meta), turns_note(sweep.questions, cfg)):
            if note:
                console.print(f"[yellow]note[/]: {note}", highlight=False)
        starting.update(f"alcheck run: loading the weights of {cfg.target}")
        sweep.load()  # weights before the progress display: a pair that fails to load says so alone
        starting.stop()
        return show_sweep(sweep, console)
    except (KeyboardInterrupt, Terminated) as exc:
        code, word = (exc.code, "terminated") if isinstance(exc, Terminated) else (130, "interrupted")
        if (out / "run.json").is_file() and not discard_empty_run(out, fresh):
            done = saved_cells(out)
            console.print(
                f"[yellow]{word}[/]: {done} finished (K, repeat) cells are saved in {out}; "
                f"finish with: alcheck run --resume {out}"
            )
        else:  # nothing was saved: no resume hint, and the folder is removed if we made it
            console.print(f"[yellow]{word}[/] before any result was saved")
        sys.exit(code)
    except AuditFailure as exc:
        console.print(f"[red]Error:[/] {exc}")
        sys.exit(1)
    except EngineError as exc:  # the server went away or failed: say what is saved and how to finish
        if not (out / "run.json").is_file() or discard_empty_run(out, fresh):
            raise
        done = saved_cells(out)
        raise AlcheckError(
            f"{exc.format_message()}; {done} finished (K, repeat) cell{'s' * (done != 1)} saved in "
            f"{out}: restart the server and finish with: alcheck run --resume {out}"
        ) from None
    except WorkerFailed as exc:  # a bug or a killed worker, not bad input: exit 1, like AuditFailure
        console.print(f"[red]Error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)  # one line
        sys.exit(1)
    except AlcheckError:  # e.g. an --engine-cmd that never became healthy: no empty run left behind
        discard_empty_run(out, fresh)
        raise


def check_gate_baseline(spec: str, cfg):
    """--gate BASELINE is read and checked before the sweep, not after hours of it."""
    from alcheck.references.tables import hard_mismatches
    from alcheck.report.gate import lacking_datasets
    from alcheck.report.gate_baseline import load_baseline

    ks = cfg.ks
    baseline = load_baseline(spec)
    if not baseline.values:
        raise AlcheckError(
            f"--gate {spec}: the baseline has no AL values: pass a finished run or a reference table"
        )
    if not set(baseline.values) <= set(ks):  # a K the gate would skip without a word
        raise AlcheckError(
            f"--gate {spec}: the baseline has K={','.join(map(str, sorted(baseline.values)))} "
            f"but this run measures K={','.join(map(str, ks))}: pass --ks with every K the baseline "
            "measured (or gate a subset afterwards with `alcheck gate --ks`)"
        )
    hard = hard_mismatches(baseline.config, cfg.to_dict(), skip=("limit",) if baseline.has_questions else ())
    if hard:
        raise AlcheckError(
            f"--gate {spec}: the baseline was measured with other settings ({'; '.join(hard)}): "
            "run with its settings, or gate afterwards with `alcheck gate --force`"
        )
    lacking = lacking_datasets(baseline.config, cfg.to_dict())
    if lacking:  # a dataset the gate would skip without a word
        raise AlcheckError(
            f"--gate {spec}: the baseline measured {', '.join(lacking)}, which this run does not: add "
            "them to --dataset (or gate the datasets both have afterwards with `alcheck gate --force`)"
        )
    return baseline


def skipped_note(meta: dict) -> str:
    """'N question turns skipped by --skip-long: ...', or '' when none were skipped."""
    context = meta.get("context") or {}
    skipped = list(context.get("skipped") or [])
    skipped += [s for c in meta.get("cells") or [] for s in c.get("skipped") or []]
    if not skipped:
        return ""
    n = len({(s.get("dataset"), s["question_id"], s["turn"]) for s in skipped})
    return (
        f"{n} question turn{'s' if n != 1 else ''} skipped by --skip-long: longer than the target's "
        f"context of {context.get('limit')} positions"
    )


def turns_note(questions, cfg) -> str:
    """'N questions have up to M turns ...' when a multi-turn protocol leaves turns of the dataset
    unmeasured (a 3-turn question under a 2-turn protocol), else ''. A turn-1 protocol measures
    turn 1 by definition (vllm-example on MT-Bench's two turns needs no note)."""
    longer = [q for q in questions if len(q.turns) > cfg.turns]
    if not longer or cfg.turns < 2:
        return ""
    most = max(len(q.turns) for q in longer)
    return (
        f"{len(longer)} of {len(questions)} questions have up to {most} turns, but --protocol {cfg.protocol} "
        f"measures {cfg.turns} turn{'s' * (cfg.turns != 1)}: the later turns are not measured"
    )


def varied_summary(meta: dict) -> str:
    """What differed between repeats, once for the run: repeat r used seed '<seed>:r'."""
    cells = meta.get("cells") or []
    if not cells:
        return "-"
    seed = meta.get("config", {}).get("seed")
    return cells[0]["varied"].replace(f"seed {seed}:{cells[0]['repeat']}", f"seed {seed}:<repeat>")


def print_result(meta: dict, out: Path, console: Console):
    from alcheck.report.table import fitted, rich_table

    console.print(fitted(console, rich_table(meta)))
    env = meta["environment"]
    if env.get("backend") == "engine":
        where = ", ".join(env.get("endpoints") or [str(env.get("endpoint"))])
        console.print(
            f"engine {env.get('engine')} {env.get('engine_version') or '(version not reported)'} at "
            f"{where}, counted {env.get('counting')}; "
            f"varied across repeats: {varied_summary(meta)}",
            highlight=False,
        )
        from alcheck.report.markdown import draft_head_line

        console.print(f"draft head: {draft_head_line(meta)}", highlight=False)
    else:
        tp = env.get("tensor_parallel")
        ranks = f", tensor parallel {tp['tensor_parallel_size']} ranks over {tp['backend']}" if tp else ""
        console.print(
            f"device {env.get('device_name')} ({env.get('dtype')}, {env.get('attention_backend')}{ranks}); "
            f"varied across repeats: {varied_summary(meta)}"
        )
    note = skipped_note(meta)
    if note:
        console.print(f"[yellow]note[/]: {note} (listed in run.json under context.skipped)", highlight=False)
    note = traces_note(meta)
    if note:
        console.print(f"[yellow]note[/]: {note}", highlight=False)
    note = uneven_speed_note(meta)
    if note:
        console.print(f"[yellow]warning[/]: {note}", highlight=False)
    files = [
        name
        for name in ("run.json", "questions.csv", "traces.csv", "answers.jsonl")
        if (out / name).is_file()
    ]
    console.print(
        f"saved {', '.join(files[:-1])} and {files[-1]} in {out}"
        if len(files) > 1
        else f"saved {out / files[0]}"
    )


def traces_note(meta: dict) -> str:
    """What a run without per-step data for every turn lacks, or '' (run.json's `traces`)."""
    from alcheck.rundir.traces import PARTIAL, TOTALS_ONLY

    kind = meta.get("traces")
    fallback = "`alcheck compare` falls back to totals (steps, accepted, per position) there"
    if kind == PARTIAL:  # a resumed run written before traces existed, or a server that reported some only
        return f"traces.csv covers only some turns (per cell: run.json's cells[].traces); {fallback}"
    if kind != TOTALS_ONLY:
        return ""
    env = meta.get("environment") or {}
    who = f"the {env.get('engine')} server" if env.get("backend") == "engine" else "the backend"
    engine = engine_named(env.get("engine"))
    fix = f" ({engine.per_step_fix})" if engine and engine.per_step_fix else ""
    if "replayed" in str(env.get("counting", "")):  # a skipping method: the server's lists miss steps
        fix = " for every step (its per-step lists leave out the steps that drafted nothing)"
    return f"{who} reported no per-step accepted counts{fix}: no traces.csv, so {fallback}"
