"""Bad input to `alcheck import` exits 2 in one line naming the file and the line (issue 21)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from import_files import (
    aiperf_record,
    bench_serve_result,
    eagle_line,
    sglang_record,
    spec_bench_choice,
    spec_bench_line,
    vllm_printout_new,
    write_lines,
)

from alcheck.cli.main import cli


def refused(*args, needles=()):
    result = CliRunner().invoke(cli, ["import", *map(str, args)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and len(result.output.strip().splitlines()) == 1, result.output
    for needle in needles:
        assert str(needle) in errors[0], errors[0]
    return errors[0]


def good_eagle(qid=81):
    return eagle_line(qid, [9, 4], [30, 12])


def test_a_file_that_is_not_the_named_format(tmp_path):
    spec = write_lines(
        tmp_path / "spec.jsonl", [spec_bench_line(81, "writing", [spec_bench_choice(0, [[2, 1]], [3])])]
    )
    refused("eagle-answers", spec, "--k", 2, "--out", tmp_path / "r", needles=(spec, "line 1", "spec-bench"))
    eagle = write_lines(tmp_path / "eagle.jsonl", [good_eagle()])
    refused(
        "spec-bench", eagle, "--k", 2, "--out", tmp_path / "r", needles=(eagle, "line 1", "eagle-answers")
    )
    refused("aiperf", eagle, "--out", tmp_path / "r", needles=(eagle, "line 1", "AIPerf"))
    refused("sglang-bench-speculative", eagle, "--out", tmp_path / "r", needles=(eagle, "line 1"))
    refused(
        "vllm-bench-serve",
        eagle,
        "--out",
        tmp_path / "r",
        needles=(eagle, "line 1", "spec_decode_num_drafts"),
    )
    text = tmp_path / "notes.txt"
    text.write_text("hello\nworld\n")
    refused("vllm-spec-decode", text, "--out", tmp_path / "r", needles=(text, "num_drafts"))
    refused("eagle-answers", text, "--k", 2, "--out", tmp_path / "r", needles=(text, "line 1", "not JSON"))


def test_missing_or_non_integer_counts(tmp_path):
    lines = [good_eagle(81), eagle_line(82, [9.5, 4], [30, 12])]
    path = write_lines(tmp_path / "a.jsonl", lines)
    refused("eagle-answers", path, "--k", 2, "--out", tmp_path / "r", needles=(path, "line 2", "idxs", "9.5"))
    missing = good_eagle(83)
    del missing["choices"][0]["new_tokens"]
    path = write_lines(tmp_path / "b.jsonl", [good_eagle(81), missing])
    refused("eagle-answers", path, "--k", 2, "--out", tmp_path / "r", needles=(path, "line 2", "new_tokens"))
    record = aiperf_record("81", 0, {0: 2, 1: 1}, 2)
    record["spec_decode_acceptance"]["num_spec_steps"] = "3"
    path = write_lines(tmp_path / "c.jsonl", [record])
    refused("aiperf", path, "--out", tmp_path / "r", needles=(path, "line 1", "num_spec_steps"))
    path = tmp_path / "spec_decode.txt"
    path.write_text(
        vllm_printout_new(100, 10, 30, 12, [6, 4, 2]).replace(
            "num_accepted_tokens: 12", "num_accepted_tokens: 12.0"
        )
    )
    refused(
        "vllm-spec-decode", path, "--out", tmp_path / "r", needles=(path, "line 6", "num_accepted_tokens")
    )
    record = sglang_record(1, 3, 1, 4, 2.5)
    record["steps"] = None
    path = write_lines(tmp_path / "d.jsonl", [record])
    refused("sglang-bench-speculative", path, "--out", tmp_path / "r", needles=(path, "line 1", "steps"))


def test_turn_count_that_disagrees_between_fields(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [good_eagle(81), eagle_line(82, [9, 4], [30])])
    refused(
        "eagle-answers",
        path,
        "--k",
        2,
        "--out",
        tmp_path / "r",
        needles=(path, "line 2", "turn count disagrees", "new_tokens 1"),
    )


def test_duplicate_question_ids_with_different_numbers(tmp_path):
    path = write_lines(
        tmp_path / "a.jsonl", [good_eagle(81), good_eagle(82), eagle_line(81, [9, 4], [31, 12])]
    )
    refused(
        "eagle-answers",
        path,
        "--k",
        3,
        "--out",
        tmp_path / "r",
        needles=(path, "line 3", "question 81", "line 1"),
    )
    same = write_lines(tmp_path / "b.jsonl", [good_eagle(81), good_eagle(81)])  # an exact repeat is dropped
    result = CliRunner().invoke(
        cli, ["import", "eagle-answers", str(same), "--k", "3", "--out", str(tmp_path / "s")]
    )
    assert result.exit_code == 0 and "2 exact duplicate question turns dropped" in result.output


def test_accept_length_list_that_disagrees_with_the_step_counts(tmp_path):
    choice = spec_bench_choice(0, [[2, 1, 3], [2]], [6, 2])
    choice["decoding_steps"] = [3, 2]
    path = write_lines(tmp_path / "a.jsonl", [spec_bench_line(81, "writing", [choice])])
    refused(
        "spec-bench",
        path,
        "--k",
        2,
        "--out",
        tmp_path / "r",
        needles=(path, "line 1", "accept_lengths has 4 entries", "add up to 5"),
    )
    record = aiperf_record("81", 0, {0: 2, 1: 1}, 2, per_step=[1, 0])
    path = write_lines(tmp_path / "b.jsonl", [record])
    refused(
        "aiperf", path, "--out", tmp_path / "r", needles=(path, "line 1", "per_step_accepted has 2 steps")
    )


def test_counts_that_cannot_be(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [good_eagle(81), eagle_line(82, [4, 4], [30, 12])])
    # question 82 turn 1: 25 drafts accepted in 5 steps, more than K=3 allows
    refused(
        "eagle-answers",
        path,
        "--k",
        3,
        "--out",
        tmp_path / "r",
        needles=(path, "line 2", "question 82", "K=3"),
    )
    spec = write_lines(
        tmp_path / "b.jsonl", [spec_bench_line(81, "writing", [spec_bench_choice(0, [[2, 5]], [7])])]
    )
    refused(
        "spec-bench", spec, "--k", 3, "--out", tmp_path / "r", needles=(spec, "line 1", "accepted 4", "K=3")
    )
    printout = tmp_path / "spec_decode.txt"
    printout.write_text(vllm_printout_new(100, 10, 20, 25, [10, 10]))  # 25 accepted in 10 steps of K=2
    refused("vllm-spec-decode", printout, "--out", tmp_path / "r", needles=(printout, "line 6", "K=2"))
    serve = tmp_path / "serve.json"
    result = bench_serve_result("m/x", 10, 30, 12, [6, 4, 2])
    result["spec_decode_acceptance_length"] = 2.5
    serve.write_text(json.dumps(result))
    refused("vllm-bench-serve", serve, "--out", tmp_path / "r", needles=(serve, "line 1", "disagrees"))
    sglang = write_lines(tmp_path / "c.jsonl", [sglang_record(1, 3, 1, 4, 4.5)])
    refused(
        "sglang-bench-speculative",
        sglang,
        "--out",
        tmp_path / "r",
        needles=(sglang, "line 1", "acc_length 4.5"),
    )


@pytest.mark.parametrize("option, value, needle", [("--temperature", 0.7, "temperature"), ("--k", 2, "K=3")])
def test_an_option_the_file_contradicts(tmp_path, option, value, needle):
    path = write_lines(
        tmp_path / "a.jsonl", [eagle_line(81, [9, 4], [30, 12], model_id="x-ea-in-temperature-0.0")]
    )
    if option == "--temperature":
        refused(
            "eagle-answers",
            path,
            "--k",
            3,
            option,
            value,
            "--out",
            tmp_path / "r",
            needles=(path, "line 1", "--temperature 0.7", "temperature-0.0"),
        )
    else:
        printout = tmp_path / "spec_decode.txt"
        printout.write_text(vllm_printout_new(100, 10, 30, 12, [6, 4, 2]))
        refused(
            "vllm-spec-decode", printout, option, value, "--out", tmp_path / "r", needles=(printout, needle)
        )


def test_an_existing_output_is_not_overwritten(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [good_eagle()])
    args = ("eagle-answers", path, "--k", 3, "--out", tmp_path / "r")
    assert CliRunner().invoke(cli, ["import", *map(str, args)]).exit_code == 0
    refused(*args, needles=("already holds a run",))
    refused("eagle-answers", path, "--out", tmp_path / "s", needles=(path, "--k"))  # K is not in the file


def twice(qid, second):
    """An answer line with num_choices 2: good_eagle's choice, then `second`'s."""
    line = good_eagle(qid)
    line["choices"].append({**second["choices"][0], "index": 1})
    return line


def test_choices_that_cannot_be_repeats(tmp_path):
    lines = [
        twice(81, good_eagle(81)),
        twice(82, eagle_line(82, [9], [30])),
    ]  # choice 1 of 82: one turn, not two
    path = write_lines(tmp_path / "a.jsonl", lines)
    refused(
        "eagle-answers",
        path,
        "--k",
        3,
        "--out",
        tmp_path / "r",
        needles=(path, "line 2", "choice 1 has 1 turns but choice 0 has 2", "restore the file"),
    )
    path = write_lines(tmp_path / "b.jsonl", [good_eagle(81), twice(82, good_eagle(82))])  # 1 choice, then 2
    refused(
        "eagle-answers",
        path,
        "--k",
        3,
        "--out",
        tmp_path / "r",
        needles=(path, "line 2", "2 choices but line 1 has 1", "--num-choices"),
    )


@pytest.mark.parametrize("qid", [None, "", [81]])
def test_a_question_without_an_id(tmp_path, qid):
    line = spec_bench_line(81, "writing", [spec_bench_choice(0, [[2, 1]], [3])])
    line["question_id"] = qid
    path = write_lines(
        tmp_path / "a.jsonl", [spec_bench_line(80, "writing", [spec_bench_choice(0, [[2]], [2])]), line]
    )
    refused("spec-bench", path, "--k", 2, "--out", tmp_path / "r", needles=(path, "line 2", "question_id"))
    assert not (tmp_path / "r" / "questions.csv").exists()
