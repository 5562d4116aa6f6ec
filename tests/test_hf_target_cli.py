"""`alcheck run` end to end on a tiny Qwen3 target with its EAGLE-3 head (issue 20's "done when"),
on a shipped single-turn dataset; the paged runner against the contiguous reference runner,
`--devices cpu,cpu` against one device, and `--tensor-parallel-size` refused in one line.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from arch_pairs import arch_pair  # noqa: F401 - fixture
from click.testing import CliRunner
from conftest import invoke_run

from alcheck.cli.main import cli
from alcheck.prompts.protocols import EAGLE_SYSTEM_PROMPT

BASE = [
    "--dataset",
    "humaneval",
    "--ks",
    "1,3",
    "--repeats",
    "1",
    "--limit",
    "3",
    "--max-tokens",
    "16",
    "--block-size",
    "4",
    "--reference",
    "none",
]
COUNTS = [
    "k",
    "question_id",
    "turn",
    "prompt_tokens",
    "prompt_hash",
    "generated_tokens",
    "steps",
    "accepted",
    "accepted_per_pos",
]


@pytest.fixture(scope="module")
def qwen3_args(arch_pair):  # noqa: F811
    dirs = arch_pair("qwen3")
    return ["--target", str(dirs["target"]), "--draft", str(dirs["eagle3"])]


@pytest.fixture(scope="module")
def paged_run(qwen3_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen3") / "paged"
    result = invoke_run([*qwen3_args, *BASE, "--check-lossless", "--audit-slots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _rows(out, columns=COUNTS):
    return pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False)[columns]


def test_qwen3_eagle3_run_end_to_end(paged_run):
    meta = json.loads((paged_run / "run.json").read_text())
    cfg = meta["config"]
    assert meta["status"] == "complete" and cfg["method"] == "eagle3"
    # --dataset humaneval without --protocol: the EAGLE repo's convention, one turn
    assert cfg["protocol"] == "eagle-repo" and cfg["system_prompt"] == EAGLE_SYSTEM_PROMPT
    rows = _rows(paged_run)
    assert set(rows["turn"]) == {"1"} and list(rows["question_id"][:3]) == ["0", "1", "2"]
    for s in meta["summary"]:
        assert s["lossless_rate"] == 1.0 and s["slot_violations"] == 0


def test_contiguous_runner_gives_the_same_counts(qwen3_args, paged_run, tmp_path):
    out = tmp_path / "contiguous"
    result = invoke_run([*qwen3_args, *BASE, "--runner", "contiguous", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _rows(out).equals(_rows(paged_run))


def test_two_cpu_workers_equal_one_device(qwen3_args, paged_run, tmp_path):
    out = tmp_path / "two"
    result = invoke_run(
        [*qwen3_args, *BASE, "--check-lossless", "--audit-slots", "--devices", "cpu,cpu", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (paged_run / "questions.csv").read_bytes()


def test_tensor_parallel_refused_in_one_line(qwen3_args, tmp_path):
    result = CliRunner().invoke(
        cli, ["run", *qwen3_args, *BASE, "--tensor-parallel-size", "2", "--out", str(tmp_path / "tp")]
    )
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "Llama targets only" in error[0] and "'qwen3'" in error[0]


def test_run_json_records_which_implementation_ran_the_target(paged_run):
    env = json.loads((paged_run / "run.json").read_text())["environment"]
    assert (env["model_type"], env["target_implementation"]) == ("qwen3", "transformers")


def test_a_run_past_a_sliding_window_exits_2_before_loading(tmp_path, monkeypatch):
    """A Mistral target with a 24-position window: runs that need more positions than that are
    refused from the configs and prompt lengths, before any weight loads (the backend's
    check_positions). Runs inside the window: tests/test_hf_target_window.py."""
    from alcheck.backends.builtin import BuiltinBackend
    from alcheck.testing.tiny_arch import make_tiny_arch_pair

    dirs = make_tiny_arch_pair(tmp_path / "m", "mistral", sliding_window=24)
    args = [
        "--target",
        str(dirs["target"]),
        "--draft",
        str(dirs["eagle"]),
        "--ks",
        "3",
        "--repeats",
        "1",
        "--limit",
        "2",
        "--reference",
        "none",
        "--dataset",
        "humaneval",
    ]
    loads = []
    real = BuiltinBackend.load
    monkeypatch.setattr(BuiltinBackend, "load", lambda self: loads.append(1) or real(self))
    result = CliRunner().invoke(cli, ["run", *args, "--max-tokens", "16", "--out", str(tmp_path / "long")])
    assert result.exit_code == 2 and not loads, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "sliding window of 24" in error[0], result.output
