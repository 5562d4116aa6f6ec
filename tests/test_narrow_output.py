"""Readable at COLUMNS=80 (issue 24): no number cut to "[-0.0…", every reference column shown,
--help summaries whole, and a `not comparable` reference not drawn like the others."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_runs import make_run, reference
from rich.console import Console

from alcheck.cli.main import cli
from alcheck.report.table import fmt, fmt_ci, fmt_signed

WIDTH = 80


def narrow() -> Console:
    return Console(width=WIDTH, record=True, force_terminal=False, color_system=None)


def lines_of(console: Console) -> list[str]:
    text = console.export_text()
    assert "…" not in text.replace("P(a ≥ 2) / …", ""), text  # that one is the column's own header
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= WIDTH for line in lines)
    return lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("narrow")
    a = make_run(root / "a", {1: 1.71, 2: 2.10, 3: 2.30}, n_questions=20, repeats=2, seed=1)
    b = make_run(root / "b", {1: 1.65, 2: 2.02, 3: 2.21}, n_questions=20, repeats=2, seed=2)
    return a, b


def test_compare_keeps_every_number_whole(runs):
    from alcheck.report.compare import compare_runs, print_compare

    result = compare_runs(*runs)
    console = narrow()
    print_compare(result, console)
    text = " ".join(lines_of(console))
    for row in result.rows:
        for number in (
            fmt(row.al_a),
            fmt(row.al_b),
            fmt_signed(row.diff),
            fmt_ci(row.ci95),
            fmt_ci(row.ci_questions),
        ):
            assert number in text, (number, text)
        assert row.verdict in text


def test_gate_keeps_every_number_whole(runs):
    from alcheck.report.gate import gate
    from alcheck.report.gate_render import print_gate

    result = gate(runs[1], runs[0])
    console = narrow()
    print_gate(result, console, step_summary=False)
    text = " ".join(lines_of(console))
    for row in result.rows:
        for number in (fmt(row.al), fmt(row.baseline), fmt_signed(row.diff), fmt_ci(row.ci95)):
            assert number in text, (number, text)
        assert f"result: {row.status}" in text


def test_ablation_table_keeps_every_number_whole():
    from alcheck.report.ablation import ablation_rich_table
    from alcheck.report.table import fitted

    row = {
        "k": 3,
        "al_with": 2.4567,
        "al_without": 2.4012,
        "al_diff": 0.0555,
        "al_diff_ci95": [-0.0123, 0.1234],
        "verdict": "no detectable change",
        "lossless_rate_with": 1.0,
        "lossless_rate_without": 0.975,
        "slot_violations_with": 0,
        "slot_violations_without": 143,
    }
    console = narrow()
    console.print(fitted(console, ablation_rich_table({"summary": [row]})))
    text = " ".join(lines_of(console))
    for number in ("2.46", "2.40", "+0.06", "[-0.01, 0.12]", "0.97", "143", "no detectable change"):
        assert number in text, (number, text)


def test_run_table_with_references_keeps_every_column(runs):
    from alcheck.report.run_io import load_run
    from alcheck.report.table import fitted, rich_table

    meta = load_run(runs[0]).meta
    meta["references"] = [
        reference("seed-thread", {1: 1.71, 2: 2.13, 3: 2.30}),
        reference("other-protocol", {1: 1.80, 2: 2.20}, protocol="eagle-repo"),
    ]
    console = narrow()
    console.print(fitted(console, rich_table(meta)))
    text = " ".join(lines_of(console))
    assert text.count("seed-thread value (diff) verdict") == 3 and "other-protocol" in text


def test_references_at_80_columns_show_every_field():
    from alcheck.cli.references import references_table
    from alcheck.references.tables import load_references
    from alcheck.report.table import fitted

    refs = load_references()
    console = narrow()
    console.print(fitted(console, references_table(refs)))
    lines = lines_of(console)
    text = " ".join(lines)
    for ref in refs:
        assert any(line.strip() == ref.name for line in lines), ref.name
        for k in ref.ks:
            assert f"K={k}: " in text
    assert text.count("target: ") == len(refs) and text.count("protocol: ") == len(refs)


@pytest.mark.parametrize("args", [["--help"], ["ablate", "--help"]])
def test_help_summaries_are_whole_at_80_columns(args):
    result = CliRunner().invoke(cli, args, terminal_width=WIDTH, env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0
    commands = result.output.split("─ Commands ─")[1]  # rich-click's panel (issue 50: every help alike)
    assert "..." not in commands and "…" not in commands, commands
    assert all(len(line) <= WIDTH for line in result.output.splitlines())


def test_plot_draws_a_not_comparable_reference_apart(runs):
    from alcheck.report.plots import al_vs_k_figure
    from alcheck.report.run_io import load_run

    meta = load_run(runs[0]).meta
    same = reference(
        "same",
        {1: 1.70, 2: 2.1},
        target=meta["config"]["target"],
        draft=meta["config"]["draft"],
        max_tokens=meta["config"]["max_tokens"],
        limit=meta["config"].get("limit"),
    )
    other = dict(same, name="other", max_tokens=4096)
    meta["references"] = [same, other]
    lines = {line.get_label(): line for line in al_vs_k_figure(meta).axes[0].get_lines()}
    assert lines["same"].get_linestyle() == "-"
    (label,) = [name for name in lines if name.startswith("other")]
    assert "not comparable" in label and lines[label].get_linestyle() == ":"
    assert json.dumps(meta)  # the figure did not change the meta it drew
