"""The speed table of issue 22 on the CPU, where it applies (no CUDA: no graphs, no launch or sync
counts), and the demo sweep's wall time and CPU seconds. Benchmark, not a test.

    OMP_NUM_THREADS=1 python bench/bench_speed_cpu.py [--skip-demo] [--out results/bench-speed-cpu.md]

1. gpu-check piece d's table (alcheck/gpu_check/llama8b.py) on a random target shaped like the demo
   target (hidden 256, 4 layers, 4 heads / 2 KV heads, vocab 4096) with a random EAGLE-1 head, float32:
   transformers generate() vs alcheck eager (paged) and static at batch 1/16/64, K=0 and 3, K=5 chain
   vs tree (topk 8, T 32); median step, spread, floor (measured copy bandwidth and matmul peak).
2. `python -m alcheck run` (make demo) in a child process: wall seconds and CPU seconds.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from alcheck.device_info import device_name  # noqa: E402
from alcheck.gpu_check import llama8b  # noqa: E402
from alcheck.gpu_check.common import Context, Piece  # noqa: E402
from alcheck.gpu_check.report import _llama  # noqa: E402

DEMO_SHAPED = dict(
    llama8b.LLAMA31_8B,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=4096,
)


def speed_table() -> list[str]:
    cfg = {
        "shape": DEMO_SHAPED,
        "prompt": 64,
        "new_tokens": 48,
        "warm": 6,
        "copy_bytes": 1 << 26,
        "sweep_tokens": 64,
        "sweep_questions": 80,
        "dtype": torch.float32,
        "name": "random, demo-shaped (h256 L4 vocab 4096)",
    }
    piece = Piece("d", "speed")
    ctx = Context(False, torch.device("cpu"), ROOT / "results", time.perf_counter() + 3600)
    llama8b.run(ctx, piece, 3600, cfg)
    failed = [c["name"] for c in piece.checks if not c["ok"]]
    return _llama(piece.data) + ([f"FAILED: {', '.join(failed)}", ""] if failed else [])


def demo_timing() -> str:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "alcheck", "run", "--out", str(Path(tmp) / "demo")],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return (
        f"`make demo` (`python -m alcheck run`, K=1..5, 3 repeats, 80 questions): {wall:.1f} s wall, "
        f"{cpu:.1f} CPU-s ({status})."
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-speed-cpu.md"))
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lines = [
        "# Speed table on the CPU (issue 22)",
        "",
        f"{datetime.date.today()}, {device_name('cpu')}, "
        f"{os.cpu_count()} logical cores, torch {torch.__version__} "
        f"with {torch.get_num_threads()} thread(s), "
        f"{platform.python_version()}. CPU only: no graphs, no launch or "
        "sync counts. The machine may be shared: compare rows of one run with each other.",
        "",
    ]
    lines += speed_table()
    if not args.skip_demo:
        lines += [demo_timing(), ""]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
