"""Warnings about the sweep itself (issue 35): uneven pass speeds and implausibly large sweeps."""

from __future__ import annotations

from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.report.pass_speed import large_sweep_note, uneven_speed_note


def cells(*walls):
    return {
        "cells": [{"k": 1, "repeat": i, "wall_s": w, "generated_tokens": 600} for i, w in enumerate(walls)]
    }


def test_a_pass_far_from_the_median_speed_is_named():
    assert uneven_speed_note(cells(1.0, 1.1, 0.9)) == ""
    note = uneven_speed_note(cells(1.0, 1.1, 0.9, 10.0))  # 60 tokens/s against about 600
    assert "K=1 repeat 4 at 60 tokens/s against a median of 573" in note and "AL does not depend" in note
    assert uneven_speed_note(cells(1.0, 10.0)) == ""  # two passes: no median to speak of


def test_a_large_sweep_is_named():
    assert large_sweep_note(list(range(1, 6)), 3, 1) == ""
    note = large_sweep_note(list(range(1, 101)), 4, 1)
    assert "400 passes (100 K x 4 repeats x 1 datasets)" in note and "K up to 100" in note


def test_run_warns_before_a_large_sweep_starts(tmp_path):
    args = ["run", "--method", "ngram", "--ks", "17", "--repeats", "1", "--limit", "1", "--max-tokens", "2"]
    result = CliRunner().invoke(cli, [*args, "--reference", "none", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert result.output.index("a large sweep: K up to 17") < result.output.index("saved run.json")
