"""One question (and one repeat) shows neither how AL varies between prompts nor run-to-run noise:
no confidence interval (not a zero-width one), "n/a" in the tables, and verdicts that say "too few
questions to judge" instead of a certainty the data does not have."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from fake_runs import make_questions, make_run, reference

from alcheck.cli.main import cli
from alcheck.metrics import verdict as V
from alcheck.metrics.noise import summary_noise
from alcheck.metrics.stats import paired_bootstrap, pooled_al_ci, ratio_ci
from alcheck.report.compare import compare_runs
from alcheck.report.gate import gate


def test_one_question_has_no_interval_however_many_repeats():
    assert all(math.isnan(x) for x in ratio_ci(np.array([30.0]), np.array([10.0])))
    questions = make_questions({3: 2.3}, n_questions=1, repeats=3)
    assert all(math.isnan(x) for x in pooled_al_ci(questions.query("k == 3")))
    assert paired_bootstrap(questions, questions).ci95 is None
    two = make_questions({3: 2.3}, n_questions=2, repeats=1)
    lo, hi = pooled_al_ci(two)
    assert lo < hi  # two questions: an interval again


def test_run_limit_1_reports_no_interval(pair_args, tmp_path):
    out = tmp_path / "one"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--limit",
            "1",
            "--repeats",
            "1",
            "--ks",
            "2",
            "--max-tokens",
            "12",
            "--reference",
            "none",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    [entry] = json.loads((out / "run.json").read_text())["summary"]
    assert entry["al_ci95"] == [None, None] and entry["n_questions"] == 1
    row = next(line for line in result.output.splitlines() if line.startswith("│ 2 "))
    assert "± n/a" in row and row.count("n/a") == 2 and "± 0.00" not in row and "[" not in row
    report = CliRunner().invoke(cli, ["report", str(out)], catch_exceptions=False)
    assert report.exit_code == 0, report.output
    text = (out / "report.md").read_text()
    assert "| 2 | " in text and "± n/a | n/a |" in text
    assert "stored vs" not in text  # the stored summary agrees with the recomputed one


def one_question_summary(ci, **extra) -> dict:
    """A run.json without questions.csv: one question, one repeat, no device or dtype that declares
    it deterministic."""
    return {
        "schema": "alcheck.run/1",
        "status": "complete",
        "config": {"protocol": "vllm-example"},
        "summary": [
            {
                "k": 3,
                "al_mean": 2.30,
                "al_std": 0.0,
                "al_ci95": ci,
                "al_repeats": [2.30],
                "per_position": [],
                "tokens_per_s": None,
                **extra,
            }
        ],
    }


def test_a_zero_width_interval_is_no_noise_estimate():
    """Files written before this rule stored [x, x] for one question; read as a certain se = 0,
    the gate called any drop beyond the tolerance a credible REGRESSION."""
    assert summary_noise({"al_repeats": [2.3], "al_ci95": [2.3, 2.3]}) is None
    old = gate(one_question_summary([2.30, 2.30]), reference("r", {3: 2.50}))
    assert old.passed and old.rows[0].noise is None
    new = gate(one_question_summary([None, None], n_questions=1), reference("r", {3: 2.50}))
    [row] = new.rows
    assert new.passed and row.basis == V.TOO_FEW_QUESTIONS and not row.credible
    assert any(V.TOO_FEW_QUESTIONS in w and "K=3" in w for w in new.warnings)


def test_verdicts_say_too_few_questions():
    [undecided] = V.decide([-0.2], [None])
    assert V.reference_verdict(undecided, n_questions=1) == V.TOO_FEW_QUESTIONS
    assert V.compare_verdict(undecided, n_questions=1) == V.TOO_FEW_QUESTIONS
    assert V.reference_verdict(undecided) == V.NO_NOISE  # count unknown: as before
    assert V.reference_verdict(undecided, n_questions=5) == V.NO_NOISE


def test_compare_of_one_question_runs(tmp_path):
    config = {"temperature": 0.7}  # not deterministic by its settings: one repeat shows no noise
    a = make_run(tmp_path / "a", {2: 2.0}, n_questions=1, repeats=1, seed=1, config=config)
    b = make_run(tmp_path / "b", {2: 2.6}, n_questions=1, repeats=1, seed=2, config=config)
    [row] = compare_runs(a, b).rows
    assert row.verdict == V.TOO_FEW_QUESTIONS and row.n_questions == 1
    assert row.ci95 is None and row.ci_questions is None
    shown = CliRunner().invoke(cli, ["compare", str(a), str(b)], catch_exceptions=False).output
    assert V.TOO_FEW_QUESTIONS in shown


@pytest.mark.parametrize("repeats", [1, 3])
def test_the_run_table_shows_n_a_for_what_one_question_cannot_give(repeats):
    from alcheck.report.table import fmt_ci, fmt_mean_std

    assert fmt_ci([None, None]) == "n/a"
    assert fmt_mean_std(2.3, 0.0, repeats) == ("2.30 ± n/a" if repeats == 1 else "2.30 ± 0.00")
