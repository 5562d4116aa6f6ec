"""Shipped results name no machine's folders (issue 33), and a run made inside the current folder
records its paths relative to it and still resumes."""

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


def test_a_run_inside_the_folder_records_relative_paths_and_resumes(pair_dirs, tmp_path, monkeypatch):
    for d in pair_dirs:
        shutil.copytree(d, tmp_path / "models" / d.name)
    monkeypatch.chdir(tmp_path)
    args = ["run", "--target", str(tmp_path / "models" / pair_dirs[0].name)]
    args += ["--draft", str(tmp_path / "models" / pair_dirs[1].name), *SMALL]
    whole = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "whole")], catch_exceptions=False)
    assert whole.exit_code == 0, whole.output
    config = json.loads((tmp_path / "whole" / "run.json").read_text())["config"]
    assert (config["target"], config["draft"], config["out"]) == (
        f"models/{pair_dirs[0].name}",
        f"models/{pair_dirs[1].name}",
        "whole",
    )

    interrupt_at_cell(monkeypatch, 3)
    cut = CliRunner().invoke(cli, [*args, "--out", "part"])
    assert json.loads((tmp_path / "part" / "run.json").read_text())["status"] == "partial", cut.output
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    resumed = CliRunner().invoke(cli, ["run", "--resume", "part"], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    rows = [(tmp_path / d / "questions.csv").read_bytes() for d in ("part", "whole")]
    assert rows[0] == rows[1]


def test_engine_check_names_one_stable_summary_per_variant_and_strips_machine_paths(monkeypatch):
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "bench"))
    import engine_check as ec

    assert ec.summary_name("full", list(ec.CHECKED)) == "summary"
    assert ec.summary_name("ci", list(ec.CHECKED)) == "summary-ci"
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
