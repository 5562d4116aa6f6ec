"""`alcheck import eagle-answers` on the EAGLE repo's published LLaMA-2-chat 70B answer pair
(SafeAILab/EAGLE commit 79d6f790, tests/fixtures/eagle/, Apache-2.0 licence beside it; issue 21).

Every expected number is recomputed here from the raw JSON lines by the format's rules
(steps = idx + 1, new_tokens = Σ(a + 1); speed.py's speedup), not taken from alcheck's output."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli

FIXTURES = Path(__file__).parent / "fixtures" / "eagle"
EA = FIXTURES / "llama-2-chat-70b-fp16-ea-in-temperature-0.0.jsonl"
BASE = FIXTURES / "llama-2-chat-70b-fp16-base-in-temperature-0.0.jsonl"


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def invoke(*args):
    return CliRunner().invoke(cli, ["import", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle") / "run"
    result = invoke(
        "eagle-answers",
        EA,
        "--k",
        5,
        "--dataset",
        "mt_bench",
        "--protocol",
        "eagle-repo-llama2",
        "--baseline",
        BASE,
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out, result.output


def test_fixtures_are_the_published_pair_with_their_licence():
    assert "Apache License" in (FIXTURES / "LICENSE").read_text()
    ea, base = lines(EA), lines(BASE)
    assert len(ea) == len(base) == 80 and [r["question_id"] for r in ea] == list(range(81, 161))
    assert all(len(r["choices"][0]["idxs"]) == 2 for r in ea)


def test_pooled_al_is_3_620_and_each_turn_is_new_tokens_over_idxs_plus_one(imported):
    out, output = imported
    raw = lines(EA)
    new = sum(sum(r["choices"][0]["new_tokens"]) for r in raw)
    steps = sum(sum(i + 1 for i in r["choices"][0]["idxs"]) for r in raw)
    assert (new, steps) == (55668, 15377)  # IMPORT-FORMATS.md's derivation
    meta = json.loads((out / "run.json").read_text())
    assert meta["summary"][0]["al_mean"] == pytest.approx(new / steps) and f"{new / steps:.3f}" == "3.620"
    assert "AL 3.620" in output
    rows = pd.read_csv(out / "questions.csv", dtype={"prompt_hash": str})
    by_unit = {(r.question_id, r.turn): r for r in rows.itertuples()}
    for r in raw:
        c = r["choices"][0]
        for j, (idx, n) in enumerate(zip(c["idxs"], c["new_tokens"])):
            row = by_unit[(r["question_id"], j + 1)]
            assert (row.steps + row.accepted) / row.steps == pytest.approx(n / (idx + 1))
            assert row.drafted == 5 * (idx + 1) and row.generated_tokens == n
    for turn, expected in ((1, 3.571), (2, 3.671)):
        mine = rows[rows.turn == turn]
        assert round((mine.steps.sum() + mine.accepted.sum()) / mine.steps.sum(), 3) == expected
    # the naive Σnew_tokens / Σidxs reads high (one step per turn dropped)
    naive = new / sum(sum(r["choices"][0]["idxs"]) for r in raw)
    assert naive > new / steps and round(naive, 3) == 3.658
    assert rows.prompt_hash.isna().all() and rows.prompt_tokens.isna().all()
    assert set(rows.category) == {
        "writing",
        "roleplay",
        "reasoning",
        "math",
        "coding",
        "extraction",
        "stem",
        "humanities",
    }  # matched to MT-Bench by question_id


def speeds(path, tokens_of):
    out = []
    for r in lines(path):
        c = r["choices"][0]
        out.append((tokens_of(c), sum(c["wall_time"])))
    return out


def test_speedup_both_ways_as_speed_py_computes_it(imported):
    out, output = imported
    spec = speeds(EA, lambda c: sum(c["new_tokens"]))
    base = speeds(BASE, lambda c: sum(i + 1 for i in c["idxs"]))  # no tokenizer: one token per naive step
    mean_rule = (sum(t / s for t, s in spec) / len(spec)) / (sum(t / s for t, s in base) / len(base))
    total_rule = (sum(t for t, _ in spec) / sum(s for _, s in spec)) / (
        sum(t for t, _ in base) / sum(s for _, s in base)
    )
    found = json.loads((out / "run.json").read_text())["imported"]["speedup"]
    assert found["mean_of_question_speeds"] == pytest.approx(mean_rule)
    assert found["total_tokens_over_total_time"] == pytest.approx(total_rule)
    assert 2.8 < total_rule < mean_rule < 3.1  # EAGLE's 70B greedy speedup, about 3x
    assert "idxs + 1" in found["baseline_tokens"] and "no --tokenizer" in found["baseline_tokens"]
    assert f"speedup {mean_rule:.2f}× as the source computes it" in output
    assert f"speedup {total_rule:.2f}× total tokens / total time" in output
    report = out / "report.md"
    assert invoke_report(out, report).exit_code == 0
    text = report.read_text()
    assert f"{mean_rule:.2f}×" in text and f"{total_rule:.2f}×" in text
    assert "speedup (source's rule: mean of per-question tokens/s)" in text
    assert "prompt_hash is empty" in text and "(unstated)" in text and "`mt_bench` (user)" in text


def invoke_report(run, out):
    return CliRunner().invoke(cli, ["report", str(run), "-o", str(out)], catch_exceptions=False)


def test_speedup_with_a_tokenizer_counts_the_retokenized_text(tmp_path):
    from transformers import AutoTokenizer

    from alcheck.testing.tiny import train_tokenizer

    tok_dir = tmp_path / "tok"
    train_tokenizer([" ".join(r["choices"][0]["turns"][0] for r in lines(BASE)[:10])], 300, tok_dir)
    result = invoke(
        "eagle-answers", EA, "--k", 5, "--baseline", BASE, "--tokenizer", tok_dir, "--out", tmp_path / "r"
    )
    assert result.exit_code == 0, result.output
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    base = speeds(BASE, lambda c: sum(len(tok(t).input_ids) - 1 for t in c["turns"]))
    spec = speeds(EA, lambda c: sum(c["new_tokens"]))
    expected = (sum(t / s for t, s in spec) / 80) / (sum(t / s for t, s in base) / 80)
    found = json.loads((tmp_path / "r" / "run.json").read_text())["imported"]["speedup"]
    assert found["mean_of_question_speeds"] == pytest.approx(expected)
    assert "re-tokenized" in found["baseline_tokens"]


def test_turn_one_texts_against_the_baseline_pair(tmp_path, imported):
    """The baseline file, imported as a run of its own texts, is the 'other run' for --against: the
    70B fp16 pair wrote the same turn-1 answer on only 33 of 80 questions."""
    other = tmp_path / "base-run"
    other.mkdir()
    (other / "answers.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "k": 5,
                    "repeat": 0,
                    "question_id": r["question_id"],
                    "turn": 1,
                    "text": r["choices"][0]["turns"][0],
                }
            )
            + "\n"
            for r in lines(BASE)
        )
    )
    same = sum(
        a["choices"][0]["turns"][0] == b["choices"][0]["turns"][0] for a, b in zip(lines(EA), lines(BASE))
    )
    result = invoke("eagle-answers", EA, "--k", 5, "--against", other, "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    texts = json.loads((tmp_path / "r" / "run.json").read_text())["imported"]["texts"]
    assert (texts["common"], texts["identical"]) == (80, same) and same == 33
    assert (
        f"differ on {80 - same} of 80" in result.output and "the prompts or the model differ" in result.output
    )


def test_every_choice_is_a_repeat(tmp_path):
    """--num-choices 2 on the published lines (choice 1 borrowed from the next question's counts):
    choice i is repeat i, and the pooled AL counts every choice by the same rule (steps = idx + 1)."""
    raw = lines(EA)[:20]
    for r, other in zip(raw, raw[1:] + raw[:1]):
        r["choices"].append({**other["choices"][0], "index": 1})
    path = tmp_path / "two-choices.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raw))
    out = tmp_path / "run"
    result = invoke("eagle-answers", path, "--k", 5, "--out", out)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())

    def pooled(choices):
        return sum(sum(c["new_tokens"]) for c in choices) / sum(i + 1 for c in choices for i in c["idxs"])

    assert meta["config"]["repeats"] == 2 and len(meta["cells"]) == 2
    [summary] = meta["summary"]
    assert summary["al_mean"] == pytest.approx(pooled([c for r in raw for c in r["choices"]]))
    assert summary["al_repeats"] == pytest.approx([pooled([r["choices"][i] for r in raw]) for i in (0, 1)])
    rows = pd.read_csv(out / "questions.csv")
    assert sorted(rows.repeat.value_counts().items()) == [(0, 40), (1, 40)]


def test_unescaped_line_separators_inside_texts_are_text(tmp_path):
    """A file written with ensure_ascii off keeps U+2028 / U+0085 raw inside its strings: one line still."""
    import json as json_module

    from import_files import eagle_line

    lines = [
        eagle_line(81, [9, 4], [30, 12], texts=["one\u2028two", "three\x85four"]),
        eagle_line(82, [5, 5], [20, 20]),
    ]
    path = tmp_path / "raw.jsonl"
    path.write_text("".join(json_module.dumps(o, ensure_ascii=False) + "\n" for o in lines), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["import", "eagle-answers", str(path), "--k", "5", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    answers = [
        json_module.loads(x)
        for x in (tmp_path / "r" / "answers.jsonl").read_text(encoding="utf-8").split("\n")
        if x
    ]
    assert answers[0]["text"] == "one\u2028two" and len(answers) == 4
