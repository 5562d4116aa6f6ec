"""Piece a: the tests marked `gpu`, run by pytest in a child process, output kept in a log."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time

from alcheck import paths
from alcheck.gpu_check.common import Context, Piece

MARK = "pytest.mark." + "gpu"  # spelled apart so this file is not mistaken for a test module using it


def gpu_test_files() -> list[str]:
    tests = paths.REPO_ROOT / "tests"
    if not tests.is_dir():
        return []
    return sorted(
        str(f.relative_to(paths.REPO_ROOT)) for f in tests.glob("test_*.py") if MARK in f.read_text()
    )


def run(ctx: Context, piece: Piece, budget_s: float):
    if importlib.util.find_spec("pytest") is None:
        return piece.skip("pytest is not installed here: pip install pytest (from a wheel) to run these")
    files = gpu_test_files()
    if not files:
        return piece.skip(f"no test file under {paths.REPO_ROOT / 'tests'} uses the gpu mark")
    timeout = max(5.0, ctx.piece_deadline(budget_s) - time.perf_counter())
    args = ["-m", "gpu", "-q", "-rA", "-p", "no:cacheprovider", *files]
    log = ctx.out_dir / "pytest-gpu.log"
    piece.data.update(command="python -m pytest " + " ".join(args), log=log.name)
    output, code = (_in_process if ctx.dry_run else _child)(args, timeout)
    log.write_text(output)
    summary = next(
        (
            line.strip()
            for line in reversed(output.splitlines())
            if re.search(r"\d+ (passed|failed|skipped|errors?|deselected)", line)
        ),
        "",
    )
    counts = {
        kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)
    }
    counts["errors"] = counts.pop("error", 0) + counts.get("errors", 0)
    piece.data.update(counts=counts, summary_line=summary)
    if code is None:
        piece.check(
            "pytest finished within its budget", False, f"stopped after {timeout:.0f} s; see {log.name}"
        )
        return
    # exit 5: nothing collected (every gpu test deselected), which is not a failure of the code
    piece.check(
        "the gpu tests pass",
        code in (0, 5) and not counts.get("failed") and not counts["errors"],
        piece.data["summary_line"] or f"pytest exit code {code}",
    )
    if counts.get("passed", 0) == 0:
        piece.notes.append(
            "no gpu test ran (all skipped): "
            + ("expected on the CPU" if ctx.device.type != "cuda" else "check the log for skip reasons")
        )


def _child(args, timeout):
    """On the GPU: a child process, so a test that breaks the CUDA context breaks only itself."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            cwd=paths.REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        return (out.decode(errors="replace") if isinstance(out, bytes) else out), None


def _in_process(args, timeout):
    """In a dry run (every gpu test skips on the CPU): in this process, sparing a second start-up."""
    import contextlib
    import io

    import pytest

    buffer, cwd = io.StringIO(), os.getcwd()
    try:
        os.chdir(paths.REPO_ROOT)
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            code = int(pytest.main(["-p", "no:capture", *args]))
    finally:
        os.chdir(cwd)
    return buffer.getvalue(), code
