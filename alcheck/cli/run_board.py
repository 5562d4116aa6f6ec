"""`alcheck run --draft A --draft B ...` (or a glob): one run per entry under --out, then a leaderboard.

Each entry is measured exactly as `alcheck run --draft ENTRY --out OUT/NAME` would be (the same
Sweep, executor and shard), so its AL equals a separate run's. OUT/leaderboard.json lists the
entries and the command's settings first, so `alcheck run --resume OUT` finishes every entry: a
complete one is left as it is, a partial one resumes, a missing one starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from alcheck.errors import AlcheckError
from alcheck.options import METHODS
from alcheck.sweep.entries import GLOB_CHARS, Entry, draft_values, parse_entries

BOARD_FILE = "leaderboard.json"
# what the entries do not share, and what a resume takes from the command line
PER_ENTRY = ("draft", "method")
NOT_STORED = ("resume_dir", "out", "speculative_config", "gate_baseline", "as_json")


def is_board(params: dict, resume_dir: Path | None) -> bool:
    """Several entries (a repeated --draft, a glob, METHOD=...), or the resume of a leaderboard."""
    if resume_dir is not None:
        return (Path(resume_dir) / BOARD_FILE).is_file()
    values = draft_values(params.get("draft"))
    return len(values) > 1 or any(GLOB_CHARS & set(v) or "=" in v for v in values)


@dataclass(frozen=True)
class SingleRun:
    """What `alcheck run` does for one run, handed in by cli/run.py (which imports this module, so
    this one must not import it back)."""

    check_shard: Callable
    sweep_or_exit: Callable


def run_board(
    ctx, params: dict, out: Path | None, resume_dir: Path | None, console: Console, shard, single: SingleRun
):
    from alcheck.cli.run_options import explicit_params
    from alcheck.rundir.folder import refuse_other_kind

    if params.get("gate_baseline"):
        raise AlcheckError("--gate takes one run: gate each entry's folder afterwards with `alcheck gate`")
    if resume_dir is not None:
        root = Path(resume_dir)
        board = _read_board(root)
        typed = explicit_params(ctx) - {"resume_dir", *PER_ENTRY}
        stored = {**board["params"], **{name: ctx.params[name] for name in typed}}
        entries = [Entry(**e) for e in board["entries"]]
    else:
        root = Path(out) if out is not None else default_board_dir(params)
        if (root / BOARD_FILE).is_file():
            raise AlcheckError(
                f"--out {root} holds a leaderboard: finish it with --resume {root}, or pass a new --out"
            )
        refuse_other_kind(root, "run")
        if (root / "run.json").is_file():
            raise AlcheckError(f"--out {root} holds a single run: pass a new --out for a leaderboard")
        entries = parse_entries(draft_values(params.get("draft")), params.get("method", "auto"), METHODS)
        stored = {k: v for k, v in params.items() if k not in NOT_STORED and k not in PER_ENTRY}
    configs = [
        _config({**stored, "draft": e.draft, "method": e.method}) for e in entries
    ]  # all checked first
    if resume_dir is None:
        root.mkdir(parents=True, exist_ok=True)
        board = {
            "entries": [e.__dict__ for e in entries],
            "params": json.loads(json.dumps(stored, default=str, allow_nan=False)),
        }
        (root / BOARD_FILE).write_text(json.dumps(board, indent=1, allow_nan=False) + "\n")
    for entry, cfg in zip(entries, configs):
        _measure(ctx, root / entry.name, entry, cfg, stored, console, shard, single)
    return _write(root, entries, console)


def default_board_dir(params: dict) -> Path:
    """results/runs/<time>-<target>-leaderboard."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    target = Path(str(params.get("target") or "demo").rstrip("/")).name or "model"
    return Path("results") / "runs" / f"{stamp}-{target}-leaderboard"


def _config(params: dict):
    from alcheck.cli.run_options import build_config

    return build_config(params, reference=params.get("reference", "auto"))


def _read_board(root: Path) -> dict:
    try:
        board = json.loads((root / BOARD_FILE).read_text())
        assert isinstance(board["entries"], list) and isinstance(board["params"], dict)
        return board
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise AlcheckError(
            f"--resume {root}: {BOARD_FILE} is corrupt: start again with another --out"
        ) from None


def _measure(ctx, sub: Path, entry: Entry, cfg, stored: dict, console: Console, shard, single: SingleRun):
    check_shard, sweep_or_exit = single.check_shard, single.sweep_or_exit
    from alcheck.cli.run_options import resume_params
    from alcheck.executors.choice import ExecutorChoice
    from alcheck.rundir.folder import claim_run_dir
    from alcheck.sweep.driver import Sweep

    resume = (sub / "run.json").is_file()
    if resume:  # the entry's own stored settings, as `alcheck run --resume SUB` would take them
        cfg = _config(resume_params(ctx, sub))
    executor = ExecutorChoice(stored.get("executor") or "local", stored.get("ray_address") or None)
    executor.check(cfg)
    shard = check_shard(shard, cfg, sub if resume else None)
    with claim_run_dir(sub, fresh=False):
        cfg.out = str(sub)
        sweep = Sweep(cfg, sub, resume=resume, shard=shard, executor=executor)
        if resume and not sweep.pending() and sweep.meta.get("status") == "complete":
            console.print(f"[green]{entry.name}[/]: already complete in {sub}")
            return
        console.print(f"[bold]entry {entry.name}[/] ({entry.method} {entry.draft or ''})".rstrip())
        sweep_or_exit(sweep, cfg, sub, console, fresh=not resume)


def _write(root: Path, entries: list[Entry], console: Console) -> list:
    from alcheck.report.leaderboard import (
        CSV_FILE,
        MD_FILE,
        leaderboard,
        plot_steps,
        rich_leaderboard,
        write_leaderboard,
    )
    from alcheck.report.table import fitted

    rows = leaderboard(root, [(e.name, root / e.name) for e in entries])
    write_leaderboard(root, rows)
    plot = plot_steps(root, rows)
    console.print(fitted(console, rich_leaderboard(rows)))
    also = f" and {plot.name}" if plot else ""
    console.print(f"saved {CSV_FILE}, {MD_FILE}{also} in {root}; one run per entry under it")
    return rows
