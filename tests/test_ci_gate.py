"""The project's own AL gate (issue 5): the demo pair on an MT-Bench subset against the committed
baseline passes, and a deliberately broken runner (no draft step-0 re-run) fails it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.runner.proposers.eagle import EagleProposer

BASELINE = paths.REPO_ROOT / "results" / "baselines" / "ci-demo"


def ci_gate_args() -> list[str]:
    """The exact arguments `make ci-gate` uses, read from the Makefile."""
    for line in (paths.REPO_ROOT / "Makefile").read_text().splitlines():
        if line.startswith("CI_GATE_ARGS"):
            return shlex.split(line.split("=", 1)[1])
    raise AssertionError("CI_GATE_ARGS missing from the Makefile")


pytestmark = pytest.mark.skipif(
    not (BASELINE / "run.json").is_file() or not (paths.DEMO_TARGET_DIR / "config.json").is_file(),
    reason="demo pair or CI baseline not built",
)


def gate_run(tmp_path: Path):
    args = ["run", *ci_gate_args(), "--out", str(tmp_path / "run"), "--gate", str(BASELINE)]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_gate_passes_on_the_real_runner(tmp_path):
    result = gate_run(tmp_path)
    assert result.exit_code == 0, result.output


def test_gate_fails_when_draft_step0_rerun_is_dropped(tmp_path, monkeypatch):
    real = EagleProposer.propose

    def no_rerun(self, runner, reqs, inputs, features, starts, k):
        if any(starts):  # decode steps: feed only the newest token, as vLLM V0 did (issue #14649)
            ends = [len(x) for x in inputs]
            rows = [sum(ends[: i + 1]) - 1 for i in range(len(ends))]
            inputs = [x[-1:] for x in inputs]
            features = features[rows]
            starts = [s + n - 1 for s, n in zip(starts, ends)]
        return real(self, runner, reqs, inputs, features, starts, k)

    monkeypatch.setattr(EagleProposer, "propose", no_rerun)
    result = gate_run(tmp_path)
    assert result.exit_code == 1, result.output
    assert "regress" in result.output.lower() or "fail" in result.output.lower()
