"""--executor ray (issue 31): the cells as Ray tasks on a local Ray, started once for this module.

The oracle is the same sweep in this process: questions.csv has no wall-clock column, so the Ray
run must equal it byte for byte, also after a worker is killed mid-task and its cell retried.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.executors import processes, ray_tasks

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'alcheck[ray]')")

BASE = ["--ks", "1-2", "--repeats", "2", "--limit", "3", "--max-tokens", "16", "--block-size", "4"]
BASE += ["--reference", "none"]
ALL_CELLS = [(1, 0), (1, 1), (2, 0), (2, 1)]
FILES = ("questions.csv", "traces.csv")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # ray.init leaves its SIGTERM handler (sys.exit(15)) behind; later tests in this worker expect 143
    before = signal.getsignal(signal.SIGTERM)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    signal.signal(signal.SIGTERM, before)


def invoke(args):
    return CliRunner().invoke(cli, ["run", *args], catch_exceptions=False)


def cells_of(out: Path) -> list[dict]:
    return json.loads((out / "run.json").read_text())["cells"]


def same_files(out: Path, oracle: Path) -> bool:
    return all((out / name).read_bytes() == (oracle / name).read_bytes() for name in FILES)


@pytest.fixture(scope="module")
def in_process(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray") / "local"
    result = invoke([*pair_args, *BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_ray_rows_equal_the_in_process_run(pair_args, in_process, tmp_path):
    out = tmp_path / "ray"
    result = invoke([*pair_args, *BASE, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 0, result.output
    assert same_files(out, in_process)
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete"
    assert [(c["k"], c["repeat"]) for c in meta["cells"]] == ALL_CELLS
    ran_on = [c["ran_on"] for c in meta["cells"]]
    assert all(r["executor"] == "ray" and r["task"].startswith("alcheck-") for r in ran_on), ran_on
    assert meta["environment"]["executor"]["name"] == "ray"
    assert meta["environment"]["executor"]["task_resources"] == {"num_cpus": 1}


def test_a_killed_worker_is_retried_and_rows_stay_identical(pair_args, in_process, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv(ray_tasks.TEST_KILL_ENV, f"2:0:{marks}")
    out = tmp_path / "killed"
    result = invoke([*pair_args, *BASE, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 0, result.output
    assert (marks / "killed-2-0").exists()  # the first attempt did die
    assert same_files(out, in_process)


def test_driver_interrupted_then_resumed_on_ray(pair_args, in_process, tmp_path, monkeypatch):
    real, calls = ray_tasks._result, []

    def ctrl_c_at_the_third(*args):  # the driver dies with two cells recorded
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(ray_tasks, "_result", ctrl_c_at_the_third)
    out = tmp_path / "cut"
    result = invoke([*pair_args, *BASE, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 130, result.output
    assert len(cells_of(out)) == 2
    monkeypatch.undo()
    result = invoke(["--resume", str(out), "--executor", "ray"])
    assert result.exit_code == 0, result.output
    assert [(c["k"], c["repeat"]) for c in cells_of(out)] == ALL_CELLS
    assert same_files(out, in_process)


def test_a_bad_input_error_is_not_retried_and_ends_the_run_in_one_line(pair_args, tmp_path, monkeypatch):
    monkeypatch.setenv(processes.TEST_FAIL_ENV, "1:1:alcheck")
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv(ray_tasks.TEST_ATTEMPTS_ENV, str(calls))
    out = tmp_path / "bad"
    result = CliRunner().invoke(cli, ["run", *pair_args, *BASE, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith("Error: ray task alcheck-K1-r1 at K=1 repeat 1: injected failure"), errors
    assert len(list(calls.glob("attempt-1-1-*"))) == 1  # one attempt: not retried


def test_ray_options_refused_in_one_line(pair_args, tmp_path, monkeypatch):
    out = tmp_path / "o"
    result = invoke([*pair_args, *BASE, "--out", str(out), "--ray-address", "auto"])
    assert result.exit_code == 2 and "--ray-address needs --executor ray" in result.output
    result = invoke([*pair_args, *BASE, "--out", str(out), "--executor", "ray", "--devices", "cpu,cpu"])
    assert result.exit_code == 2 and "drop --devices" in result.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    result = invoke([*pair_args, *BASE, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "Error: --executor ray needs Ray, which is not installed: pip install 'alcheck[ray]'"
    )
    assert not out.exists()


def test_task_names_and_resources():
    assert ray_tasks.task_name(3, 1) == "alcheck-K3-r1"  # the worker's title: ray::alcheck-K3-r1
    assert ray_tasks.task_resources(2, "cuda") == {"num_gpus": 2, "num_cpus": 1, "max_calls": 0}
    assert ray_tasks.task_resources(1, "cpu") == {"num_cpus": 1}


def test_a_leaderboard_on_ray(pair_dirs, in_process, tmp_path):
    from alcheck.testing.tiny import make_tiny_eagle

    noisy = make_tiny_eagle(tmp_path / "noisy", pair_dirs[0], copy_target_layer=0, noise=0.3)
    out = tmp_path / "board"
    args = ["--target", str(pair_dirs[0]), "--draft", str(pair_dirs[1]), "--draft", str(noisy)]
    small = [*BASE[:1], "1", *BASE[2:]]  # K=1 only: a test of the wiring, kept short
    result = invoke([*args, *small, "--out", str(out), "--executor", "ray"])
    assert result.exit_code == 0, result.output
    mine = (out / pair_dirs[1].name / "questions.csv").read_text().splitlines()
    local = (in_process / "questions.csv").read_text().splitlines()
    assert mine == [local[0]] + [line for line in local[1:] if line.startswith("1,")]  # the local run's K=1
    assert (out / "leaderboard.csv").is_file()
    assert cells_of(out / "noisy")[0]["ran_on"]["executor"] == "ray"


def test_starting_ray_keeps_the_runs_sigterm_handler():
    """ray.init installs sys.exit(15) for SIGTERM; a run that starts its own Ray keeps exit 143."""

    class FakeRay:
        def init(self, **_):
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))

    def runs_handler(signum, frame):
        raise AssertionError("not called")

    before = signal.signal(signal.SIGTERM, runs_handler)
    try:
        ray_tasks._init_keeping_sigterm(FakeRay(), None)
        assert signal.getsignal(signal.SIGTERM) is runs_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_running_ray_cluster_passes_the_address_probe():
    """Issue 50's probe (a TCP connect and an HTTP/2 handshake) accepts a real GCS: this module's Ray."""
    address = ray.get_runtime_context().gcs_address
    ray_tasks.check_ray_address(address, timeout_s=5)
