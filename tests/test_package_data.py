"""The wheel carries its data (issue 35): the question files and reference tables, copied from the
repository's datasets/ and results/references/ at build time, equal their sources byte for byte;
the installed package reads them through importlib.resources from any folder; no top-level
`datasets` package is made. bench/wheel_check.sh does the same with a venv and whole sweeps."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from alcheck import paths

ROOT = paths.REPO_ROOT
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "alcheck",
    *paths.SHIPPED_SOURCES.values(),
)


def source_files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of what the build reads (the checkout gets no build/)."""
    if not (ROOT / "setup.py").is_file():
        pytest.skip("not run from a checkout")
    tree = tmp_path_factory.mktemp("tree")
    for name in BUILD_INPUTS:
        src, dst = ROOT / name, tree / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "data"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    out = tmp_path_factory.mktemp("dist")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(tree),
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    [built] = out.glob("alcheck-*.whl")
    return built


def test_setup_py_copies_what_paths_reads():
    tree = ast.parse((ROOT / "setup.py").read_text())
    [table] = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "SHIPPED_SOURCES"
    ]
    assert ast.literal_eval(table) == paths.SHIPPED_SOURCES


def test_the_wheel_ships_copies_equal_to_the_sources(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        for name, source in {**paths.SHIPPED_SOURCES, "demo/models": "alcheck/demo/models"}.items():
            prefix = f"alcheck/{name}/"
            shipped = {
                n[len(prefix) :]: z.read(n) for n in names if n.startswith(prefix) and not n.endswith("/")
            }
            expected = source_files(ROOT / source)
            assert sorted(shipped) == sorted(expected), name
            assert all(shipped[n] == expected[n] for n in expected), name
        top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        assert top_level == {"alcheck"}, top_level  # never a `datasets` beside Hugging Face's
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert z.read(info).decode().split() == ["alcheck"]


def test_the_installed_package_reads_its_data_from_any_folder(wheel, tmp_path):
    site, empty = tmp_path / "site", tmp_path / "empty"
    empty.mkdir()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    code = (
        "import json, alcheck, alcheck.paths as p; "
        "print(json.dumps([alcheck.__file__, str(p.MT_BENCH_FILE), str(p.REFERENCES_DIR), "
        "str(p.DEMO_TARGET_DIR), p.MT_BENCH_FILE.is_file()]))"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=empty, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    where, mt_bench, references, demo, exists = json.loads(out.stdout)
    for path in (where, mt_bench, references, demo):
        assert Path(path).is_relative_to(site / "alcheck"), path
    assert exists
    listed = subprocess.run(
        [sys.executable, "-m", "alcheck", "references", "--json"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    names = {r["name"] for r in json.loads(listed.stdout)}
    assert names == {
        json.loads(p.read_text())["name"] for p in (ROOT / "results" / "references").glob("*.json")
    }
    assert sorted(p.name for p in empty.iterdir()) == []  # listing writes nothing
