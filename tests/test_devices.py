"""--devices: (K, repeat) cells over worker processes, merged into the one-device run (issue 12).

The oracle is the same command on one device: questions.csv has no wall-clock column, so a
merged run must equal it exactly. Spawned workers are slow to start (each imports torch), so
the runs here are few and tiny.
"""

from __future__ import annotations

import json
import os
import queue
import signal
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import invoke_run

from alcheck.config import NOT_RESULT_AFFECTING, RunConfig, check_devices, parse_devices
from alcheck.errors import AlcheckError
from alcheck.executors import devices as parallel
from alcheck.executors import processes
from alcheck.rundir.traces import TRACES_FILE, read_traces
from alcheck.sweep.events import SweepEvents

BASE = [
    "--ks",
    "1-2",
    "--repeats",
    "2",
    "--limit",
    "4",
    "--max-tokens",
    "20",
    "--block-size",
    "4",
    "--max-batch-size",
    "3",
    "--check-lossless",
    "--reference",
    "none",
]
ALL_CELLS = [(1, 0), (1, 1), (2, 0), (2, 1)]


def cells_of(out: Path) -> list[tuple[int, int]]:
    return [(c["k"], c["repeat"]) for c in json.loads((out / "run.json").read_text())["cells"]]


def rows(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False)


FILES = ("questions.csv", TRACES_FILE)


def same_files(out: Path, oracle: Path) -> bool:
    """questions.csv and traces.csv byte for byte the oracle's."""
    return all((out / name).read_bytes() == (oracle / name).read_bytes() for name in FILES)


def summary_without_timing(out: Path) -> list[dict]:
    meta = json.loads((out / "run.json").read_text())
    return [{k: v for k, v in s.items() if k != "tokens_per_s"} for s in meta["summary"]]


def worker_processes() -> list[int]:
    """Live children of this process that multiprocessing spawned as workers (not its resource tracker)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"spawn_main" in cmdline:
            found.append(int(proc.name))
    return found


def assert_no_worker_left():
    assert parallel.last_worker_pids, "the run started no worker"
    for pid in parallel.last_worker_pids:
        with pytest.raises(ProcessLookupError):  # reaped, not a zombie or an orphan
            os.kill(pid, 0)
    assert worker_processes() == []


@pytest.fixture(scope="module")
def one_device(pair_args, tmp_path_factory):
    """The oracle: the same sweep on one device, in this process."""
    out = tmp_path_factory.mktemp("devices") / "one"
    result = invoke_run([*pair_args, *BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert cells_of(out) == ALL_CELLS
    return out


# -- validation: one line, exit 2, nothing loaded --------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--devices", ""], "the list is empty"),
        (["--devices", ",,"], "the list is empty"),
        (["--devices", "gpu0,gpu1"], "cannot read 'gpu0'"),
        (["--devices", "cuda,cuda"], "cannot read 'cuda'"),
        (["--devices", "auto"], "cannot read 'auto'"),
        (["--devices", "cpu,cuda:0"], "mixes cpu and cuda"),
        (["--devices", "cuda:0,cuda:1,cuda:0"], "cuda:0 more than once"),
        (["--devices", "cpu,cpu", "--device", "cuda"], "disagrees with --device cuda"),
        (["--devices", "cuda:0,cuda:1", "--device", "cuda:0"], "disagrees with --device cuda:0"),
        (["--devices", "cuda:0,cuda:1", "--device", "cpu"], "disagrees with --device cpu"),
    ],
)
def test_bad_devices_exit_2_in_one_line(pair_args, tmp_path, args, needle):
    out = tmp_path / "bad"
    result = invoke_run([*pair_args, *BASE, "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists()


def test_a_device_this_machine_lacks_exits_2_before_loading(pair_args, tmp_path, monkeypatch):
    from alcheck.backends.builtin import BuiltinBackend

    def no_load(self):
        raise AssertionError("weights loaded before the devices were checked")

    monkeypatch.setattr(BuiltinBackend, "load", no_load)
    result = invoke_run([*pair_args, *BASE, "--out", str(tmp_path / "o"), "--devices", "cuda:0,cuda:97"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    if torch.cuda.is_available():
        assert f"--devices cuda:97: this machine has {torch.cuda.device_count()} CUDA device" in result.output
    else:
        assert "--devices cuda:0: no CUDA device is visible: use --devices cpu" in result.output
    assert not (tmp_path / "o").exists()


def test_devices_parse_and_agree():
    assert parse_devices(" cuda:0, cuda:1 ") == ["cuda:0", "cuda:1"]
    assert parse_devices(["cpu", "cpu"]) == ["cpu", "cpu"] and parse_devices(None) is None
    for devices, device in [
        (["cpu", "cpu"], "auto"),
        (["cpu", "cpu"], "cpu"),
        (["cuda:0", "cuda:1"], "cuda"),
        (["cuda:1"], "cuda:1"),
        (["cuda:1", "cuda:0"], "auto"),
    ]:
        check_devices(devices, device)  # no error
    with pytest.raises(AlcheckError, match="more than once"):
        RunConfig(target="t", draft="d", devices=["cuda:1", "cuda:1"])


def test_devices_are_not_result_affecting():
    assert "devices" in NOT_RESULT_AFFECTING
    one = RunConfig(target="t", draft="d", device="auto")
    two = RunConfig(target="t", draft="d", device="auto", devices=["cuda:0", "cuda:1"])
    assert one.result_settings() == two.result_settings()
    assert two.to_dict()["devices"] == ["cuda:0", "cuda:1"]


# -- the merge, deterministically: cells recorded in any order give the one-device files ------------


def test_cells_finishing_out_of_order_are_written_in_order(pair_args, one_device, tmp_path, monkeypatch):
    """Workers finish cells in any order; record_cell must put each in place. Here one process
    runs the cells backwards, so every cell after the first is recorded out of order."""
    from alcheck.sweep import driver as sweep_mod

    real_pending = sweep_mod.Sweep.pending
    monkeypatch.setattr(sweep_mod.Sweep, "pending", lambda self: real_pending(self)[::-1])
    out = tmp_path / "backwards"
    result = invoke_run([*pair_args, *BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert cells_of(out) == ALL_CELLS
    assert same_files(out, one_device)
    assert summary_without_timing(out) == summary_without_timing(one_device)


# -- worker processes ------------------------------------------------------------------------------


def test_two_cpu_workers_equal_one_device(pair_args, one_device, tmp_path):
    out = tmp_path / "two"
    result = invoke_run([*pair_args, *BASE, "--out", str(out), "--devices", "cpu,cpu"])
    assert result.exit_code == 0, result.output
    assert same_files(out, one_device)
    assert summary_without_timing(out) == summary_without_timing(one_device)
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete" and cells_of(out) == ALL_CELLS
    assert meta["environment"]["devices"] == ["cpu", "cpu"] and meta["environment"]["torch_threads"] >= 1
    assert meta["config"]["devices"] == ["cpu", "cpu"]
    assert all(s["lossless_rate"] == 1.0 for s in meta["summary"])
    assert_no_worker_left()


def test_failed_worker_then_ctrl_c_then_resume(pair_args, one_device, tmp_path, monkeypatch):
    from alcheck.sweep import driver as sweep_mod

    oracle = rows(one_device)
    out = tmp_path / "broken"

    def assert_saved_cells_match_the_oracle():
        saved = cells_of(out)
        assert saved == sorted(saved)
        mine = rows(out)
        assert sorted({(int(k), int(r)) for k, r in zip(mine.k, mine.repeat)}) == saved
        expected = oracle[[(int(k), int(r)) in saved for k, r in zip(oracle.k, oracle.repeat)]]
        pd.testing.assert_frame_equal(mine.reset_index(drop=True), expected.reset_index(drop=True))
        traces, want = read_traces(out), read_traces(one_device)
        assert traces == {key: t for key, t in want.items() if key[:2] in saved}
        return saved

    # 1. a worker raises at K=2 repeat 0: exit 1, its error and where, the finished cells kept
    monkeypatch.setenv(processes.TEST_FAIL_ENV, "2:0")
    result = invoke_run([*pair_args, *BASE, "--out", str(out), "--devices", "cpu,cpu"])
    assert result.exit_code == 1, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "failed at K=2 repeat 0: RuntimeError: injected failure" in error[0]
    assert "processes.py" in error[0] and f"alcheck run --resume {out}" in error[0]
    assert json.loads((out / "run.json").read_text())["status"] == "partial"
    saved = assert_saved_cells_match_the_oracle()
    assert 1 <= len(saved) <= 3 and (2, 0) not in saved
    assert_no_worker_left()

    # 2. resumed on two workers, Ctrl-C in the parent while they start: 130, workers stopped, the run
    #    as it was (a Ctrl-C while they compute takes the same path; spawning is what makes it slow)
    monkeypatch.delenv(processes.TEST_FAIL_ENV)
    dispatched, running = [], []
    real_pending = sweep_mod.Sweep.pending

    def pending(self):
        dispatched.append(real_pending(self))
        return dispatched[-1]

    def ctrl_c(results, procs, devices, saved):
        running.append([proc.is_alive() for proc in procs])
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_mod.Sweep, "pending", pending)
    monkeypatch.setattr(parallel, "_next_message", ctrl_c)
    before = [(out / name).read_bytes() for name in FILES]
    result = invoke_run(["--resume", str(out), "--devices", "cpu,cpu"])
    assert result.exit_code == 130, result.output
    assert f"alcheck run --resume {out}" in " ".join(result.output.split())  # rich may wrap the hint
    assert dispatched[-1] == [c for c in ALL_CELLS if c not in saved]  # only the missing cells
    assert running == [[True, True]]
    assert cells_of(out) == saved and [(out / name).read_bytes() for name in FILES] == before
    assert_no_worker_left()

    # 3. finished on one device (another --devices is allowed): the one-device run, exactly
    monkeypatch.undo()
    result = invoke_run(["--resume", str(out), "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    assert cells_of(out) == ALL_CELLS
    pd.testing.assert_frame_equal(rows(out), oracle)
    assert same_files(out, one_device)
    assert summary_without_timing(out) == summary_without_timing(one_device)
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete" and meta["environment"]["devices"] == ["cpu"]


def test_the_worker_body_in_process(one_device, tmp_path, monkeypatch):
    """_worker and _collect without spawning: a worker's cells equal the one-device rows, and its
    errors reach the parent as one line (AlcheckError: exit 2) or a traceback summary (a crash)."""
    from alcheck.sweep.driver import Sweep

    cfg = RunConfig.from_dict(json.loads((one_device / "run.json").read_text())["config"])
    sweep = Sweep(cfg, tmp_path / "w")
    sweep.prepare()
    oracle = rows(one_device)

    def worker(*cells):
        tasks, results = queue.Queue(), queue.Queue()
        for cell in [*cells, None]:
            tasks.put(cell)
        sigint = signal.getsignal(signal.SIGINT)
        try:
            parallel._worker(1, "cpu", sweep.plan, 1, tasks, results)
        finally:
            signal.signal(signal.SIGINT, sigint)  # the worker ignores Ctrl-C; this process must not
        return [results.get_nowait() for _ in range(results.qsize())]

    messages = worker((2, 1), (1, 0))
    assert {wid for wid, _ in messages} == {1}
    kinds = [m[0] for _, m in messages if m[0] != "progress"]
    assert kinds == ["ready", "environment", "cell_started", "cell_finished", "cell_started", "cell_finished"]
    for cell in [m[1][0] for _, m in messages if m[0] == "cell_finished"]:
        mine = pd.DataFrame([{c: str(v) for c, v in r.items()} for r in cell.rows])
        expected = oracle[(oracle.k == str(cell.k)) & (oracle.repeat == str(cell.repeat))]
        pd.testing.assert_frame_equal(mine, expected[list(mine.columns)].reset_index(drop=True))

    def collect(messages):
        results = queue.Queue()
        for m in messages:
            results.put(m)
        done = [SimpleNamespace(exitcode=0, is_alive=lambda: False)] * 2
        parallel._collect(["cpu", "cpu"], done, results, {(1, 0), (1, 1)}, SweepEvents(), lambda: "")

    monkeypatch.setenv(processes.TEST_FAIL_ENV, "1:1:alcheck")
    with pytest.raises(AlcheckError) as err:
        collect(worker((1, 1)))
    assert err.value.format_message() == (
        f"cpu (worker 1) at K=1 repeat 1: injected failure at K=1 repeat 1: unset {processes.TEST_FAIL_ENV}"
    )
    monkeypatch.setenv(processes.TEST_FAIL_ENV, "1:1")
    with pytest.raises(processes.WorkerFailed) as err:
        collect(worker((1, 1)))
    assert str(err.value).startswith(
        "worker 1 on cpu failed at K=1 repeat 1: RuntimeError: injected failure "
        "at K=1 repeat 1 (at processes.py:"
    )
    assert "in injected_failure <- devices.py:" in str(err.value) and "\n" not in str(err.value)
