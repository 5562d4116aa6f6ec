"""`alcheck run --draft A --draft B` (issue 31): every head measured, one run each, ranked.

The oracle is a separate `alcheck run --draft B`: each entry's folder must hold the same rows and
its leaderboard AL the same number. Before this, a repeated --draft silently measured only the last.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.sweep.entries import parse_entries, step_of
from tests.conftest import interrupt_at_cell

BASE = ["--ks", "1,2", "--repeats", "2", "--limit", "4", "--max-tokens", "16", "--block-size", "4"]
BASE += ["--reference", "none"]


def invoke(args, catch=False):
    return CliRunner().invoke(cli, args, catch_exceptions=catch)


@pytest.fixture(scope="module")
def heads(pair_dirs, tmp_path_factory):
    """Two heads for the copy-layer target: the exact copy (step-20) and a noisy one (step-3)."""
    from alcheck.testing.tiny import make_tiny_eagle

    root = tmp_path_factory.mktemp("heads")
    good = make_tiny_eagle(root / "step-20", pair_dirs[0], copy_target_layer=0, noise=0.0)
    noisy = make_tiny_eagle(root / "step-3", pair_dirs[0], copy_target_layer=0, noise=0.3)
    return good, noisy


@pytest.fixture(scope="module")
def separate(pair_dirs, heads, tmp_path_factory):
    """Each head measured on its own."""
    out = {}
    for head in heads:
        out[head.name] = tmp_path_factory.mktemp("sep") / head.name
        result = invoke(
            ["run", "--target", str(pair_dirs[0]), "--draft", str(head), *BASE, "--out", str(out[head.name])]
        )
        assert result.exit_code == 0, result.output
    return out


def same_rows(run: Path, oracle: Path) -> bool:
    return (run / "questions.csv").read_bytes() == (oracle / "questions.csv").read_bytes()


def board(root: Path) -> list[dict]:
    with open(root / "leaderboard.csv") as f:
        return list(csv.DictReader(f))


def test_repeated_draft_measures_every_head_and_ranks_them(pair_dirs, heads, separate, tmp_path):
    out = tmp_path / "board"
    args = ["run", "--target", str(pair_dirs[0]), *BASE, "--out", str(out)]
    result = invoke([*args, "--draft", str(heads[1]), "--draft", str(heads[0])])
    assert result.exit_code == 0, result.output
    for head in heads:  # one run per head, equal to its separate run
        assert (out / head.name / "questions.csv").read_bytes() == (
            separate[head.name] / "questions.csv"
        ).read_bytes()
    rows = board(out)
    assert [(r["k"], r["rank"]) for r in rows] == [("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")]
    for row in rows:
        meta = json.loads((separate[row["entry"]] / "run.json").read_text())
        al = next(s["al_mean"] for s in meta["summary"] if s["k"] == int(row["k"]))
        assert float(row["al"]) == pytest.approx(al, abs=0, rel=1e-12)
    assert [r["entry"] for r in rows if r["rank"] == "1"] == ["step-20", "step-20"]  # the exact copy wins
    assert all(r["verdict"] == "best" for r in rows if r["rank"] == "1")
    assert all(
        r["verdict"] and r["diff_vs_best"] and float(r["diff_vs_best"]) < 0 for r in rows if r["rank"] == "2"
    )
    assert "| K |" in (out / "leaderboard.md").read_text()
    assert (out / "leaderboard.png").is_file()  # the names carry steps


def test_a_glob_entry_and_resume_per_head(pair_dirs, heads, separate, tmp_path, monkeypatch):
    out = tmp_path / "glob"
    pattern = str(heads[0].parent / "step-*")
    interrupt_at_cell(monkeypatch, 6)  # the second head (step-20, by step order) stops after 1 cell
    result = invoke(["run", "--target", str(pair_dirs[0]), *BASE, "--out", str(out), "--draft", pattern])
    assert result.exit_code == 130, result.output
    assert json.loads((out / "step-3" / "run.json").read_text())["status"] == "complete"
    assert len(json.loads((out / "step-20" / "run.json").read_text())["cells"]) == 1
    assert not (out / "leaderboard.csv").exists()
    monkeypatch.undo()
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert "step-3: already complete" in result.output
    for head in heads:
        assert (out / head.name / "questions.csv").read_bytes() == (
            separate[head.name] / "questions.csv"
        ).read_bytes()
    assert [r["entry"] for r in board(out)][:2] == ["step-20", "step-3"]


def test_bad_entries_exit_2_in_one_line_and_write_nothing(pair_dirs, heads, tmp_path):
    out = tmp_path / "bad"
    base = ["run", "--target", str(pair_dirs[0]), *BASE, "--out", str(out)]
    for entries, needle in [
        (["--draft", str(heads[0]), "--draft", str(tmp_path / "none-*")], "the pattern matches nothing"),
        (["--draft", str(heads[0]), "--draft", f"eagel={heads[1]}"], "'eagel' is not a method"),
        (["--draft", str(heads[0]), "--draft", str(heads[0])], "is given twice"),
        (["--draft", str(heads[0]), "--draft", str(tmp_path / "missing")], "missing"),
        (["--draft", str(heads[0]), "--draft", "ngram"], "write ngram= for a method with no checkpoint"),
    ]:
        result = invoke([*base, *entries], catch=True)
        assert result.exit_code == 2, result.output
        assert needle in result.output and len(result.output.strip().splitlines()) == 1, result.output
        assert not out.exists()


def test_a_repeated_draft_elsewhere_is_an_error(pair_dirs, heads, tmp_path):
    result = invoke(
        [
            "ablate",
            "kv-lookahead",
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(heads[0]),
            "--draft",
            str(heads[1]),
        ],
        catch=True,
    )
    assert result.exit_code == 2, result.output
    assert "--draft is given 2 times" in result.output


def test_entry_syntax():
    methods = ("auto", "eagle", "ngram")
    entries = parse_entries(["ngram=", "eagle=a/step-2", "b/step-2"], "auto", methods)
    assert [(e.name, e.draft, e.method) for e in entries] == [
        ("ngram", "", "ngram"),
        ("step-2", "a/step-2", "eagle"),
        ("step-2-2", "b/step-2", "auto"),
    ]
    assert step_of("ckpt-epoch3-step1200") == 1200 and step_of("final") is None
