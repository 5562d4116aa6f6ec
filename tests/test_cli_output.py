"""Output for scripts and for narrow pipes (issue 35): `run --json` prints the summary as JSON on
stdout (the table goes to stderr), and piped output honours COLUMNS."""

from __future__ import annotations

import json

from click.testing import CliRunner

from alcheck.cli.console import PIPED_WIDTH, make_console
from alcheck.cli.main import cli

RUN = ["run", "--method", "ngram", "--ks", "1,2", "--repeats", "1", "--limit", "2", "--max-tokens", "16"]


def test_run_json_prints_the_summary_on_stdout(tmp_path):
    out = tmp_path / "r"
    result = CliRunner().invoke(cli, [*RUN, "--reference", "none", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    saved = json.loads((out / "run.json").read_text())["summary"]
    assert printed == {"run": str(out), "summary": saved}
    assert [e["k"] for e in printed["summary"]] == [1, 2]
    assert "Acceptance length by K" in result.stderr  # the table is still shown, beside the data


def test_piped_output_honours_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "72")
    assert make_console().width == 72
    monkeypatch.setenv("COLUMNS", "not a number")
    assert make_console().width == PIPED_WIDTH  # piped (pytest captures)
    monkeypatch.delenv("COLUMNS")
    assert make_console().width == PIPED_WIDTH == 80


def test_piped_output_fits_80_columns_without_columns(tmp_path):
    """Issue 35: piped, tables were 110+ columns and captions reached 159. Messages stay one line."""
    demo = ["run", "--ks", "1,2", "--repeats", "1", "--limit", "2", "--max-tokens", "16"]  # its reference
    result = CliRunner().invoke(cli, [*demo, "--out", str(tmp_path / "r")])  # column: 109 wide at 160
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Acceptance length by K"))
    last = next(i for i, line in enumerate(lines) if line.startswith("device "))  # the line after it
    table = lines[first:last]
    assert any("│" in line for line in table) or any(line.startswith("K=") for line in table)
    wide = [line for line in table if len(line) > 80]
    assert not wide, wide[:3]
    assert len(lines[last]) > 80  # the device line is a message: one line, not broken at 80


def test_a_narrow_table_fits_its_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(cli, [*RUN, "--reference", "none", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not wide, wide[:3]
