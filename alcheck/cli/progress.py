"""What a sweep shows while its cells run (`alcheck run`, `alcheck ablate`).

On an interactive terminal: rich progress bars (K, repeat, requests done, tokens/s, ETA). Anywhere
else (`> log 2>&1`, a pipe, CI): one plain line per finished cell, printed and flushed as the cell
finishes, with no bar frames. Both give an ETA as soon as the first requests of the sweep are done
(the time so far per finished cell once one has finished), not after rich's speed window fills.

`cell_line` is the one formatter of a finished cell: every command that prints cells uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from alcheck.report.repeat_numbers import cell_name
from alcheck.sweep.events import SweepEvents

UNKNOWN = "-:--:--"


def cell_al(cell) -> float | None:
    """The cell's pooled AL, 1 + accepted / steps (None for a cell of no step)."""
    return 1 + cell.accepted / cell.steps if cell.steps else None


def cell_tokens_per_s(cell) -> float | None:
    """Generated tokens per second of speculative decoding (a --check-lossless cell's target-only
    time is not), as the summary's tokens_per_s counts it."""
    wall = cell.wall_s - (cell.target_only_wall_s or 0.0)
    return cell.generated_tokens / wall if wall > 0 else None


def cell_line(cell) -> str:
    """'K=2 repeat 1: AL 2.14, 16 tokens in 0.1 s, 180.4 tok/s' for a finished cell."""
    al, rate = cell_al(cell), cell_tokens_per_s(cell)
    return (
        f"{cell_name(cell.k, cell.repeat)}: AL {'-' if al is None else f'{al:.2f}'}, "
        f"{cell.generated_tokens} tokens in {cell.wall_s:.1f} s, "
        f"{'-' if rate is None else f'{rate:,.1f}'} tok/s"
    )


def clock_text(seconds: float | None) -> str:
    """'0:01:05', or '-:--:--' while unknown."""
    if seconds is None:
        return UNKNOWN
    whole = max(int(round(seconds)), 0)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class SweepClock:
    """The time a sweep has left, from what finished so far: per finished cell once one has finished
    (several may run at once with --devices: the elapsed time per cell counts them all), else per
    finished request of the cells running. None until something finished."""

    def __init__(self, total_cells: int, per_cell: int, now: Callable[[], float] = time.perf_counter):
        self.total_cells, self.per_cell, self.now = total_cells, per_cell, now
        self.start = now()
        self.cells_done = 0
        self.requests_done = 0  # of the sweep: finished cells count per_cell each

    def request_finished(self, count: int) -> None:
        self.requests_done += count

    def cell_finished(self) -> None:
        self.cells_done += 1
        self.requests_done = max(self.requests_done, self.cells_done * self.per_cell)

    def left(self) -> float | None:
        elapsed = self.now() - self.start
        if self.cells_done:
            return elapsed / self.cells_done * (self.total_cells - self.cells_done)
        total = self.total_cells * self.per_cell
        if self.requests_done <= 0 or total <= 0:
            return None
        return elapsed / self.requests_done * (total - self.requests_done)


class CellLines(SweepEvents):
    """One line per finished cell, flushed as it finishes: '  K=1 repeat 1: AL 1.78, ... (1 of 4
    cells, ETA 0:00:03)'. With total_cells None, no count and no ETA; with per_cell 0 (not known
    yet), the ETA comes from the first finished cell."""

    def __init__(self, console: Console, total_cells: int | None = None, per_cell: int = 0, indent: str = ""):
        self.console, self.indent = console, indent
        self.clock = SweepClock(total_cells, per_cell) if total_cells else None

    def progress(self, k, repeat, finished, tokens):
        if self.clock is not None:
            self.clock.request_finished(finished)

    def cell_finished(self, cell):
        tail = ""
        if self.clock is not None:
            self.clock.cell_finished()
            done, total = self.clock.cells_done, self.clock.total_cells
            eta = f", ETA {clock_text(self.clock.left())}" if done < total else ""
            tail = f" ({done} of {total} cells{eta})"
        self.console.print(f"{self.indent}{cell_line(cell)}{tail}", markup=False, highlight=False)


class EtaColumn(ProgressColumn):
    """'ETA 0:01:05' from the task's `deadline` field (a perf_counter time), counted down between
    events; 'ETA -:--:--' while unknown."""

    def render(self, task) -> Text:
        deadline = task.fields.get("deadline")
        left = None if deadline is None else deadline - time.perf_counter()
        return Text(f"ETA {clock_text(left)}", style="progress.remaining")


class LiveDisplay(SweepEvents):
    """The sweep's events as rich progress bars: K, repeat, requests done, tokens/s, ETA."""

    def __init__(self, bars: Progress, per_cell: int, total_cells: int):
        self.bars, self.per_cell = bars, per_cell
        self.clock = SweepClock(total_cells, per_cell)
        self.overall = bars.add_task(
            "all", total=per_cell * total_cells, label="sweep", rate="", deadline=None
        )
        self.cells = {}  # (k, repeat) -> its bar; with --devices several cells run at once
        self.cell_times: list[float] = []  # seconds of each finished cell

    def cell_started(self, k, repeat):
        task = self.bars.add_task(
            "cell",
            total=self.per_cell,
            label=cell_name(k, repeat),
            rate="",
            deadline=self._cell_deadline(0.0),
        )
        self.cells[(k, repeat)] = {
            "task": task,
            "tokens": 0,
            "base": 0,
            "finished": 0,
            "start": time.perf_counter(),
        }

    def _cell_deadline(self, elapsed: float, finished: int = 0) -> float | None:
        """A cell's finish time: from its own finished requests, else the finished cells' mean."""
        now = time.perf_counter()
        if finished:
            return now + elapsed / finished * (self.per_cell - finished)
        if self.cell_times:
            return now + max(sum(self.cell_times) / len(self.cell_times) - elapsed, 0.0)
        return None

    def _sweep_deadline(self) -> float | None:
        left = self.clock.left()
        return None if left is None else time.perf_counter() + left

    def progress(self, k, repeat, finished, tokens):
        state = self.cells[(k, repeat)]
        # tokens counts this generate() call; a second turn starts again from 0
        if tokens < state["tokens"]:
            state["base"] += state["tokens"]
        state["tokens"] = tokens
        state["finished"] += finished
        elapsed = max(time.perf_counter() - state["start"], 1e-9)
        rate = f"{(state['base'] + tokens) / elapsed:,.0f} tok/s"
        deadline = self._cell_deadline(elapsed, state["finished"])
        self.bars.update(state["task"], advance=finished, rate=rate, deadline=deadline)
        self.clock.request_finished(finished)
        self.bars.update(self.overall, advance=finished, deadline=self._sweep_deadline())

    def cell_finished(self, cell):
        state = self.cells[(cell.k, cell.repeat)]
        self.cell_times.append(time.perf_counter() - state["start"])
        self.bars.update(state["task"], completed=self.per_cell, deadline=time.perf_counter())
        self.clock.cell_finished()
        self.bars.update(self.overall, deadline=self._sweep_deadline())


def show_sweep(sweep, console: Console, indent: str = "") -> dict:
    """Run the sweep under bars on an interactive terminal, else printing a line per finished cell."""
    per_cell, total_cells = sweep.num_generations(), len(sweep.pending())
    if not console.is_interactive:
        return sweep.run(CellLines(console, total_cells, per_cell, indent))
    with Progress(
        TextColumn("[bold]{task.fields[label]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        EtaColumn(),
        console=console,
        transient=False,
    ) as bars:
        return sweep.run(LiveDisplay(bars, per_cell, total_cells))


class Starting:
    """What is being read or loaded before the first cell, as a transient status line on an
    interactive terminal (erased when the sweep starts or an error is printed, so a refusal stays
    one line); elsewhere nothing (a log's first line is the run's header, printed once its inputs
    are checked)."""

    def __init__(self, console: Console, text: str):
        self.status = console.status(text) if console.is_interactive else None

    def __enter__(self) -> Starting:
        if self.status is not None:
            self.status.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def update(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
