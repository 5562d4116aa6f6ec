"""run.json / questions.csv loading, the results table, and `alcheck report`."""

import json
import re

import pytest
from click.testing import CliRunner
from fake_runs import make_meta, make_questions, make_run, reference, write_run_dir
from rich.console import Console

from alcheck.cli.main import cli
from alcheck.errors import AlcheckError
from alcheck.metrics.acceptance import summarize
from alcheck.report.run_io import load_run, write_run
from alcheck.report.table import comparison_rows, markdown_table, rich_table

REFS = [
    reference("eagle-repo-row", {1: 1.71, 2: 2.13, 3: 2.32}, protocol="eagle-repo"),
    reference("vllm-v1-row", {1: 1.71, 2: 2.09, 3: 2.30}),
    reference("ci-pin", {3: 2.296}),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(
        tmp_path_factory.mktemp("runs") / "r",
        {1: 1.71, 2: 2.10, 3: 2.30},
        references=REFS,
        turns=2,
        n_questions=40,
        repeats=2,
        slot_violations=0,
    )


def test_load_run_from_dir_and_file(run_dir):
    run = load_run(run_dir)
    assert run.dir == run_dir and run.ks == [1, 2, 3]
    assert len(run.questions) == 3 * 2 * 40 * 2
    assert load_run(run_dir / "run.json").meta == run.meta
    # every summary number is recomputable from questions.csv
    assert summarize(run.questions, run.meta["cells"], n_boot=500) == run.summary


def _one_line_error(path, match, **kwargs):
    with pytest.raises(AlcheckError, match=match) as info:
        load_run(path, **kwargs)
    assert info.value.exit_code == 2
    assert "\n" not in info.value.message and ": " in info.value.message


def test_load_run_bad_inputs(tmp_path, run_dir):
    _one_line_error(tmp_path / "nope", "run not found")
    _one_line_error(tmp_path, "no run.json")
    bad = tmp_path / "corrupt"
    bad.mkdir()
    (bad / "run.json").write_text('{"schema": "alcheck.run/1", ')
    _one_line_error(bad, "not valid JSON")
    (bad / "run.json").write_text('{"schema": "other/2", "config": {}}')
    _one_line_error(bad, "expected 'alcheck.run/1'")
    (bad / "run.json").write_text("[1, 2]")
    _one_line_error(bad, "JSON object")
    (bad / "run.json").write_text('{"schema": "alcheck.run/1", "config": {}, "summary": {}}')
    _one_line_error(bad, "`summary` must be a JSON array")
    meta = json.loads((run_dir / "run.json").read_text())
    (bad / "run.json").write_text(json.dumps(meta))
    csv = (run_dir / "questions.csv").read_text().splitlines()
    (bad / "questions.csv").write_text(
        "\n".join([csv[0].replace(",accepted_per_pos", "")] + [line.rsplit(",", 1)[0] for line in csv[1:]])
    )
    _one_line_error(bad, "lacks columns accepted_per_pos")
    # header, two good rows, then a bad one: line 4 of the file (ending in a newline, or it reads as torn)
    (bad / "questions.csv").write_text("\n".join(csv[:3] + ["1,0,81,1,writing,5,5,many,5,1,1"]) + "\n")
    _one_line_error(bad, "line 4: `steps` is not an integer")
    (bad / "questions.csv").write_text(csv[0] + "\n1,0,81,1,writing,5,5,4,4,3,3;0\n")
    _one_line_error(bad, "more than K=1")


def test_partial_run_without_questions(tmp_path, run_dir):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["status"] = "partial"
    write_run_dir(tmp_path, meta, None)
    run = load_run(tmp_path)
    assert run.questions.empty and run.ks == [1, 2, 3]
    _one_line_error(tmp_path, "no questions.csv", require_questions=True)


def test_write_run_roundtrip(tmp_path):
    q = make_questions({2: 2.1}, n_questions=5, repeats=1, lossless=True)
    meta = make_meta(q)
    write_run(tmp_path, meta, q)
    run = load_run(tmp_path)
    assert list(run.questions.columns)[-2:] == ["identical", "first_diff"]
    assert run.summary[0]["lossless_rate"] == 1.0
    assert summarize(run.questions, meta["cells"], n_boot=500) == meta["summary"]


META = {
    "schema": "alcheck.run/1",
    "config": {"protocol": "vllm-example"},
    "summary": [
        {
            "k": 2,
            "al_mean": 2.10,
            "al_std": 0.005,
            "al_ci95": [2.06, 2.14],
            "al_repeats": [2.095, 2.105],
            "per_position": [0.7, 0.4],
            "tokens_per_s": 123.456,
        },
        {
            "k": 3,
            "al_mean": 2.30,
            "al_std": 0.01,
            "al_ci95": [2.25, 2.35],
            "al_repeats": [2.29, 2.31],
            "per_position": [0.7, 0.4, 0.2],
            "tokens_per_s": None,
        },
    ],
    "references": [
        reference("other-protocol", {2: 2.20, 3: 2.45}, protocol="eagle-repo"),
        reference("same", {2: 2.11, 3: 2.10}),
        reference("k3-only", {3: 2.31}),
    ],
}


def test_comparison_rows_values_diffs_verdicts():
    rows = comparison_rows(META)
    assert [r["k"] for r in rows] == [2, 3]
    k2, k3 = rows
    other, same, only = k3["references"]
    assert other["value"] == 2.45 and other["diff"] == pytest.approx(-0.15)
    # measured under another protocol: the difference is shown, but no verdict is given
    assert other["verdict"] == "not comparable" and other["protocol_mismatch"]
    assert same["verdict"] == "above" and same["diff"] == pytest.approx(0.20)
    assert only["verdict"] == "within noise" and not only["protocol_mismatch"]
    assert k2["references"][0]["verdict"] == "not comparable"  # other-protocol again
    assert k2["references"][1]["verdict"] == "within noise"
    assert k2["references"][2] == {**k2["references"][2], "value": None, "diff": None, "verdict": None}


def test_rich_table_labels_warning_and_dash():
    console = Console(record=True, width=250)
    console.print(rich_table(META))
    text = console.export_text()
    assert "AL = tokens per verification step" in text and "bonus" in text
    assert "⚠ other-protocol" in text
    assert "other-protocol is not directly comparable" in text
    assert "protocol 'eagle-repo' (this run: 'vllm-example')" in text
    assert "2.45 (-0.15) not comparable" in text and "2.10 (+0.20) above" in text
    assert "2.10 ± 0.01" in text or "2.10 ± 0.00" in text
    assert "123.5" in text
    k2_line = next(line for line in text.splitlines() if line.startswith("│ 2 "))
    assert "–" in k2_line  # k3-only has no K=2 value


def _check_gfm_tables(text):
    """Every table: header, separator and rows have the same number of cells."""
    blocks = re.findall(r"((?:^\|.*\|\n)+)", text, flags=re.M)
    assert blocks
    for block in blocks:
        lines = block.strip().splitlines()
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
        assert len(widths) == 1, block
        assert re.fullmatch(r"\|( ?-+:? \|)+", lines[1].replace("---:", "---")), lines[1]


def test_markdown_table():
    text = markdown_table(META)
    _check_gfm_tables(text)
    assert "| 3 | 2.30 ± 0.01 | [2.25, 2.35] | 0.70 / 0.40 / 0.20 | – |" in text
    assert "⚠ other-protocol" in text and "| – |" in text


def test_report_cli(run_dir, tmp_path):
    out = tmp_path / "sub" / "rep.md"
    result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    _check_gfm_tables(text)
    for png in ("rep-al-vs-k.png", "rep-per-position.png"):
        assert (tmp_path / "sub" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in text
    for needle in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "`vllm-example`",
        "`float16`",
        "torch 2.5.1",
        "2026-11-29",
        "## Per-position acceptance",
        "## AL per category",
        "| coding |",
        "## AL per turn",
        "⚠ eagle-repo-row",
    ):
        assert needle in text
    run = load_run(run_dir)
    k3 = run.summary_for(3)
    assert f"| 3 | {k3['al_mean']:.2f} ± {k3['al_std']:.2f} |" in text
    turn2 = run.questions[(run.questions.k == 3) & (run.questions.turn == 2)]
    al_turn2 = (turn2.steps.sum() + turn2.accepted.sum()) / turn2.steps.sum()
    assert re.search(rf"\| 2 \| 40 \| [\d.]+ \| [\d.]+ \| {al_turn2:.2f} \|", text)
    # default output: RUN_DIR/report.md
    result = CliRunner().invoke(cli, ["report", str(run_dir)])
    assert result.exit_code == 0 and (run_dir / "report.md").is_file()


def test_report_partial_run_and_bad_input(run_dir, tmp_path):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["status"] = "partial"
    write_run_dir(tmp_path / "p", meta, None)
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "p" / "report.md").read_text()
    assert "**partial**" in text and "No per-question data" in text
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "run not found" in result.output


# -- issue 9: the report recomputes, refuses unwritable outputs, thins large-K ticks ----------------


def test_report_recomputes_the_summary_and_flags_a_tampered_one(run_dir, tmp_path):
    import shutil

    clean = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "clean.md")])
    assert clean.exit_code == 0 and "warning" not in clean.output
    assert "agrees with run.json's stored summary" in (tmp_path / "clean.md").read_text()

    bad = shutil.copytree(run_dir, tmp_path / "bad")
    meta = json.loads((bad / "run.json").read_text())
    truth = meta["summary"][1]["al_mean"]
    meta["summary"][1]["al_mean"] = 99.0
    (bad / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["report", str(bad)])
    assert result.exit_code == 0, result.output
    warning = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "K=2 al_mean 99.0 stored vs" in warning[0]
    text = (bad / "report.md").read_text()
    assert "**disagrees** with questions.csv" in text
    assert f"| 2 | {truth:.2f} ±" in text and "99.00" not in text  # the table shows the recomputed AL


def test_report_of_a_real_run_reproduces_its_stored_summary_exactly(pair_args, tmp_path):
    from alcheck.report.markdown import verified_run

    out = tmp_path / "real"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "1-2",
            "--repeats",
            "2",
            "--limit",
            "3",
            "--max-tokens",
            "8",
            "--block-size",
            "4",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    run = load_run(out)
    verified, problems = verified_run(run)
    assert problems == [] and verified.summary == run.summary


def test_report_to_an_unwritable_place_is_one_line(run_dir, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for target in (blocker / "report.md", blocker / "sub" / "report.md"):
        result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(target)])
        assert result.exit_code == 2, result.output
        assert "cannot write the report" in result.output and len(result.output.strip().splitlines()) == 1


def test_ablation_report_to_an_unwritable_place_is_one_line(tmp_path):
    abl = tmp_path / "abl"
    abl.mkdir()
    (abl / "ablation.json").write_text(json.dumps({"config": {}, "summary": []}))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = CliRunner().invoke(cli, ["report", str(abl), "-o", str(blocker / "r.md")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output


def test_per_position_plot_thins_ticks_for_large_k(tmp_path):
    from alcheck.report.plots import MAX_TICKS, per_position_figure, plot_per_position

    meta = {"summary": [{"k": 100, "al_mean": 5.0, "per_position": [0.95**i for i in range(1, 101)]}]}
    fig = per_position_figure(meta)
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert 2 <= len(labels) <= MAX_TICKS + 1
    assert all(float(x).is_integer() for x in ax.get_xticks())
    small = per_position_figure({"summary": [{"k": 3, "per_position": [0.7, 0.4, 0.2]}]})
    assert list(small.axes[0].get_xticks()) == [1, 2, 3]  # small K keeps every position
    assert plot_per_position(meta, tmp_path / "pp.png").read_bytes()[:4] == b"\x89PNG"


def test_report_says_when_the_summary_is_unverified(run_dir, tmp_path):
    meta = json.loads((run_dir / "run.json").read_text())
    write_run_dir(tmp_path / "nocsv", meta, None)
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nocsv")])
    assert result.exit_code == 0
    assert "not recomputed from per-question counts" in (tmp_path / "nocsv" / "report.md").read_text()


def test_report_ignores_rows_of_a_pass_run_json_never_recorded(run_dir, tmp_path):
    import shutil

    cut = shutil.copytree(run_dir, tmp_path / "cut")
    meta = json.loads((cut / "run.json").read_text())
    dropped = meta["cells"].pop()  # interrupted after its rows were appended, before run.json
    (cut / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["report", str(cut)])
    assert result.exit_code == 0 and "rows of unrecorded passes ignored" in result.output
    from alcheck.report.markdown import verified_run

    verified, _ = verified_run(load_run(cut))
    q = verified.questions
    assert not ((q.k == dropped["k"]) & (q.repeat == dropped["repeat"])).any()


RUN_FILES = ["run.json", "questions.csv", "traces.csv", "answers.jsonl", ".alcheck.lock"]


@pytest.mark.parametrize("name", RUN_FILES)
def test_report_refuses_to_write_over_a_file_of_a_run(run_dir, tmp_path, name):
    """Issue 50: `report RUN -o RUN/run.json` wrote markdown over the run's data and exited 0."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(run / name)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"is a file of the run folder {run}" in lines[0], result.output
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing written, not even a plot


def test_report_refuses_any_run_folders_file_and_the_ablation_file(run_dir, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(other / "questions.csv")])
    assert result.exit_code == 2 and "is a file of the run folder" in result.output, result.output
    abl = tmp_path / "abl"
    abl.mkdir()
    (abl / "ablation.json").write_text(json.dumps({"config": {}, "summary": []}))
    result = CliRunner().invoke(cli, ["report", str(abl), "-o", str(abl / "ablation.json")])
    assert result.exit_code == 2 and "is a file of the run folder" in result.output, result.output
    assert json.loads((abl / "ablation.json").read_text()) == {"config": {}, "summary": []}
    # a report of its own name inside the run folder is fine: that is where the default goes
    result = CliRunner().invoke(cli, ["report", str(other), "-o", str(other / "mine.md")])
    assert result.exit_code == 0 and (other / "mine.md").is_file(), result.output
