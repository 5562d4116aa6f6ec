"""A built-in run written out as Spec-Bench writes answers and imported back gives the same
questions.csv rows; compare reads an imported run like its own and names what the import leaves
open (issue 21)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from import_files import spec_bench_from_run

from alcheck.cli.main import cli

K = 3
CARRIED = [
    "k",
    "repeat",
    "question_id",
    "turn",
    "category",
    "generated_tokens",
    "steps",
    "drafted",
    "accepted",
    "accepted_per_pos",
]  # every column Spec-Bench's format can carry


def invoke(*args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def builtin_run(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("builtin") / "run"
    result = invoke(
        "run",
        *pair_args,
        "--ks",
        K,
        "--repeats",
        2,
        "--limit",
        3,
        "--protocol",
        "eagle-repo",
        "--max-tokens",
        16,
        "--block-size",
        4,
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def read_rows(path):
    return pd.read_csv(path, dtype={"accepted_per_pos": str, "prompt_hash": str, "category": str})


@pytest.fixture(scope="module")
def imported(builtin_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("imported")
    answers = spec_bench_from_run(builtin_run, root / "tiny-eagle3-float32.jsonl")
    out = root / "run"
    result = invoke("import", "spec-bench", answers, "--k", K, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_round_trip_gives_identical_rows(builtin_run, imported):
    mine, theirs = read_rows(builtin_run / "questions.csv"), read_rows(imported / "questions.csv")
    assert len(mine) == 2 * 3 * 2 and mine.turn.max() == 2  # repeats x questions x turns
    pd.testing.assert_frame_equal(
        mine[CARRIED].reset_index(drop=True), theirs[CARRIED].reset_index(drop=True)
    )
    assert list(theirs.columns) == list(mine.columns)  # the documented schema, in its order
    # what Spec-Bench's files do not carry stays empty, and the run says why
    assert (
        theirs.prompt_hash.isna().all()
        and theirs.prompt_tokens.isna().all()
        and mine.prompt_hash.notna().all()
    )
    meta = json.loads((imported / "run.json").read_text())
    assert "prompt_hash is empty" in meta["imported"]["prompt_hash"]
    base = json.loads((builtin_run / "run.json").read_text())
    assert meta["summary"][0]["al_mean"] == pytest.approx(base["summary"][0]["al_mean"], abs=1e-12)
    assert meta["summary"][0]["per_position"] == pytest.approx(base["summary"][0]["per_position"])


def test_compare_an_import_against_the_builtin_run(builtin_run, imported):
    result = invoke("compare", builtin_run, imported, "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    row = found["rows"][0]
    assert (
        row["k"] == K
        and row["diff"] == pytest.approx(0.0, abs=1e-12)
        and row["verdict"] == "no detectable change"
    )
    assert found["mismatches"] == []  # unstated settings warn, they do not refuse
    warnings = " ".join(found["warnings"])
    assert "B's source does not state" in warnings and "protocol" in warnings and "dataset" in warnings
    assert "B is imported (spec-bench): its prompt_hash is empty" in warnings
    # eagle3 in the model id: Spec-Bench keeps the tail past EOS, but its loop takes an extra step at a bonus
    # EOS
    assert "A and B count differently" in row["counting_note"]


def test_compare_names_spec_bench_s_trimmed_tail_instead_of_a_change(builtin_run, tmp_path):
    """The same rows, with the last step of every generation cut back as Spec-Bench's EAGLE-1/2
    loops cut the tokens past EOS: a credible drop, which the convention explains."""
    trimmed = tmp_path / "trimmed"
    answers = spec_bench_from_run(
        builtin_run, tmp_path / "tiny-eagle2-float32.jsonl", model_id="tiny-eagle2-float32"
    )
    lines = [json.loads(x) for x in answers.read_text().splitlines()]
    for line in lines:  # lower the largest entry of each turn by one: Σ entries falls by one per generation
        for choice in line["choices"]:
            start = 0
            for n in choice["decoding_steps"]:
                turn = choice["accept_lengths"][start : start + n]
                if max(turn) > 1:
                    i = start + turn.index(max(turn))
                    choice["accept_lengths"][i] -= 1
                start += n
    answers.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert invoke("import", "spec-bench", answers, "--k", K, "--out", trimmed).exit_code == 0
    result = invoke("compare", builtin_run, trimmed, "--json")
    row = json.loads(result.output)["rows"][0]
    assert row["diff"] < 0 and row["verdict"] == "counting convention difference"
    assert "tail past EOS: counted by alcheck, subtracted by Spec-Bench" in row["counting_note"]
    assert "these overlap" in row["counting_note"]


def test_resuming_an_imported_run_says_what_it_is(imported, pair_args):
    result = CliRunner().invoke(cli, ["run", *pair_args, "--resume", str(imported)])
    assert (
        result.exit_code == 2 and "an imported run" in result.output and "alcheck compare" in result.output
    ), result.output
    assert len(result.output.strip().splitlines()) == 1
