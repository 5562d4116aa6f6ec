"""alcheck.tp's launcher and bad-input checks: a failing rank ends the run with its one-line error
and leaves no process behind; Ctrl-C leaves no rank behind; under torchrun's env:// variables
the function runs in-process as the given rank; bad sizes exit 2 in one line before any load."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from conftest import expect_error

from alcheck.errors import AlcheckError
from alcheck.tp import launch
from alcheck.tp.checks import check_tensor_parallel, valid_sizes
from alcheck.tp.group import split_range

TARGET = {"num_attention_heads": 32, "num_key_value_heads": 8}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _write_pid(where, rank):
    """Whole or absent (write then rename): a rank killed mid-write leaves no empty file."""
    part = f"{where}/rank{rank}.pid.part"
    with open(part, "w") as f:
        f.write(str(os.getpid()))
    os.replace(part, f"{where}/rank{rank}.pid")


def _rank_fails(tp, where):
    import torch.distributed as dist

    _write_pid(where, tp.rank)
    if tp.rank == 1:
        # fail only once rank 0 has recorded itself, else the parent may end it before it does
        deadline = time.monotonic() + 30
        while not os.path.exists(f"{where}/rank0.pid") and time.monotonic() < deadline:
            time.sleep(0.01)
        raise AlcheckError("rank one cannot go on: fix the input")
    dist.barrier()  # rank 0 waits for a rank that will never come: the parent must end it
    return "unreachable"


def test_a_failing_rank_ends_every_rank_with_its_message(tmp_path):
    message = expect_error(
        lambda: launch.run_ranks(2, _rank_fails, str(tmp_path), start_method="fork"),
        "tensor-parallel rank 1",
        "rank one cannot go on: fix the input",
    )
    assert message.count("fix the input") == 1
    pids = list(launch.last_rank_pids)
    assert len(pids) == 2 and sorted(
        int((tmp_path / f"rank{r}.pid").read_text()) for r in range(2)
    ) == sorted(pids)
    assert not any(_alive(pid) for pid in pids)


def _rank_waits(tp, where):
    _write_pid(where, tp.rank)
    time.sleep(600)


def test_ctrl_c_leaves_no_rank_behind(tmp_path):
    def interrupt():  # a terminal's Ctrl-C reaches the whole group: the ranks, then the parent
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(tmp_path.glob("*.pid"))) < 2:
            time.sleep(0.05)
        for pid in launch.last_rank_pids:
            os.kill(pid, signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        launch.run_ranks(2, _rank_waits, str(tmp_path), start_method="fork")
    pids = list(launch.last_rank_pids)
    assert len(pids) == 2 and len(list(tmp_path.glob("*.pid"))) == 2  # both ranks were running
    assert not any(_alive(pid) for pid in pids)


def _rank_sum(tp, value):
    x = torch.tensor([float(value + tp.rank)])
    return (tp.rank, tp.size, tp.backend, float(tp.all_reduce(x)))


def test_torchrun_runs_in_process_as_the_given_rank(monkeypatch):
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(launch.free_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    launch.last_rank_pids.clear()
    assert launch.run_ranks(1, _rank_sum, 5) == (0, 1, "gloo", 5.0)
    assert launch.last_rank_pids == []  # nothing was spawned
    expect_error(
        lambda: launch.run_ranks(2, _rank_sum, 5),
        "--tensor-parallel-size 2",
        "torchrun started 1",
        "--nproc-per-node",
    )


def test_split_range_covers_every_row_once():
    for total in (1, 7, 8, 320, 321):
        for size in (1, 2, 3, 8):
            parts = [split_range(total, r, size) for r in range(size)]
            assert parts[0][0] == 0 and parts[-1][1] == total
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
            widths = [b - a for a, b in parts]
            assert max(widths) - min(widths) <= 1


def test_heads_not_divisible_name_both_counts_and_the_valid_sizes():
    assert valid_sizes(32, 8) == [1, 2, 4, 8]
    expect_error(
        lambda: check_tensor_parallel(3, TARGET),
        "--tensor-parallel-size 3",
        "32 attention heads",
        "8 KV heads",
        "1, 2, 4, 8",
    )
    expect_error(lambda: check_tensor_parallel(16, TARGET), "32 attention heads", "8 KV heads", "1, 2, 4, 8")
    for size in (1, 2, 4, 8):
        check_tensor_parallel(size, TARGET, "cpu")


def test_more_ranks_than_gpus_and_bad_sizes():
    expect_error(
        lambda: check_tensor_parallel(4, TARGET, "cuda", num_visible_gpus=2),
        "--tensor-parallel-size 4",
        "2 are visible",
        "--tensor-parallel-size 2",
    )
    check_tensor_parallel(2, TARGET, "cuda", num_visible_gpus=2)
    expect_error(
        lambda: check_tensor_parallel(2, TARGET, "cuda:1", num_visible_gpus=2),
        "--device cuda:1",
        "--device cuda",
    )
    for bad in (0, -1, True, 1.5):
        expect_error(
            lambda bad=bad: check_tensor_parallel(bad, TARGET), f"--tensor-parallel-size {bad}", ">= 1"
        )


def test_devices_must_name_one_device_per_rank():
    expect_error(
        lambda: check_tensor_parallel(2, TARGET, "auto", ["cuda:0", "cuda:1", "cuda:2"]),
        "--devices cuda:0,cuda:1,cuda:2",
        "one device per rank",
        "list 2 devices",
    )
    check_tensor_parallel(2, TARGET, "auto", ["cuda:2", "cuda:3"], num_visible_gpus=4)
    assert launch.rank_devices(2, "auto", ["cuda:2", "cuda:3"]) == ["cuda:2", "cuda:3"]
    assert launch.rank_devices(2, "cuda") == ["cuda:0", "cuda:1"]
    assert launch.rank_devices(2, "cpu") == ["cpu", "cpu"]


def test_run_config_and_cli_option():
    from click.testing import CliRunner

    from alcheck.cli.main import cli
    from alcheck.config import RunConfig

    assert RunConfig(target="t", draft="d").tensor_parallel_size == 1
    assert (
        "tensor_parallel_size" in RunConfig(target="t", draft="d", tensor_parallel_size=2).result_settings()
    )
    expect_error(lambda: RunConfig(target="t", draft="d", tensor_parallel_size=0), "--tensor-parallel-size 0")
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "--tensor-parallel-size" in result.output


def test_rank_weight_bytes_is_about_a_share_of_the_whole():
    from alcheck.models.sizes import target_weight_bytes
    from alcheck.testing.tiny import LLAMA31_8B_CONFIG

    whole = target_weight_bytes(LLAMA31_8B_CONFIG, 2, 1)
    assert whole == 2 * 8_030_261_248  # Llama-3.1-8B's parameter count, in bf16
    for size in (2, 4, 8):
        share = target_weight_bytes(LLAMA31_8B_CONFIG, 2, size)
        assert whole / size < share < whole / size * 1.001  # the norms are repeated on every rank
