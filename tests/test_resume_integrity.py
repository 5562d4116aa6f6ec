"""Resume checks its data (issue 24, items 1 and 2): a questions.csv that was cut, emptied, edited
or torn runs the affected passes again instead of resuming to a smaller "complete" sample; the
report refuses such a run in one line; a checkpoint changed in place, or an edited run.json config,
refuses the resume. The oracle is always the same run done in one go.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli

ARGS = [
    "--ks",
    "1,2",
    "--repeats",
    "2",
    "--limit",
    "4",
    "--max-tokens",
    "10",
    "--block-size",
    "4",
    "--reference",
    "none",
]


def invoke(args):
    return CliRunner().invoke(cli, args)


@pytest.fixture(scope="module")
def whole(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "run"
    result = invoke(["run", *pair_args, *ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def copy_run(whole, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(whole, out)
    (out / ".alcheck.lock").unlink(missing_ok=True)
    return out


def summary(out):
    return [(s["k"], s["al_mean"]) for s in json.loads((out / "run.json").read_text())["summary"]]


def csv_lines(out):
    return (out / "questions.csv").read_bytes().split(b"\r\n")


def resume_equals_whole(out, whole, passes_again):
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    for k, repeat in passes_again:  # stored 0-based, read from 1
        assert f"K={k} repeat {repeat + 1} pass does not add up" in " ".join(result.output.split()), (
            result.output
        )
    assert (out / "questions.csv").read_bytes() == (whole / "questions.csv").read_bytes()
    assert summary(out) == summary(whole)


def test_a_csv_cut_at_a_line_boundary_runs_the_cut_pass_again(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    lines = csv_lines(out)  # header, 16 rows (K x repeat x 4 questions), trailing ""
    (out / "questions.csv").write_bytes(b"\r\n".join(lines[:-4] + [b""]))  # the last pass loses 3 rows
    report = invoke(["report", str(out), "-o", str(tmp_path / "r.md")])
    assert report.exit_code == 2 and "K=2 repeat 2 pass does not add up" in report.output, report.output
    resume_equals_whole(out, whole, [(2, 1)])


@pytest.mark.parametrize("how", ["deleted", "header only"])
def test_a_lost_csv_runs_every_pass_again(whole, tmp_path, how):
    out = copy_run(whole, tmp_path)
    if how == "deleted":
        (out / "questions.csv").unlink()
    else:
        (out / "questions.csv").write_bytes(csv_lines(out)[0] + b"\r\n")
    resume_equals_whole(out, whole, [(1, 0), (1, 1), (2, 0), (2, 1)])


def test_one_deleted_row_of_a_finished_pass_runs_that_pass_again(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    lines = csv_lines(out)
    del lines[2]  # the second row: K=1 repeat 0
    (out / "questions.csv").write_bytes(b"\r\n".join(lines))
    resume_equals_whole(out, whole, [(1, 0)])


def test_a_torn_last_row_resumes_to_the_whole_run(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    data = (out / "questions.csv").read_bytes()
    (out / "questions.csv").write_bytes(data[: len(data) - 9])  # the last row cut mid-line
    resume_equals_whole(out, whole, [(2, 1)])
    again = invoke(["run", "--resume", str(out)])  # and it stays resumable
    assert again.exit_code == 0 and "already complete" in again.output, again.output


def test_an_edited_run_json_config_refuses_the_resume(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    meta = json.loads((out / "run.json").read_text())
    meta["config"]["max_tokens"], meta["status"] = 20, "partial"
    (out / "run.json").write_text(json.dumps(meta))
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 2 and "config was edited after the run started" in result.output, result.output


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_checkpoint_changed_in_place_refuses_the_resume(pair_dirs, tmp_path, role):
    import torch
    from safetensors.torch import load_file, save_file

    target, draft = (shutil.copytree(d, tmp_path / name) for d, name in zip(pair_dirs, ("t", "d")))
    out = tmp_path / "run"
    first = invoke(
        [
            "run",
            "--target",
            str(target),
            "--draft",
            str(draft),
            *ARGS[:2],
            "--repeats",
            "1",
            *ARGS[4:],
            "--out",
            str(out),
        ]
    )
    assert first.exit_code == 0, first.output
    meta = json.loads((out / "run.json").read_text())
    assert set(meta["fingerprints"]) == {"target", "draft", "runtime", "inputs"}
    meta["config"]["repeats"], meta["status"] = 2, "partial"  # as if a repeat were still to run
    from alcheck.rundir.store import settings_sha

    meta["settings_sha"] = settings_sha(meta["config"])
    (out / "run.json").write_text(json.dumps(meta))
    folder = target if role == "target" else draft
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if weights[0].suffix == ".safetensors":
        state = load_file(str(weights[0]))
        save_file({k: v * 1.01 for k, v in state.items()}, str(weights[0]))  # same names and shapes
    else:
        state = torch.load(weights[0], weights_only=True)
        torch.save({k: v * 1.01 for k, v in state.items()}, weights[0])
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 2, result.output
    line = [x for x in result.output.splitlines() if x.startswith("Error:")][0]
    assert f"the {role} checkpoint is not the one this run measured" in line and weights[0].name in line, line


def test_sigterm_on_a_builtin_run_saves_what_finished_and_releases_the_folder(
    pair_args, whole, tmp_path, monkeypatch
):
    """SIGTERM is handled like Ctrl-C on the built-in runner too: exit 143, what is saved and how to
    finish it printed, the folder's lock released; the resumed run is the whole run."""
    import os
    import signal

    from alcheck.rundir.store import RunStore

    real = RunStore.record_cell

    def record_then_sigterm(self, cell):
        real(self, cell)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises in this (the main) thread

    monkeypatch.setattr(RunStore, "record_cell", record_then_sigterm)
    out = tmp_path / "term"
    result = invoke(["run", *pair_args, *ARGS, "--out", str(out)])
    assert result.exit_code == 143, result.output
    assert (
        f"terminated: 1 finished (K, repeat) cells are saved in {out}; finish with: alcheck run --resume "
        f"{out}" in " ".join(result.output.split())
    )
    assert not (out / ".alcheck.lock").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the run
    monkeypatch.undo()
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (whole / "questions.csv").read_bytes()


@pytest.mark.parametrize("cut", [9, 40])  # in the last column, and mid-row
def test_a_torn_last_row_names_resume_as_the_fix(whole, tmp_path, cut):
    out = copy_run(whole, tmp_path)
    data = (out / "questions.csv").read_bytes()
    (out / "questions.csv").write_bytes(data[: len(data) - cut])
    report = invoke(["report", str(out), "-o", str(tmp_path / "r.md")])
    message = " ".join(report.output.split())
    assert report.exit_code == 2 and f"alcheck run --resume {out}" in message, report.output
    assert len(report.output.strip().splitlines()) == 1, report.output


def test_a_whole_last_row_without_its_newline_still_reads(whole, tmp_path):
    out = copy_run(whole, tmp_path)
    data = (out / "questions.csv").read_bytes()
    (out / "questions.csv").write_bytes(data.rstrip(b"\r\n"))
    report = invoke(["report", str(out), "-o", str(tmp_path / "r.md")])
    assert report.exit_code == 0, report.output
