"""Resume refuses rows measured under other conditions (issue: resume integrity, items 1-4): the
device kind, dtype and attention kernel as resolved; the dataset, --chat-template and turn-1
prompts by their contents; the accepted counts of a pass and of each row; and a SIGTERM while a
cell is saved waits until it is saved whole. A refused resume exits 2 in one line and changes no file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli

ARGS = [
    "--ks",
    "1",
    "--repeats",
    "2",
    "--limit",
    "2",
    "--max-tokens",
    "8",
    "--block-size",
    "4",
    "--reference",
    "none",
]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def invoke(args):
    return CliRunner().invoke(cli, args)


def run(pair_args, out, *extra):
    result = invoke(["run", *pair_args, *ARGS, *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def whole(pair_args, tmp_path_factory):
    return run(pair_args, tmp_path_factory.mktemp("whole") / "run")


def copy_run(whole, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    (out / ".alcheck.lock").unlink(missing_ok=True)
    return out


def edit_meta(out, change):
    meta = json.loads((out / "run.json").read_text())
    change(meta)
    (out / "run.json").write_text(json.dumps(meta))


def cut_last_cell(meta):
    """As if the run was stopped after the pass before its last was recorded: its rows stay in the
    CSV unrecorded (a resume that goes ahead drops them; a refused one must not)."""
    meta["cells"], meta["status"] = meta["cells"][:-1], "partial"


def partial_copy(whole, tmp_path, *roles, change=lambda meta: None):
    """A copy of the run with its last pass cut, without the fingerprints of `roles` (as a run from
    before them), and `change` made to its run.json."""
    out = copy_run(whole, tmp_path)

    def edit(meta):
        cut_last_cell(meta)
        for role in roles:
            del meta["fingerprints"][role]
        change(meta)

    edit_meta(out, edit)
    return out


def snapshot(out):
    return {
        p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and p.name != ".alcheck.lock"
    }


def refused(out, *args) -> str:
    """Resume, expect exit 2 and no file changed; the error line."""
    before = snapshot(out)
    result = invoke(["run", "--resume", str(out), *args])
    assert result.exit_code == 2, result.output
    assert snapshot(out) == before
    return " ".join(result.output.split())


def read_rows(out):
    return list(csv.DictReader(io.StringIO((out / "questions.csv").read_text())))


def write_rows(out, rows):
    with (out / "questions.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)


# -- 1. device, dtype and attention kernel as resolved ----------------------------------------------


def test_the_run_records_its_resolved_runtime_and_inputs(whole):
    prints = json.loads((whole / "run.json").read_text())["fingerprints"]
    assert prints["runtime"] == {"device": "cpu", "dtype": "float32", "attention": "torch-sdpa"}
    assert set(prints["inputs"]) == {"dataset mt_bench", "prompts"}


def test_typing_the_resolved_device_and_dtype_resumes(whole, tmp_path):
    """The run typed --device auto --dtype auto; the fix the refusal names must be accepted."""
    out = partial_copy(whole, tmp_path)
    result = invoke(["run", "--resume", str(out), "--device", "cpu", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (whole / "questions.csv").read_bytes()


@pytest.mark.parametrize("recorded", ["fingerprint", "environment only"])
def test_another_resolved_dtype_refuses_the_resume(whole, tmp_path, recorded):
    """--dtype auto resolved to bfloat16 then (a GPU) and float32 now: never pooled. A run from before
    the runtime fingerprint is judged by its environment."""

    def bfloat16(meta):
        meta["environment"]["dtype"] = "bfloat16"
        meta["fingerprints"].get("runtime", {})["dtype"] = "bfloat16"

    roles = ("runtime",) if recorded == "environment only" else ()
    line = refused(partial_copy(whole, tmp_path, *roles, change=bfloat16))
    assert "dtype bfloat16 then, float32 now" in line, line
    assert "pass --device cpu --dtype bfloat16 as the run used, or start a new --out directory" in line, line


def test_another_attention_kernel_refuses_the_resume(whole, tmp_path):
    line = refused(
        partial_copy(
            whole,
            tmp_path,
            change=lambda meta: meta["fingerprints"]["runtime"].update(attention="flash-attn"),
        )
    )
    assert "attention kernel flash-attn then, torch-sdpa now" in line, line
    assert "resume where the flash-attn attention kernel is used" in line, line


# -- 2. dataset, chat template and prompts by their contents ----------------------------------------


def test_a_dataset_file_changed_in_place_refuses_the_resume(pair_args, tmp_path):
    questions = tmp_path / "q.jsonl"
    rows = [{"question_id": i, "category": "writing", "turns": [f"Write about topic {i}."]} for i in range(2)]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run(pair_args, tmp_path / "run", "--dataset", str(questions))
    edit_meta(out, cut_last_cell)
    rows[1]["turns"] = ["Write about something else."]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = refused(out)
    assert (
        f"the dataset {questions} changed since this run measured it" in line and "restore its file" in line
    ), line


def test_a_chat_template_changed_in_place_refuses_the_resume(pair_args, tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text(TEMPLATE)
    out = run(pair_args, tmp_path / "run", "--chat-template", str(template))
    edit_meta(out, cut_last_cell)
    template.write_text(TEMPLATE.replace("<|assistant|>", "<|bot|>"))
    line = refused(out)
    assert f"the --chat-template file {template} changed since this run measured it" in line, line


def test_changed_prompts_refuse_the_resume_of_a_run_without_input_fingerprints(whole, tmp_path):
    """A run from before the inputs fingerprint: its rows' prompt_hash still name the question."""
    out = partial_copy(whole, tmp_path, "inputs")
    rows = read_rows(out)
    rows[0]["prompt_hash"] = "0" * 16
    write_rows(out, rows)
    line = refused(out)
    assert (
        f"the turn-1 prompts are not the ones this run measured (question {rows[0]['question_id']}" in line
    ), line


def test_a_run_without_the_new_fingerprints_resumes_with_one_note(whole, tmp_path):
    # an environment too old to name its attention backend: the runtime is unknown, not a difference
    out = partial_copy(
        whole, tmp_path, "runtime", "inputs", change=lambda meta: meta["environment"].pop("attention_backend")
    )
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.count("predates the fingerprints") == 1, result.output
    assert "device, dtype, attention, dataset mt_bench, prompts" in " ".join(result.output.split())
    assert set(json.loads((out / "run.json").read_text())["fingerprints"]) == {
        "target",
        "draft",
        "runtime",
        "inputs",
    }
    assert (out / "questions.csv").read_bytes() == (whole / "questions.csv").read_bytes()


# -- 3. accepted counts ------------------------------------------------------------------------------


def test_each_pass_records_its_accepted_drafts(whole):
    rows, cells = read_rows(whole), json.loads((whole / "run.json").read_text())["cells"]
    for cell in cells:
        mine = [r for r in rows if (int(r["k"]), int(r["repeat"])) == (cell["k"], cell["repeat"])]
        assert cell["accepted"] == sum(int(r["accepted"]) for r in mine) > 0


def test_a_pass_whose_accepted_drafts_do_not_add_up_runs_again(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    rows = read_rows(out)
    per_pos = rows[0]["accepted_per_pos"].split(";")
    per_pos[0] = str(int(per_pos[0]) + 1)  # the row stays self-consistent; its pass does not
    rows[0]["accepted"], rows[0]["accepted_per_pos"] = str(int(rows[0]["accepted"]) + 1), ";".join(per_pos)
    write_rows(out, rows)
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert "K=1 repeat 1 pass does not add up (accepted" in " ".join(result.output.split()), result.output
    assert (out / "questions.csv").read_bytes() == (whole / "questions.csv").read_bytes()


def test_a_row_whose_accepted_is_not_its_per_position_sum_is_corrupt(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    rows = read_rows(out)
    rows[1]["accepted"] = str(int(rows[1]["accepted"]) + 1)
    write_rows(out, rows)
    line = refused(out)
    assert (
        "questions.csv is corrupt (the K=1 repeat 1 row of "
        f"question {rows[1]['question_id']} turn 1 has accepted "
        f"{rows[1]['accepted']} but accepted_per_pos {rows[1]['accepted_per_pos']})"
    ) in line, line


# -- 4. SIGTERM while a cell is saved -----------------------------------------------------------------


def test_signals_deferred_delivers_sigterm_to_its_handler_after_the_block():
    from alcheck.executors.processes import signals_deferred

    calls = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            assert calls == []  # held inside the block
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_sigterm_between_a_cells_rows_and_its_record_saves_the_cell_whole(pair_args, tmp_path, monkeypatch):
    """SIGTERM right after the second pass's rows reach questions.csv: run.json still records that
    pass (exit 143), so the saved run adds up and a report reads it."""
    from alcheck.rundir import store as run_store

    real, writes = run_store._write_csv, []

    def write_then_sigterm(path, *args, **kwargs):
        real(path, *args, **kwargs)
        writes.append(path.name)
        if writes.count("questions.csv") == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(run_store, "_write_csv", write_then_sigterm)
    out = tmp_path / "term"
    result = invoke(["run", *pair_args, *ARGS, "--out", str(out)])
    assert result.exit_code == 143, result.output
    assert len(json.loads((out / "run.json").read_text())["cells"]) == 2
    assert len(read_rows(out)) == 4
    report = invoke(["report", str(out), "-o", str(tmp_path / "r.md")])
    assert report.exit_code == 0, report.output


def test_a_complete_run_still_refuses_a_contradicting_flag(whole, tmp_path):
    """Nothing is left to measure, but `--resume DIR --dtype bfloat16` must not answer "already complete"
    as if bfloat16 had been measured."""
    out = copy_run(whole, tmp_path)
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    line = refused(out, "--dtype", "bfloat16")
    assert "dtype float32 then, bfloat16 now" in line, line
