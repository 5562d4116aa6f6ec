"""report, compare and gate refuse a questions.csv whose row's accepted is not the sum of its
accepted_per_pos (an edited or damaged file), naming the file and line; resume has its own check."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli

BASELINE = paths.REPO_ROOT / "results" / "baselines" / "ci-demo"


@pytest.fixture
def edited(tmp_path):
    out = shutil.copytree(BASELINE, tmp_path / "run")
    lines = (out / "questions.csv").read_text().splitlines(keepends=True)
    frame = pd.read_csv(out / "questions.csv", dtype=str)
    col = list(frame.columns).index("accepted")
    cells = lines[3].split(",")
    cells[col] = str(int(cells[col]) + 1)
    lines[3] = ",".join(cells)
    (out / "questions.csv").write_text("".join(lines))
    return out


@pytest.mark.parametrize(
    "command", [["report"], ["gate", "--baseline", str(BASELINE)], ["compare", str(BASELINE)]]
)
def test_a_row_that_does_not_add_up_is_refused(edited, tmp_path, command):
    args = [command[0], str(edited), *command[1:]]
    if command[0] == "report":
        args += ["-o", str(tmp_path / "r.md")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert (
        "questions.csv line 4: accepted" in result.output
        and "not the sum of accepted_per_pos" in result.output
    )
