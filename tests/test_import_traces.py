"""An import's per-step counts are traces.csv, as a run writes them (alcheck/rundir/traces.py): compare
locates where two imported runs diverge step by step, and reads an import written before (one
steps.csv row per step) the same way."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner
from import_files import spec_bench_choice, spec_bench_line, write_lines

from alcheck.cli.main import cli
from alcheck.rundir.traces import TRACES_FILE, read_traces

K = 3
ENTRIES = {81: [[4, 1, 2, 3], [2, 2]], 82: [[1, 1, 4], [3, 4, 1, 2]]}  # question -> turns -> a + 1 per step


def imported(tmp_path, name: str, entries: dict):
    lines = [
        spec_bench_line(q, "writing", [spec_bench_choice(0, turns, [sum(e) for e in turns])])
        for q, turns in entries.items()
    ]
    out = tmp_path / name
    result = CliRunner().invoke(
        cli,
        [
            "import",
            "spec-bench",
            str(write_lines(tmp_path / f"{name}.jsonl", lines)),
            "--k",
            str(K),
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out


def as_old_steps_file(run_dir):
    """Rewrite traces.csv as `alcheck import` wrote it before: steps.csv, one row per step."""
    rows = [
        {"k": t.k, "repeat": t.repeat, "question_id": t.question_id, "turn": t.turn, "step": s, "accepted": a}
        for t in read_traces(run_dir).values()
        for s, a in enumerate(t.accepted, start=1)
    ]
    with (run_dir / "steps.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["k", "repeat", "question_id", "turn", "step", "accepted"])
        writer.writeheader()
        writer.writerows(rows)
    (run_dir / TRACES_FILE).unlink()


def compare(a, b) -> dict:
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["divergence"]


def test_two_imports_diverge_step_by_step_and_an_old_steps_file_reads_the_same(tmp_path):
    changed = {81: [[4, 1, 2, 3], [2, 2]], 82: [[1, 1, 4], [3, 1, 4, 2]]}  # question 82 turn 2 from step 1
    a, b = imported(tmp_path, "a", ENTRIES), imported(tmp_path, "b", changed)
    found = compare(a, b)
    assert found["summary"][str(K)] == {
        "turns": 4,
        "identical": 3,
        "traced": 4,
        "traced_identical": 3,
        "totals_only": 0,
        "totals_identical": 0,
    }
    [turn] = found["turns"]
    assert (turn["question_id"], turn["turn"], turn["step"], turn["accepted_a"], turn["accepted_b"]) == (
        "82",
        2,
        1,
        3,
        0,
    )
    assert turn["position"] == 1 + 3 and turn["seq_len"] is None  # no prompt length: no KV block offset
    shown = CliRunner().invoke(cli, ["compare", str(a), str(b)], catch_exceptions=False).output
    assert "step 1 (3 accepted vs 0 accepted) at output token 4, prompt length not recorded" in shown

    before = read_traces(a)
    as_old_steps_file(a)
    assert read_traces(a) == before
    assert compare(a, b) == found
