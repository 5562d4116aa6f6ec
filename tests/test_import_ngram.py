"""Imports of an n-gram run convert by the source's rule (issue 30): vLLM's per-request counts
(AIPerf records) count only the steps that drafted, so with --method ngram the steps come from the
tokens and vLLM's count is kept as drafted_steps; vLLM's whole-run counters cannot say how many
plain steps there were, so they are refused for n-gram in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from import_files import aiperf_record, bench_serve_result, vllm_printout_new, write_lines

from alcheck.cli.main import cli

K = 3
RUN = ["--ks", str(K), "--repeats", "1", "--limit", "6", "--max-tokens", "48", "--protocol", "eagle-repo"]
NGRAM = ["--method", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]


def invoke(args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def builtin(pair_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("import-ngram") / "builtin"
    result = invoke(["run", "--target", pair_dirs[0], *NGRAM, *RUN, "--out", out])
    assert result.exit_code == 0, result.output
    return pd.read_csv(out / "questions.csv")


def vllm_histogram(row) -> dict[int, int]:
    """What vLLM reports for the row: the steps that drafted, by accepted drafts."""
    per_pos = [int(x) for x in str(row.accepted_per_pos).split(";")] + [0]
    hist = {0: int(row.drafted_steps) - per_pos[0]}
    hist.update({j: per_pos[j - 1] - per_pos[j] for j in range(1, K + 1)})
    return hist


def aiperf_file(frame, path):
    records = [
        aiperf_record(
            str(r.question_id), r.turn - 1, vllm_histogram(r), K, completion_tokens=r.generated_tokens
        )
        for r in frame.itertuples()
    ]
    return write_lines(path, records)


def test_vllm_counts_of_an_ngram_run_import_with_every_step(builtin, tmp_path):
    assert (builtin.steps > builtin.drafted_steps).any()  # plain steps occur
    path = aiperf_file(builtin, tmp_path / "profile_export.jsonl")
    out = tmp_path / "imported"
    result = invoke(["import", "aiperf", path, "--method", "ngram", "--k", K, "--out", out])
    assert result.exit_code == 0, result.output
    got = pd.read_csv(out / "questions.csv")
    key = ["question_id", "turn"]
    mine = builtin.set_index(key).sort_index()
    got = got.set_index(key).sort_index()
    assert (got.drafted_steps == mine.drafted_steps).all() and (got.accepted == mine.accepted).all()
    # steps from the tokens: exact, or low by the drafts past the stop (at most K) once per request
    low = mine.steps - got.steps
    assert ((low >= 0) & (low <= K)).all(), low
    assert (low == 0).mean() >= 0.5, low
    meta = json.loads((out / "run.json").read_text())
    assert "steps from the tokens" in meta["imported"]["counting"]["converted"]
    (entry,) = meta["summary"].values() if isinstance(meta["summary"], dict) else meta["summary"]
    assert entry["al_mean"] < entry["al_drafted_steps"]  # vLLM's number stays beside, above


def test_without_the_method_vllm_steps_are_taken_as_they_are(builtin, tmp_path):
    """EAGLE's way (every step drafts): the import cannot know the run was n-gram unless told."""
    path = aiperf_file(builtin, tmp_path / "profile_export.jsonl")
    out = tmp_path / "as-eagle"
    assert invoke(["import", "aiperf", path, "--k", K, "--out", out]).exit_code == 0
    got = pd.read_csv(out / "questions.csv")
    assert (got.steps == got.drafted_steps).all()


def refused(args, *needles):
    result = CliRunner().invoke(cli, [*map(str, args)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_an_ngram_record_without_completion_tokens_is_refused(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [aiperf_record("81", 0, {0: 2, 1: 1}, K)])
    refused(
        ["import", "aiperf", path, "--method", "ngram", "--out", tmp_path / "r"],
        "completion_tokens",
        "line 1",
    )


def test_whole_run_vllm_counters_of_an_ngram_run_are_refused(tmp_path):
    printout = tmp_path / "spec_decode.txt"
    printout.write_text(vllm_printout_new(100, 10, 30, 12, [6, 4, 2]))
    refused(["import", "vllm-spec-decode", printout, "--method", "ngram"], "drafted-steps AL", "AIPerf")
    serve = tmp_path / "serve.json"
    serve.write_text(json.dumps(bench_serve_result("m/x", 10, 30, 12, [6, 4, 2])))
    refused(["import", "vllm-bench-serve", serve, "--method", "ngram"], "counts only the steps that drafted")
