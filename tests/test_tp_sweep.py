"""`alcheck run --tensor-parallel-size 2` end to end on CPU (gloo): the sweep's cells on two ranks.

Oracle: the same run at TP=1. Rows (tokens' first difference, steps, accepted, per position)
must be identical, the slot audit zero, and the run must record its tensor parallelism. Both
launch paths: alcheck spawning the ranks itself, and torchrun-style env:// (two processes started
here with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, as torchrun would). A rank that fails
ends the run with its one-line error and keeps the finished cells; torchrun-style ranks --resume
it to the uninterrupted result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.executors.processes import TEST_FAIL_ENV
from alcheck.tp.launch import free_port

ARGS = [
    "--ks",
    "1,3",
    "--repeats",
    "1",
    "--limit",
    "3",
    "--max-tokens",
    "16",
    "--reference",
    "none",
    "--audit-slots",
    "--check-lossless",
]
SAME = [
    "k",
    "repeat",
    "question_id",
    "turn",
    "prompt_tokens",
    "prompt_hash",
    "generated_tokens",
    "steps",
    "drafted",
    "accepted",
    "accepted_per_pos",
    "identical",
    "first_diff",
]


def _rows(out):
    return pd.read_csv(out / "questions.csv")[SAME]


@pytest.fixture(scope="module")
def tp1(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("tp1") / "run"
    result = CliRunner().invoke(cli, ["run", *pair_args, *ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_spawned_ranks_equal_one_process(pair_args, tp1, tmp_path):
    out = tmp_path / "tp2"
    result = CliRunner().invoke(
        cli, ["run", *pair_args, *ARGS, "--tensor-parallel-size", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(_rows(out), _rows(tp1))
    assert (out / "traces.csv").read_bytes() == (tp1 / "traces.csv").read_bytes()
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete" and meta["config"]["tensor_parallel_size"] == 2
    assert meta["environment"]["tensor_parallel"] == {
        "tensor_parallel_size": 2,
        "world_size": 2,
        "backend": "gloo",
    }
    assert all(s["slot_violations"] == 0 and s["lossless_rate"] == 1.0 for s in meta["summary"])


def _torchrun(args, ranks=2):
    """Start `ranks` processes as torchrun would (env://), wait, return [(rc, stdout, stderr)]."""
    base = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "WORLD_SIZE": str(ranks),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "alcheck", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(ranks)
    ]
    return [(p.returncode, *out) for p, out in ((p, p.communicate(timeout=240)) for p in procs)]


def test_failing_rank_keeps_finished_cells_and_torchrun_resume_completes(
    pair_args, tp1, tmp_path, monkeypatch
):
    """The spawned path fails on rank 1 at K=3 (after K=1 is saved); torchrun-style ranks then
    --resume it, and the finished run equals the one-process run."""
    out = tmp_path / "fail"
    monkeypatch.setenv(TEST_FAIL_ENV, "3:0:alcheck")  # the spawned ranks inherit it
    result = CliRunner().invoke(
        cli, ["run", *pair_args, *ARGS, "--tensor-parallel-size", "2", "--out", str(out)]
    )
    monkeypatch.delenv(TEST_FAIL_ENV)
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert "tensor-parallel rank 1" in line and "injected failure at K=3" in line and "--resume" in line
    meta = json.loads((out / "run.json").read_text())
    assert [(c["k"], c["repeat"]) for c in meta["cells"]] == [(1, 0)]
    (rc0, out0, err0), (rc1, out1, err1) = _torchrun(["--resume", str(out)])
    assert (rc0, rc1) == (0, 0), err0[-2000:] + err1[-2000:]
    assert "saved" in out0 and out1.strip() == ""  # only rank 0 reports
    pd.testing.assert_frame_equal(_rows(out), _rows(tp1))
    assert (out / "traces.csv").read_bytes() == (tp1 / "traces.csv").read_bytes()
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete" and meta["environment"]["tensor_parallel"]["world_size"] == 2


def test_torchrun_without_out_is_one_line(pair_args):
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    result = CliRunner().invoke(cli, ["run", *pair_args, *ARGS, "--tensor-parallel-size", "2"], env=env)
    assert result.exit_code == 2 and "pass --out DIR" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_tensor_parallel_input_exits_2_before_loading(pair_args, tmp_path):
    from alcheck.models.loading import read_config

    heads = read_config(__import__("pathlib").Path(pair_args[1]), "target")["num_attention_heads"]
    result = CliRunner().invoke(
        cli,
        ["run", *pair_args, *ARGS, "--tensor-parallel-size", str(heads + 1), "--out", str(tmp_path / "bad")],
    )
    assert result.exit_code == 2 and "attention heads" in result.output and "use one of" in result.output
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            *ARGS,
            "--tensor-parallel-size",
            "2",
            "--runner",
            "contiguous",
            "--out",
            str(tmp_path / "bad2"),
        ],
    )
    assert result.exit_code == 2 and "drop --tensor-parallel-size" in result.output


class _Settings(dict):
    def to_dict(self):
        return dict(self)


def _plan(state: dict):
    """What _agreed_cells reads of a CellPlan: its settings, first-turn prompts and turns."""
    return SimpleNamespace(
        cfg=_Settings(state["config"]),
        prompts_turn1=state["prompts_turn1"],
        turns_to_run=state["turns_to_run"],
    )


def _cells_on_rank(tp, states, pendings):
    from alcheck.executors.tensor_parallel import _agreed_cells

    return _agreed_cells(tp, _plan(states[tp.rank]), pendings[tp.rank])


def test_ranks_run_rank_0s_cells_and_stop_when_their_prompts_differ():
    """Under torchrun every rank reads its own run directory and builds its own prompts: they
    take rank 0's list of cells, and a rank whose prompts differ stops the run in one line."""
    from alcheck.errors import AlcheckError
    from alcheck.tp.launch import run_ranks

    state = {"config": {"ks": [1, 3]}, "prompts_turn1": [[1, 2, 3]], "turns_to_run": [1]}
    got = run_ranks(
        2, _cells_on_rank, [state, dict(state)], [[(1, 0), (3, 0)], [(3, 0)]], start_method="fork"
    )
    assert got == [(1, 0), (3, 0)]
    other = {**state, "prompts_turn1": [[1, 2, 4]]}
    with pytest.raises(AlcheckError, match="rank 1's settings or prompts differ from rank 0's"):
        run_ranks(2, _cells_on_rank, [state, other], [[(1, 0)], [(1, 0)]], start_method="fork")
