"""Wall time of one sweep through each executor on this machine: a plain run, `--devices cpu,cpu`,
and `--executor ray` on a local Ray with 1 and 2 CPU workers (Ray's start-up timed apart).

The sweep: the demo pair (alcheck-demo-llama + its EAGLE-1 head), MT-Bench, K=1..3, 2 repeats, the
first 16 questions, 64 new tokens: 6 cells. Every configuration runs the same command in this
process (click's CliRunner); each must give questions.csv byte for byte the plain run's. The machine
is shared: the load average before and after each configuration goes into the table.

    python bench/bench_ray.py [--out results/bench-ray.md] [--limit 16]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from alcheck.device_info import device_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def sweep_args(limit: int) -> list[str]:
    return ["--ks", "1-3", "--repeats", "2", "--limit", str(limit), "--max-tokens", "64"] + [
        "--reference",
        "none",
    ]


def timed_run(args: list[str], out: Path) -> float:
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["run", *args, "--out", str(out)], catch_exceptions=False)
    wall = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.output}")
    return wall


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-ray.md"))
    parser.add_argument("--limit", type=int, default=16)
    opts = parser.parse_args()
    import ray
    import torch

    torch.set_num_threads(1)
    base = sweep_args(opts.limit)
    rows, tmp = [], Path(tempfile.mkdtemp(prefix="bench-ray-"))

    def measure(label, extra, workers, ray_start=None):
        before = load()
        wall = timed_run([*base, *extra], tmp / label.replace(" ", "_"))
        same = (tmp / label.replace(" ", "_") / "questions.csv").read_bytes() == (
            tmp / "plain" / "questions.csv"
        ).read_bytes()
        rows.append((label, workers, wall, ray_start, same, f"{before} -> {load()}"))
        print(f"{label}: {wall:.1f} s{f' (+ Ray start {ray_start:.1f} s)' if ray_start else ''}", flush=True)

    measure("plain", [], 1)
    measure("devices cpu,cpu", ["--devices", "cpu,cpu"], 2)
    for n in (1, 2):
        start = time.perf_counter()
        ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
        started = time.perf_counter() - start
        measure(f"ray {n} worker{'s' * (n > 1)}", ["--executor", "ray"], n, started)
        ray.shutdown()

    plain = rows[0][2]
    lines = [
        "# Executors on this machine (bench/bench_ray.py)",
        "",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Machine: {device_name('cpu')}, "
        f"{os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}. The machine "
        "is shared with other jobs: the load average (1/5/15 min) before and after each row is shown.",
        "",
        f"Sweep: the demo pair, MT-Bench, K=1..3, 2 repeats, first {opts.limit} questions, 64 new tokens "
        "(6 cells), one intra-op thread per worker. Wall time of the `alcheck run` command (claiming "
        "the folder, planning, loading per worker, the cells, saving); Ray's own start-up "
        "(`ray.init` of a local Ray) is timed apart.",
        "",
        "| executor | workers | wall | vs plain | Ray start | rows equal plain | load average |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for label, workers, wall, ray_start, same, avg in rows:
        start = f"{ray_start:.1f} s" if ray_start is not None else "-"
        lines.append(
            f"| {label} | {workers} | {wall:.1f} s | {plain / wall:.2f}x | {start} | "
            f"{'yes' if same else 'NO'} | {avg} |"
        )
    lines += [
        "",
        "Ray pays its start-up once per command (or never, joining a running cluster with --ray-address) "
        "and a pair load per worker process; a worker keeps its pair for the next cell of the run. On a "
        "machine with few cores shared with other jobs, more workers cannot run faster than the free "
        "cores allow; the point of Ray is more machines, where the cells spread over every node's GPUs.",
    ]
    Path(opts.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
