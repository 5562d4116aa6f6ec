"""`alcheck run --runner static` (issue 22): the same questions.csv and traces.csv as the paged runner, on one
device and over `--devices cpu,cpu` workers (target-only passes included, --check-lossless), and a
one-line refusal of what only the eager runner does."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import invoke_run

from alcheck.cli.main import cli

BASE = [
    "--ks",
    "1,3",
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


@pytest.fixture(scope="module")
def paged_run(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("static-cli") / "paged"
    result = invoke_run([*pair_args, *BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("devices", [[], ["--devices", "cpu,cpu"], ["--tensor-parallel-size", "2"]])
def test_runner_static_writes_the_paged_runners_rows(pair_args, paged_run, tmp_path, devices):
    out = tmp_path / "static"
    result = invoke_run([*pair_args, *BASE, "--out", str(out), "--runner", "static", *devices])
    assert result.exit_code == 0, result.output
    for name in ("questions.csv", "traces.csv"):  # traces: every step's accepted count, in order
        assert (out / name).read_bytes() == (paged_run / name).read_bytes(), name
    meta = json.loads((out / "run.json").read_text())
    assert meta["config"]["runner"] == "static"
    assert all(s["lossless_rate"] == 1.0 for s in meta["summary"])


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--audit-slots"], "--audit-slots needs --runner paged"),
        (["--no-kv-lookahead"], "--no-kv-lookahead needs --runner paged"),
    ],
)
def test_what_only_the_eager_runner_does_is_refused_in_one_line(pair_args, tmp_path, args, needle):
    result = invoke_run(
        [*pair_args, "--ks", "1", "--limit", "1", "--out", str(tmp_path / "o"), "--runner", "static", *args]
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and needle in result.output, result.output


def test_the_ablation_refuses_the_static_runner(pair_args, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "ablate",
            "kv-lookahead",
            *pair_args,
            "--ks",
            "1",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "a"),
            "--runner",
            "static",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 2 and "needs the paged runner" in result.output, result.output
