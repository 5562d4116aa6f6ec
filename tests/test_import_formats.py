"""`alcheck import` for Spec-Bench, AIPerf, vLLM (printout, bench serve) and SGLang files written in
the exact shapes their code writes (tests/import_files.py); expected numbers follow each format's
counting rule, computed here from what was written (issue 21)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from import_files import (
    aiperf_record,
    bench_serve_result,
    sglang_record,
    spec_bench_choice,
    spec_bench_line,
    vllm_printout_new,
    vllm_printout_old,
    write_lines,
)

from alcheck.cli.main import cli
from alcheck.references.tables import load_references, mismatches
from alcheck.rundir.traces import TRACES_FILE, read_traces


def invoke(*args):
    return CliRunner().invoke(cli, ["import", *map(str, args)], catch_exceptions=False)


def ok(*args):
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def run_files(out):
    meta = json.loads((out / "run.json").read_text())
    rows = pd.read_csv(out / "questions.csv", dtype={"accepted_per_pos": str, "prompt_hash": str})
    return meta, rows


# --------------------------------------------------------------------------- Spec-Bench

SPEC_ENTRIES = {  # question -> per turn, one entry (a + 1) per step; K = 3
    81: [[4, 1, 2, 3], [2, 2]],
    82: [[1, 1, 4], [3, 4, 1, 2]],
}


@pytest.fixture
def spec_bench_file(tmp_path):
    lines = [
        spec_bench_line(
            q,
            "writing" if q == 81 else "roleplay",
            [spec_bench_choice(0, turns, [sum(e) for e in turns])],
            model_id="vicuna-7b-eagle2-float16",
        )
        for q, turns in SPEC_ENTRIES.items()
    ]
    return write_lines(tmp_path / "vicuna-7b-eagle2-float16.jsonl", lines)


def test_spec_bench_rows_per_position_and_traces(spec_bench_file, tmp_path):
    out = tmp_path / "run"
    ok("spec-bench", spec_bench_file, "--k", 3, "--out", out)
    meta, rows = run_files(out)
    entries = [e for turns in SPEC_ENTRIES.values() for t in turns for e in t]
    assert meta["summary"][0]["al_mean"] == pytest.approx(
        sum(entries) / len(entries)
    )  # "#Mean accepted tokens"
    for qid, turns in SPEC_ENTRIES.items():
        for j, e in enumerate(turns):
            row = rows[(rows.question_id == qid) & (rows.turn == j + 1)].iloc[0]
            assert (row.steps, row.accepted, row.drafted) == (len(e), sum(x - 1 for x in e), 3 * len(e))
            assert row.accepted_per_pos == ";".join(str(sum(x - 1 >= i for x in e)) for i in range(1, 4))
            assert row.generated_tokens == sum(e)
    per_pos = meta["summary"][0]["per_position"]
    assert per_pos == pytest.approx([sum(x - 1 >= i for x in entries) / len(entries) for i in (1, 2, 3)])
    # traces.csv as a run writes it (alcheck/rundir/traces.py), the prompt's length not recorded
    header = (out / TRACES_FILE).read_text().splitlines()[0]
    assert header == "k,repeat,question_id,turn,prompt_tokens,accepted,output_ids"
    traces = read_traces(out)
    assert traces[(3, 0, "82", 2)].accepted == [2, 3, 0, 1] and traces[(3, 0, "82", 2)].prompt_tokens is None
    assert len(traces) == len(rows) and meta["imported"]["traces"] == TRACES_FILE
    assert not (out / "steps.csv").exists()
    # model_id names the method (eagle2: Spec-Bench subtracts the tail past EOS) and the dtype
    assert meta["config"]["method"] == "eagle2" and meta["config"]["origins"]["method"] == "file"
    assert meta["config"]["dtype"] == "float16"
    assert meta["imported"]["counting"]["tail_past_eos"] == "subtracted"


def test_spec_bench_choices_are_repeats(tmp_path):
    turns_a, turns_b = [[2, 2, 1]], [[1, 1, 1, 2]]
    line = spec_bench_line(90, "qa", [spec_bench_choice(0, turns_a, [5]), spec_bench_choice(1, turns_b, [5])])
    out = tmp_path / "run"
    ok("spec-bench", write_lines(tmp_path / "a.jsonl", [line]), "--k", 2, "--out", out)
    meta, rows = run_files(out)
    assert list(rows.repeat) == [0, 1] and meta["config"]["repeats"] == 2
    assert meta["summary"][0]["al_repeats"] == pytest.approx([5 / 3, 5 / 4])


# --------------------------------------------------------------------------- AIPerf


def test_aiperf_records_histograms_and_per_step_lists(tmp_path):
    records = [
        aiperf_record("81", 0, {0: 3, 1: 2, 3: 1}, 3, completion_tokens=12),
        aiperf_record("82", 0, {0: 1, 2: 2}, 3, per_step=[2, 0, 2], completion_tokens=7),
        aiperf_record("81", 0, {0: 9}, 3, phase="warmup"),
        {**aiperf_record("83", 0, {1: 1}, 3), "error": {"code": 500, "message": "x"}},
    ]
    out = tmp_path / "run"
    result = ok("aiperf", write_lines(tmp_path / "profile_export.jsonl", records), "--out", out)
    meta, rows = run_files(out)
    assert meta["config"]["ks"] == [3] and meta["config"]["origins"]["k"] == "file"  # num_spec_tokens
    assert list(rows.question_id) == [81, 82] and list(rows.turn) == [1, 1]
    assert list(rows.steps) == [6, 3] and list(rows.accepted) == [0 + 2 + 3, 4]
    assert list(rows.accepted_per_pos) == ["3;1;1", "2;2;0"] and list(rows.generated_tokens) == [12, 7]
    assert meta["summary"][0]["al_mean"] == pytest.approx(1 + 9 / 9)
    assert "left out 1 warmup record" in result.output and "left out 1 failed record" in result.output
    assert {key: t.accepted for key, t in read_traces(out).items()} == {(3, 0, "82", 1): [2, 0, 2]}


# --------------------------------------------------------------------------- vLLM


@pytest.mark.parametrize("version", ["new", "old"])
def test_vllm_spec_decode_printouts(tmp_path, version):
    drafts, accepted, per_pos = 1000, 1296, [710, 380, 206]  # K = 3: 1 + 1296/1000 = 2.296
    text = (
        vllm_printout_new(25000, drafts, 3 * drafts, accepted, per_pos)
        if version == "new"
        else vllm_printout_old(25000, drafts, 3 * drafts, accepted)
    )
    path = tmp_path / "spec_decode.txt"
    path.write_text(text)
    result = ok(
        "vllm-spec-decode",
        path,
        "--out",
        tmp_path / "refs",
        "--name",
        "vllm-ci",
        "--target",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--dataset",
        "mt_bench",
        "--temperature",
        0,
    )
    table = json.loads((tmp_path / "refs" / "vllm-ci.json").read_text())
    assert table["values"] == {"3": pytest.approx(1 + accepted / drafts)} and "K=3: AL 2.296" in result.output
    counts = table["imported"]["counts"]["3"]
    assert (counts["steps"], counts["accepted"], counts["drafted"]) == (drafts, accepted, 3 * drafts)
    if version == "new":
        assert counts["per_position"] == [round(n / drafts, 2) for n in per_pos]
    assert table["origins"]["target"] == "user" and table["origins"]["protocol"] == "unstated"
    ref = next(r for r in load_references(tmp_path / "refs") if r.name == "vllm-ci")
    config = {
        "target": "meta-llama/Llama-3.1-8B-Instruct",
        "draft": "x",
        "method": "eagle",
        "dataset": "mt_bench",
        "protocol": "vllm-example",
        "max_tokens": 256,
        "temperature": 0.0,
        "limit": None,
    }
    found = mismatches(ref.to_dict(), config)
    assert "protocol not stated by the source" in found and "max_tokens not stated by the source" in found


def test_vllm_bench_serve_result(tmp_path):
    drafts, accepted, per_pos = 4000, 7244, [2900, 2414, 1930]  # K = 3
    path = tmp_path / "openai-chat-infqps-concurrency1-Llama-3.1-8B-Instruct-20260101-000000.json"
    path.write_text(
        json.dumps(
            bench_serve_result("meta-llama/Llama-3.1-8B-Instruct", drafts, 3 * drafts, accepted, per_pos),
            indent=4,
        )
    )
    ok("vllm-bench-serve", path, "--out", tmp_path / "refs", "--name", "serve")
    table = json.loads((tmp_path / "refs" / "serve.json").read_text())
    assert table["values"] == {"3": pytest.approx(1 + accepted / drafts)}
    assert table["imported"]["counts"]["3"]["per_position"] == pytest.approx([n / drafts for n in per_pos])
    assert table["target"] == "meta-llama/Llama-3.1-8B-Instruct" and table["origins"]["target"] == "file"
    assert table["temperature"] is None and table["origins"]["temperature"] == "unstated"
    assert "80 prompts" in table["notes"]


def test_vllm_bench_serve_appended_results_are_one_table_by_k(tmp_path):
    path = write_lines(
        tmp_path / "appended.jsonl",
        [bench_serve_result("m/x", 100, 100 * k, 60 * k, [60] * k) for k in (1, 2)],
    )
    ok("vllm-bench-serve", path, "--out", tmp_path / "refs", "--name", "serve")
    table = json.loads((tmp_path / "refs" / "serve.json").read_text())
    assert table["values"] == {"1": pytest.approx(1.6), "2": pytest.approx(2.2)}


# --------------------------------------------------------------------------- SGLang


def test_sglang_bench_speculative_one_table_per_batch_and_shape(tmp_path):
    records = [
        sglang_record(1, 0, 0, 0, 1.0),
        sglang_record(1, 3, 1, 4, 2.412),
        sglang_record(1, 5, 1, 6, 2.897),
        sglang_record(1, 5, 4, 8, 3.51),
        sglang_record(4, 3, 1, 4, 2.398),
    ]
    ok(
        "sglang-bench-speculative",
        write_lines(tmp_path / "output.jsonl", records),
        "--out",
        tmp_path / "refs",
        "--name",
        "sgl",
        "--target",
        "meta-llama/Llama-2-7b-chat-hf",
    )
    tables = {t.name: t for t in load_references(tmp_path / "refs")}
    assert set(tables) == {"sgl-bs1-chain", "sgl-bs1-topk4-t8", "sgl-bs4-chain"}
    assert tables["sgl-bs1-chain"].values == {"3": 2.412, "5": 2.897}
    tree = tables["sgl-bs1-topk4-t8"]
    assert (tree.topk, tree.num_draft_tokens, tree.values) == (4, 8, {"5": 3.51})
    assert tree.max_tokens == 512 and tree.origins["max_tokens"] == "tool"
    assert "warm-up" in tree.counting["steps"]


# --------------------------------------------------------------------------- gate and run --reference use
# imports


def test_an_imported_reference_gates_and_its_unstated_settings_warn(tmp_path):
    from fake_runs import make_run

    path = tmp_path / "spec_decode.txt"
    path.write_text(vllm_printout_new(25000, 1000, 2000, 1100, [600, 500]))  # K = 2, AL 2.1
    ok("vllm-spec-decode", path, "--out", tmp_path / "refs", "--name", "printed")
    run = make_run(tmp_path / "run", {2: 2.1}, n_questions=40, seed=3)
    gate = CliRunner().invoke(cli, ["gate", str(run), "--baseline", str(tmp_path / "refs" / "printed.json")])
    assert gate.exit_code in (0, 1), gate.output
    assert "not stated by the source" in gate.output


def test_run_reference_table_shows_an_imported_reference_with_its_warnings(tmp_path):
    from fake_runs import make_meta, make_questions

    from alcheck.report.table import markdown_table

    path = tmp_path / "spec_decode.txt"
    path.write_text(vllm_printout_new(25000, 1000, 2000, 1100, [600, 500]))
    ok(
        "vllm-spec-decode",
        path,
        "--out",
        tmp_path / "refs",
        "--name",
        "printed",
        "--target",
        "t/x",
        "--draft",
        "d/y",
        "--method",
        "eagle",
        "--temperature",
        0,
    )
    table = json.loads((tmp_path / "refs" / "printed.json").read_text())
    meta = make_meta(
        make_questions({2: 2.1}, n_questions=20),
        references=[table],
        config={"target": "t/x", "draft": "d/y", "method": "eagle"},
    )
    text = markdown_table(meta)
    assert "printed is not directly comparable" in text and "dataset not stated by the source" in text
    assert "not comparable" not in text.split("\n\n")[0]  # unstated settings warn; the verdict stays
