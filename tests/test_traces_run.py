"""Per-step traces from the built-in runner through `alcheck run` (issue 23, phase 2).

Oracles: the contiguous reference runner (its own KV layout, one request at a time) for each
step's accepted count, also when the paged runner preempts; the emitted-token arithmetic (every
step but the last commits all of its 1 + a tokens); and, for the files, an uninterrupted run: a
resumed run's traces.csv must equal it byte for byte.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import interrupt_at_cell, invoke_run, run_contiguous, run_spec

from alcheck.rundir.traces import TRACES_FILE, read_traces

BASE = [
    "--ks",
    "1,3",
    "--repeats",
    "2",
    "--limit",
    "4",
    "--max-tokens",
    "20",
    "--block-size",
    "4",
    "--max-batch-size",
    "3",
    "--reference",
    "none",
]


def check_steps(result, k):
    steps = result.per_step_accepted
    assert len(steps) == result.steps and sum(steps) == result.accepted
    assert [sum(a > i for a in steps) for i in range(k)] == list(result.accepted_per_pos)
    emitted = [1 + a for a in steps]  # the prefill token, then each step's 1 + a (the last may be cut)
    assert 1 + sum(emitted[:-1]) < len(result.output_ids) <= 1 + sum(emitted)


@pytest.mark.parametrize("k, tree", [(3, None), (5, None), (3, (2, 5))])
def test_each_step_equals_the_contiguous_runner_through_preemption(pair, prompts, k, tree):
    target, head = pair
    shape = {"topk": tree[0], "num_draft_tokens": tree[1]} if tree else {}
    whole, _ = run_spec(target.model, head, target.eos_token_ids, prompts, k=k, **shape)
    small, _ = run_spec(target.model, head, target.eos_token_ids, prompts, k=k, num_blocks=40, **shape)
    assert sum(r.preemptions for r in small) > 0  # preemption recomputes KV and keeps the steps
    reference = run_contiguous(target.model, head, target.eos_token_ids, prompts, 60, k, **shape)
    for paged, again, ref in zip(whole, small, reference):
        assert paged.per_step_accepted == again.per_step_accepted == ref.per_step_accepted
        check_steps(paged, k)


@pytest.fixture(scope="module")
def traced(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("traces") / "full"
    result = invoke_run([*pair_args, *BASE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_a_run_writes_one_trace_per_question_turn(traced):
    out, output = traced
    rows = pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False)
    traces = read_traces(out)
    keys = [(int(r.k), int(r.repeat), r.question_id, int(r.turn)) for r in rows.itertuples()]
    assert list(traces) == keys  # the same rows in the same order
    for key, row in zip(keys, rows.itertuples()):
        trace = traces[key]
        assert (trace.steps, sum(trace.accepted)) == (int(row.steps), int(row.accepted))  # adds up to its row
        assert ";".join(map(str, trace.per_position())) == row.accepted_per_pos
        assert len(trace.output_ids) == int(row.generated_tokens) and trace.prompt_tokens == int(
            row.prompt_tokens
        )
    meta = json.loads((out / "run.json").read_text())
    assert meta["traces"] == "per-step" and {c["traces"] for c in meta["cells"]} == {"per-step"}
    assert f"{TRACES_FILE} and answers.jsonl in {out}" in " ".join(output.split())  # the saved line names it


def test_resume_after_interrupt_writes_the_same_traces(pair_args, traced, tmp_path, monkeypatch):
    out = tmp_path / "cut"
    interrupt_at_cell(monkeypatch, 3)
    assert invoke_run([*pair_args, *BASE, "--out", str(out)]).exit_code == 130
    assert len(read_traces(out)) == 2 * 4  # two cells saved
    monkeypatch.undo()
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / TRACES_FILE).read_bytes() == (traced[0] / TRACES_FILE).read_bytes()


def test_resume_drops_the_traces_of_a_cell_run_json_does_not_record(traced, tmp_path):
    """A cell whose rows reached the files but not run.json (killed in between) is recomputed once."""
    out = tmp_path / "killed"
    shutil.copytree(traced[0], out)
    meta = json.loads((out / "run.json").read_text())
    # K=1 repeat 1's rows stay in both files; resumed, it is recomputed and put back in its place
    meta["cells"], meta["status"] = [c for c in meta["cells"] if (c["k"], c["repeat"]) != (1, 1)], "partial"
    (out / "run.json").write_text(json.dumps(meta))
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 0, result.output
    for name in (TRACES_FILE, "questions.csv"):
        assert (out / name).read_bytes() == (traced[0] / name).read_bytes()
