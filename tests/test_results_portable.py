"""Shipped results name no machine's folders (issue 33): paths under alcheck's root are recorded
relative to it, a user's paths as given, and both kinds of run resume from any folder."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.rundir.portable import portable_config, portable_path
from tests.conftest import interrupt_at_cell

MACHINE_PATH = re.compile(r"(?<![\w.~])(/work/|/home/|/tmp/|/root/|/Users/|[A-Za-z]:\\\\?)")


def tracked_results() -> list:
    try:
        out = subprocess.run(
            ["git", "ls-files", "results"], cwd=paths.REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [paths.REPO_ROOT / f for f in out]


def test_no_tracked_results_file_holds_a_machine_path():
    files = tracked_results()
    assert files
    found = []
    for f in files:
        if f.suffix not in (".json", ".md", ".csv", ".jsonl", ".log", ".txt"):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{f.relative_to(paths.REPO_ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:20])


def test_the_rule_catches_machine_paths():
    for line in ('"target": "/work/main/x"', "python /home/me/v/bin/python", '"out": "/tmp/run"', r"C:\runs"):
        assert MACHINE_PATH.search(line), line
    for line in ('"target": "alcheck/demo/models/x"', "~/.cache/alcheck/venv", "meta-llama/Llama-3.1-8B"):
        assert not MACHINE_PATH.search(line), line


def test_portable_path(tmp_path):
    inside = tmp_path / "models" / "t"
    assert portable_path(str(inside), tmp_path) == "models/t"
    assert portable_path("/elsewhere/t", tmp_path) == "/elsewhere/t"
    assert portable_path("meta-llama/Llama-3.1-8B", tmp_path) == "meta-llama/Llama-3.1-8B"
    assert portable_path("", tmp_path) == "" and portable_path(None, tmp_path) is None
    assert portable_config({"target": str(inside), "dataset": str(inside)}, tmp_path) == {
        "target": "models/t",
        "dataset": str(inside),
    }


SMALL = ["--ks", "1-2", "--repeats", "2", "--limit", "2", "--max-tokens", "8", "--reference", "none"]


def run_twice_resuming_elsewhere(args, tmp_path, monkeypatch, resume_from, root=None):
    """The run whole, and cut after 3 cells then resumed from `resume_from`: their questions.csv.
    root: alcheck's root as the test pretends it to be."""
    if root is not None:
        monkeypatch.setattr("alcheck.rundir.portable.REPO_ROOT", root)
    whole = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "whole")], catch_exceptions=False)
    assert whole.exit_code == 0, whole.output
    interrupt_at_cell(monkeypatch, 3)
    cut = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "part")])
    assert json.loads((tmp_path / "part" / "run.json").read_text())["status"] == "partial", cut.output
    monkeypatch.undo()
    if root is not None:
        monkeypatch.setattr("alcheck.rundir.portable.REPO_ROOT", root)
    resume_from.mkdir(exist_ok=True)
    monkeypatch.chdir(resume_from)
    resumed = CliRunner().invoke(cli, ["run", "--resume", str(tmp_path / "part")], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    return [(tmp_path / d / "questions.csv").read_bytes() for d in ("part", "whole")]


def test_paths_under_alcheck_root_are_recorded_relative_and_resume_from_any_folder(
    pair_dirs, tmp_path, monkeypatch
):
    root = tmp_path / "root"  # stands for the checkout (or site-packages) holding the demo models
    for d in pair_dirs:
        shutil.copytree(d, root / "models" / d.name)
    args = ["run", "--target", str(root / "models" / pair_dirs[0].name)]
    args += ["--draft", str(root / "models" / pair_dirs[1].name), *SMALL]
    rows = run_twice_resuming_elsewhere(args, tmp_path, monkeypatch, tmp_path / "elsewhere", root)
    assert rows[0] == rows[1]
    config = json.loads((tmp_path / "whole" / "run.json").read_text())["config"]
    assert (config["target"], config["draft"]) == (
        f"models/{pair_dirs[0].name}",
        f"models/{pair_dirs[1].name}",
    )


def test_a_users_paths_stay_as_given_so_the_run_resumes_from_another_folder(pair_dirs, tmp_path, monkeypatch):
    for d in pair_dirs:
        shutil.copytree(d, tmp_path / "models" / d.name)
    monkeypatch.chdir(tmp_path)  # models in the folder the run starts in; resumed from elsewhere
    args = ["run", "--target", str(tmp_path / "models" / pair_dirs[0].name)]
    args += ["--draft", str(tmp_path / "models" / pair_dirs[1].name), *SMALL]
    rows = run_twice_resuming_elsewhere(args, tmp_path, monkeypatch, tmp_path / "elsewhere")
    assert rows[0] == rows[1]
    config = json.loads((tmp_path / "part" / "run.json").read_text())["config"]
    assert config["target"] == str(tmp_path / "models" / pair_dirs[0].name)


def test_engine_check_names_one_stable_summary_per_variant_and_strips_machine_paths(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "bench"))
    import engine_check as ec

    assert ec.summary_name("full", list(ec.CHECKED)) == "summary"
    assert ec.summary_name("ci", list(ec.CI_CHECKED)) == "summary-ci"
    assert ec.summary_name("ci", list(ec.CHECKED)) == "summary-ci-" + "-".join(ec.CHECKED)
    assert ec.summary_name("full", ["draft_model"]) == "summary-draft_model"
    home = str(ec.Path.home().resolve())
    report = ec.portable(
        {
            "runs": str(ec.REPO / "results" / "runs" / "engine-check-1"),
            "vllm_python": f"{home}/.cache/alcheck/venv/bin/python",
            "heads": [{"a": str(ec.REPO / "x"), "cmd": f"run --out {ec.REPO}/y"}],
        }
    )
    assert report == {
        "runs": "results/runs/engine-check-1",
        "vllm_python": "~/.cache/alcheck/venv/bin/python",
        "heads": [{"a": "x", "cmd": "run --out y"}],
    }


def test_bench_outputs_are_named_after_their_bench():
    """results/bench-<name>.md comes from bench/bench_<name>.py, so a reader finds the script."""
    shipped = sorted(p.name for p in (paths.REPO_ROOT / "results").glob("bench*.md"))
    assert shipped
    for name in shipped:
        script = name.removesuffix(".md").replace("-", "_") + ".py"
        assert (paths.REPO_ROOT / "bench" / script).is_file(), f"results/{name}: no bench/{script}"
