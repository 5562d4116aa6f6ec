"""Issue 50's POOR cases in report and compare output: a long zero tail of per-position rates, a
spread that is float rounding, image links with spaces, and a leaderboard folder passed as a run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_runs import make_run

from alcheck.cli.main import cli
from alcheck.report.table import fmt_mean_std, fmt_per_position, fmt_signed


@pytest.fixture(scope="module")
def long_k(tmp_path_factory):
    """Two runs at K=5 and K=100: no step accepts more than a couple of dozen drafts."""
    root = tmp_path_factory.mktemp("k100")
    a = make_run(root / "a", {5: 2.5, 100: 2.6}, n_questions=20, repeats=2)
    b = make_run(root / "b", {5: 2.5, 100: 2.7}, n_questions=20, repeats=2, seed=3)
    return a, b


def test_rounding_noise_prints_as_zero_and_a_real_small_spread_keeps_its_size():
    assert fmt_mean_std(2.5, 5e-16, repeats=3) == "2.50 ± 0.00"
    assert fmt_mean_std(2.5, 0.0039, repeats=3) == "2.50 ± 0.004"
    assert fmt_signed(-5e-16) == "+0.00" and fmt_signed(5e-16, 3) == "+0.000"
    assert fmt_signed(-0.001) == "-0.001"


def test_a_long_zero_tail_of_per_position_rates_is_named_not_listed():
    assert fmt_per_position([0.6, 0.3] + [0.0] * 98) == "0.60 / 0.30, then 0.00 to position 100"
    assert fmt_per_position([0.0] * 100) == "0.00 to position 100"
    assert fmt_per_position([0.6, 0.3, 0.0, 0.0]) == "0.60 / 0.30 / 0.00 / 0.00"  # a short tail stays


def test_report_of_k100_lists_the_positions_that_print_as_more_than_zero(long_k, tmp_path):
    run, _ = long_k
    out = tmp_path / "rep ü" / "my report.md"
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    per_k = json.loads((run / "run.json").read_text())["summary"][1]["per_position"]
    shown = max(i for i, v in enumerate(per_k) if round(v, 2) > 0) + 1
    assert f"P(a ≥ {shown})" in text and f"P(a ≥ {shown + 1}) |" not in text
    assert f"P(a ≥ {shown + 1}) to P(a ≥ 100) print as 0.00 at every K and are not listed" in text
    assert "then 0.00 to position 100" in text  # the results table's cell
    # image links percent-encoded: CommonMark ends a bare link destination at the space
    assert "![AL vs K](my%20report-al-vs-k.png)" in text
    assert "![Per-position acceptance](my%20report-per-position.png)" in text
    assert (out.parent / "my report-al-vs-k.png").is_file()


def test_compare_of_k100_leaves_out_positions_no_step_reached(long_k):
    a, b = long_k
    result = CliRunner().invoke(cli, ["compare", str(a), str(b)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "reached by no step in either run" in ln)
    first = int(line.split("positions ")[1].split("–")[0])
    assert line == f"K=100: positions {first}–100 were reached by no step in either run: not listed"
    assert f"│ 100 │ {first:>8} │" not in result.output and f"│ 100 │ {first - 1:>8} │" in result.output
    data = json.loads(CliRunner().invoke(cli, ["compare", str(a), str(b), "--json"]).output)
    assert len(data["rows"][1]["per_position"]) == 100  # --json keeps every position


@pytest.mark.parametrize("command", [["report"], ["compare", "OTHER"], ["gate", "--baseline", "OTHER"]])
def test_a_leaderboard_folder_names_its_entries(long_k, tmp_path, command):
    import shutil

    board = tmp_path / "board"
    board.mkdir()
    (board / "leaderboard.json").write_text("{}")
    for name in ("eagle", "noisy"):
        shutil.copytree(long_k[0], board / name)
    args = [str(long_k[1]) if word == "OTHER" else word for word in command]
    result = CliRunner().invoke(cli, [*args[:1], str(board), *args[1:]])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"Error: no run.json in {board}: it is a leaderboard, whose entries are runs: pass one of "
        f"{board / 'eagle'}, {board / 'noisy'}"
    )
