"""One numbering of repeats (issue 35): everything a person reads counts from 1, the files keep the
0-based index they always stored (docs/reference/cli-help-notes.md)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from fake_runs import make_meta, make_questions, write_run_dir

from alcheck.cli.main import cli
from alcheck.cli.merge import cells_text
from alcheck.report.divergence import TurnDivergence
from alcheck.report.divergence_text import _turn_line
from alcheck.report.partial_runs import _named
from alcheck.report.repeat_numbers import cell_name, passes_text, shown


def test_the_stored_index_is_read_from_1():
    assert shown(0) == 1 and cell_name(3, 1) == "K=3 repeat 2"
    assert passes_text([(2, 1), (1, 1), (2, 0)]) == "K=1 repeat 2, K=2 repeats 2,1"


def test_merge_and_compare_name_repeats_from_1():
    assert cells_text([(1, 0), (2, 0), (2, 1)]) == "K=1 repeat 1, K=2 repeats 1,2"
    assert _named("A", [(3, 2)]) == "A's K=3 repeat 3"


def test_a_divergence_names_its_repeat_from_1():
    turn = TurnDivergence(2, 0, "q7", 1, "totals", identical=False, totals_a="x", totals_b="y")
    assert _turn_line(turn).startswith("question q7 turn 1 repeat 1: totals differ")


@pytest.fixture
def run_dir(tmp_path):
    questions = make_questions({1: 1.8, 2: 2.1}, n_questions=4, repeats=2, seed=3)
    return write_run_dir(tmp_path / "run", make_meta(questions), questions)


def test_a_pass_that_does_not_add_up_is_named_from_1_and_stored_from_0(run_dir, tmp_path):
    frame = pd.read_csv(run_dir / "questions.csv")
    assert sorted(set(frame["repeat"])) == [0, 1]  # the files: unchanged, counted from 0
    assert sorted({c["repeat"] for c in json.loads((run_dir / "run.json").read_text())["cells"]}) == [0, 1]
    last = frame[(frame.k == 2) & (frame.repeat == 1)].index[-1]
    frame.drop(index=last).to_csv(run_dir / "questions.csv", index=False)  # the stored (2, 1) loses a row
    result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 2, result.output
    assert "the K=2 repeat 2 pass does not add up" in " ".join(result.output.split()), result.output
