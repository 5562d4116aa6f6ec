"""Issue 50, part B: progress when the output is not a terminal, and the ETA from the first finished work."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from types import SimpleNamespace

from rich.console import Console
from rich.progress import Progress

from alcheck.cli.progress import CellLines, LiveDisplay, SweepClock, cell_line, clock_text

BAR_FRAME = re.compile(r"[━╸╺]+\s+\d+/\d+")  # a bar and its "done/total": no frame belongs in a log


def _cell(k=2, repeat=0, steps=7, accepted=8, tokens=16, wall=0.5, target_only=None):
    return SimpleNamespace(
        k=k,
        repeat=repeat,
        steps=steps,
        accepted=accepted,
        generated_tokens=tokens,
        wall_s=wall,
        target_only_wall_s=target_only,
    )


def test_a_cell_line_names_k_repeat_al_time_and_rate():
    assert cell_line(_cell()) == "K=2 repeat 1: AL 2.14, 16 tokens in 0.5 s, 32.0 tok/s"
    # the target-only time of --check-lossless is not speculative decoding (as the summary counts it)
    assert cell_line(_cell(wall=1.0, target_only=0.5)).endswith("16 tokens in 1.0 s, 32.0 tok/s")
    empty = cell_line(_cell(steps=0, accepted=0, wall=0.0))
    assert empty == "K=2 repeat 1: AL -, 16 tokens in 0.0 s, - tok/s"


def test_the_clock_knows_the_time_left_from_the_first_finished_requests():
    now = [0.0]
    clock = SweepClock(total_cells=4, per_cell=10, now=lambda: now[0])
    assert clock.left() is None  # nothing finished: unknown
    now[0] = 2.0
    clock.request_finished(5)  # 5 of 40 requests in 2 s
    assert clock.left() == 2.0 / 5 * 35
    now[0] = 3.0
    clock.request_finished(5)
    clock.cell_finished()  # one cell in 3 s: the whole cells' pace from now on
    assert clock.left() == 3.0 * 3
    assert clock_text(None) == "-:--:--" and clock_text(3725.4) == "1:02:05"


def test_cell_lines_print_each_cell_with_its_count_and_eta():
    out = io.StringIO()
    lines = CellLines(Console(file=out, width=200), total_cells=2, per_cell=3, indent="  ")
    lines.progress(1, 0, 3, 12)
    lines.cell_finished(_cell(k=1))
    lines.cell_finished(_cell(k=2))
    first, second = out.getvalue().splitlines()
    assert first.startswith("  K=1 repeat 1: AL 2.14") and "(1 of 2 cells, ETA " in first
    assert "-:--:--" not in first
    assert second.endswith("(2 of 2 cells)")


def test_the_bars_show_an_eta_after_the_first_finished_requests():
    console = Console(file=io.StringIO(), width=120)
    with Progress(console=console, auto_refresh=False) as bars:
        display = LiveDisplay(bars, per_cell=4, total_cells=3)
        overall = bars.tasks[0]
        display.cell_started(1, 0)
        assert overall.fields["deadline"] is None
        display.progress(1, 0, 1, 20)  # one request of twelve: the sweep's ETA is known
        assert overall.fields["deadline"] is not None
        display.cell_finished(_cell(k=1, repeat=0))
        display.cell_started(2, 0)  # a new cell's ETA: the finished cell's time, before its own requests
        assert bars.tasks[-1].fields["deadline"] is not None


def test_a_redirected_run_prints_each_cell_as_it_finishes(tmp_path):
    """`alcheck run > log`: a line per cell, read while the process still runs, and no bar frame."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    env.pop("TTY_COMPATIBLE", None)
    args = ["--ks", "1-3", "--repeats", "1", "--limit", "2", "--max-tokens", "8", "--reference", "none"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "alcheck", "run", *args, "--out", str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    log, running_at_first_cell = [], None
    for line in proc.stdout:
        log.append(line)
        if running_at_first_cell is None and line.startswith("K=1 repeat 1: AL "):
            running_at_first_cell = proc.poll() is None
    assert proc.wait(timeout=300) == 0, "".join(log)
    text = "".join(log)
    assert running_at_first_cell, text  # the first cell's line came before the process ended
    cells = [ln for ln in log if ln.startswith("K=") and ": AL " in ln]
    assert [ln.split(":")[0] for ln in cells] == ["K=1 repeat 1", "K=2 repeat 1", "K=3 repeat 1"], text
    assert "(1 of 3 cells, ETA " in cells[0] and cells[2].rstrip().endswith("(3 of 3 cells)")
    assert not BAR_FRAME.search(text) and "\r" not in text and "\x1b[" not in text
    assert log[0].startswith("alcheck run target=")  # the header comes before the first cell


def test_engine_check_shows_each_cell_line_of_its_runs_and_logs_everything(tmp_path, monkeypatch, capsys):
    from alcheck import paths

    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "bench"))
    import engine_check

    cell = "K=1 repeat 1: AL 1.50, 8 tokens in 0.1 s, 80.0 tok/s (1 of 1 cells)"
    script = f"print('alcheck run target=t'); print({cell!r})"
    log = tmp_path / "run.log"
    code, _ = engine_check.timed([sys.executable, "-c", script], log=log)
    assert code == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown == [f"engine-check:   {cell}"]
    assert log.read_text().splitlines()[0] == "alcheck run target=t"
