#!/usr/bin/env python3
"""The isolated virtual environment that holds arctic-inference, built from its source archive, to
check alcheck's suffix decoding rule against arctic's own SuffixDecodingCache.

    python bench/arctic_env.py            # create or reuse it; the last line printed is its python
    python bench/arctic_env.py --check    # only say whether it is there (exit 0) or not (exit 1)

PyPI has arctic-inference 0.3.0 as a source archive only. Its build needs CMake, nanobind 2.9.2,
C++20 and torch >= 2.10 but no CUDA. The venv sees the project's packages (system site packages:
the CPU torch the build compiles against, and alcheck for the comparison) and installs only the
build tools and arctic-inference itself, with --no-deps (its runtime requirements are vLLM's
serving stack; the suffix tree needs none of them). Its CMake must be told which python holds
nanobind (-DPython_EXECUTABLE), or it finds the system one and stops at find_package(nanobind).

Exit codes: 0 ready; 2 the build failed (one line naming the failing step). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ARCTIC_VERSION = "0.3.0"
BUILD_TOOLS = [
    "setuptools>=61",
    "wheel",
    "ninja",
    "cmake>=3.12",
    "nanobind==2.9.2",
    "protobuf==5.29.6",
    "grpcio-tools",
]
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = REPO_ROOT / ".venv-arctic"
STAMP_NAME = "alcheck-arctic.json"


def venv_dir() -> Path:
    return Path(os.environ.get("ARCTIC_VENV") or DEFAULT_VENV)


def venv_python(root: Path) -> Path:
    return root / "bin" / "python"


def ready(root: Path) -> bool:
    stamp = root / STAMP_NAME
    try:
        if json.loads(stamp.read_text()).get("arctic_inference") != ARCTIC_VERSION:
            return False
    except (OSError, ValueError):
        return False
    probe = [str(venv_python(root)), "-c", "import arctic_inference.suffix_decoding"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _pip(python: Path, args: list[str], what: str, env: dict | None = None) -> None:
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if "rror" in ln]
        raise SystemExit(
            f"arctic_env: {what} failed: {lines[0] if lines else 'pip exit ' + str(proc.returncode)}"
        )


def create(root: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True, system_site_packages=True).create(root)
    python = venv_python(root)
    _pip(python, ["install", "-q", *BUILD_TOOLS], "installing the build tools")
    env = dict(os.environ, CMAKE_ARGS=f"-DPython_EXECUTABLE={python}", MAX_JOBS="2")
    with tempfile.TemporaryDirectory() as tmp:
        spec = f"arctic-inference=={ARCTIC_VERSION}"
        _pip(
            python,
            ["download", "-q", "--no-deps", "--no-build-isolation", spec, "-d", tmp],
            "downloading " + spec,
        )
        archives = list(Path(tmp).glob("arctic_inference-*.tar.gz"))
        if not archives:
            raise SystemExit(f"arctic_env: no source archive for {spec} in what pip downloaded")
        _pip(
            python,
            ["install", "-q", "--no-deps", "--no-build-isolation", str(archives[0])],
            "building " + spec,
            env,
        )
    (root / STAMP_NAME).write_text(json.dumps({"arctic_inference": ARCTIC_VERSION}) + "\n")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the venv is ready")
    args = parser.parse_args(argv)
    root = venv_dir()
    if ready(root):
        print(venv_python(root))
        return 0
    if args.check:
        print(
            f"arctic_env: no arctic-inference {ARCTIC_VERSION} venv at {root}: run python bench/arctic_env.py"
        )
        return 1
    try:
        print(create(root))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
