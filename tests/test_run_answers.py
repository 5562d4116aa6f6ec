"""A run's answer texts (answers.jsonl, alcheck/rundir/answers.py): one line per question turn in the rows'
order, kept whole under interruption and resume, and what `alcheck import --against RUN` reads."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import interrupt_at_cell
from import_files import spec_bench_from_run

from alcheck.cli.main import cli

ARGS = [
    "--ks",
    "1,3",
    "--repeats",
    "2",
    "--limit",
    "3",
    "--protocol",
    "eagle-repo",
    "--max-tokens",
    "12",
    "--block-size",
    "4",
    "--reference",
    "none",
]


def invoke(*args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


def lines(run):
    return [json.loads(x) for x in (run / "answers.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def whole_run(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("answers") / "run"
    result = invoke("run", *pair_args, *ARGS, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_one_line_per_row_in_the_rows_order(whole_run):
    rows = pd.read_csv(whole_run / "questions.csv")
    answers = lines(whole_run)
    assert [(a["k"], a["repeat"], a["question_id"], a["turn"]) for a in answers] == list(
        zip(rows.k, rows.repeat, rows.question_id, rows.turn)
    )
    assert all(isinstance(a["text"], str) and a["text"] for a in answers)
    # greedy and lossless: every K and repeat writes the same answer to the same question turn
    by_turn = {}
    for a in answers:
        by_turn.setdefault((a["question_id"], a["turn"]), set()).add(a["text"])
    assert all(len(texts) == 1 for texts in by_turn.values()), by_turn


def test_an_interrupted_run_resumes_to_the_same_file(pair_args, whole_run, tmp_path, monkeypatch):
    out = tmp_path / "run"
    interrupt_at_cell(monkeypatch, 3)
    result = CliRunner().invoke(cli, ["run", *pair_args, *ARGS, "--out", str(out)])
    assert result.exit_code != 0
    monkeypatch.undo()
    kept = {(a["k"], a["repeat"]) for a in lines(out)}
    assert kept == {(1, 0), (1, 1)}  # the recorded cells only
    with (out / "answers.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"k": 3, "repeat": 0, "question_id": 81, "tu')  # a write torn by a kill
    result = invoke("run", *pair_args, *ARGS, "--resume", out)
    assert result.exit_code == 0, result.output
    assert (out / "answers.jsonl").read_bytes() == (whole_run / "answers.jsonl").read_bytes()


def test_a_corrupt_answers_file_refuses_the_resume(pair_args, whole_run, tmp_path):
    import shutil

    out = shutil.copytree(whole_run, tmp_path / "run")
    text = (out / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    text[1] = "not json"
    (out / "answers.jsonl").write_text("\n".join(text) + "\n", encoding="utf-8")
    result = invoke("run", *pair_args, *ARGS, "--resume", out)
    assert result.exit_code == 2 and "answers.jsonl is corrupt" in result.output, result.output


def test_import_against_a_builtin_run(whole_run, tmp_path):
    k3 = tmp_path / "k3"  # one K, as a Spec-Bench file holds
    k3.mkdir()
    rows = pd.read_csv(whole_run / "questions.csv", dtype={"accepted_per_pos": str})
    rows[rows.k == 3].to_csv(k3 / "questions.csv", index=False)
    (k3 / "answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in lines(whole_run) if a["k"] == 3))
    same = spec_bench_from_run(k3, tmp_path / "same.jsonl", texts=True)
    result = invoke("import", "spec-bench", same, "--k", 3, "--against", whole_run, "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    texts = json.loads((tmp_path / "a" / "run.json").read_text())["imported"]["texts"]
    assert texts["common"] == 3 and texts["identical"] == 3, texts
    other = spec_bench_from_run(k3, tmp_path / "other.jsonl")  # placeholder texts: another model's answers
    result = invoke("import", "spec-bench", other, "--k", 3, "--against", whole_run, "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    texts = json.loads((tmp_path / "b" / "run.json").read_text())["imported"]["texts"]
    assert texts["identical"] == 0 and "differ on 3 of 3" in texts["verdict"], texts


def test_texts_with_unicode_line_separators_read_back(tmp_path):
    """JSON leaves U+2028, U+2029 and U+0085 unescaped: lines end at "\\n" only."""
    from alcheck.rundir.answers import read_answers, write_answers

    lines = [
        {"k": 1, "repeat": 0, "question_id": q, "turn": 1, "text": t}
        for q, t in enumerate(["a\u2028b", "x\x85y", "p\u2029q", "é"])
    ]
    write_answers(tmp_path, lines, append=False)
    assert read_answers(tmp_path) == lines
    with (tmp_path / "answers.jsonl").open("ab") as f:
        f.write('{"k": 1, "text": "é'.encode()[:-1])  # a kill in the middle of a character
    assert read_answers(tmp_path) == lines


def interrupted(pair_args, tmp_path, monkeypatch):
    """A run cut at its third cell: K=1's two passes recorded."""
    out = tmp_path / "run"
    interrupt_at_cell(monkeypatch, 3)
    assert CliRunner().invoke(cli, ["run", *pair_args, *ARGS, "--out", str(out)]).exit_code != 0
    monkeypatch.undo()
    return out


def test_a_lone_torn_line_is_replaced_not_appended_to(pair_args, whole_run, tmp_path, monkeypatch):
    out = interrupted(pair_args, tmp_path, monkeypatch)
    meta = json.loads((out / "run.json").read_text())
    meta["cells"], meta["status"] = [], "partial"  # the kill came while the first pass's answers were written
    (out / "run.json").write_text(json.dumps(meta))
    (out / "answers.jsonl").write_text('{"k": 1, "repeat": 0, "question_id": 81, "tu', encoding="utf-8")
    result = invoke("run", *pair_args, *ARGS, "--resume", out)
    assert result.exit_code == 0, result.output
    assert (out / "answers.jsonl").read_bytes() == (whole_run / "answers.jsonl").read_bytes()


def test_a_recorded_pass_missing_answer_lines_refuses_the_resume(pair_args, tmp_path, monkeypatch):
    out = interrupted(pair_args, tmp_path, monkeypatch)
    text = (out / "answers.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "answers.jsonl").write_text("".join(text[:-2]), encoding="utf-8")  # cut at a line boundary
    result = invoke("run", *pair_args, *ARGS, "--resume", out)
    assert result.exit_code == 2 and "the file was cut or edited" in result.output, result.output


def test_compare_sets_texts_against_an_import_not_between_builtin_runs(whole_run, tmp_path):
    import shutil

    other = shutil.copytree(whole_run, tmp_path / "other")
    answers = lines(other)
    answers[0]["text"] = "something else"
    (other / "answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    result = invoke("compare", whole_run, other)  # two built-in runs: prompt_hash and traces decide
    assert result.exit_code == 0 and "turn-1 answers" not in result.output, result.output
    k3 = tmp_path / "k3"
    k3.mkdir()
    rows = pd.read_csv(whole_run / "questions.csv", dtype={"accepted_per_pos": str})
    rows[rows.k == 3].to_csv(k3 / "questions.csv", index=False)
    (k3 / "answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers if a["k"] == 3))
    result = invoke(
        "import",
        "spec-bench",
        spec_bench_from_run(k3, tmp_path / "a.jsonl"),
        "--k",
        3,
        "--out",
        tmp_path / "imp",
    )
    assert result.exit_code == 0, result.output
    result = invoke("compare", tmp_path / "imp", whole_run)  # placeholder texts: every answer differs
    assert "turn-1 answers differ on 3 of 3" in " ".join(result.output.split()), result.output
