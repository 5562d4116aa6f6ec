"""Where a decode step's time goes: torch.profiler over alcheck's runner (K=0, batch 1).

The gpu-check found alcheck's Llama-3.1-8B-shaped step at 111-141 ms on an H200 for batch 1-64
against a 3.9 ms weight-bandwidth floor: fixed per-step cost. This script profiles a short
generate() and prints the ops with the most self CPU time, how many times each ran per step,
and the CUDA time, so that cost can be attributed.

    python bench/profile_step.py                                   # tiny shape, CPU (a smoke run)
    python bench/profile_step.py --shape llama8b --device cuda --out results/gpu/profile-step.md
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from alcheck.gpu_check.llama8b import LLAMA31_8B, TINY, build
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=("tiny", "llama8b"), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    shape = LLAMA31_8B if args.shape == "llama8b" else TINY
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    _, target, _ = build(shape, device, dtype)
    prompt = [[1 + (i * 7919) % (shape["vocab_size"] - 1) for i in range(128)]]
    runner = PagedRunner(target, None, [], RunnerConfig(num_spec_tokens=0, device=str(device)))
    runner.generate(prompt, 4)  # warm-up: kernels, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    runner.generate(prompt, args.new_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        runner.generate(prompt, args.new_tokens)
        if device.type == "cuda":
            torch.cuda.synchronize()
    steps = args.new_tokens - 1  # the prefill emits the first token
    table = prof.key_averages().table(
        sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60
    )
    text = (
        f"# alcheck decode step profile\n\n- shape {args.shape}, "
        f"device {device}, dtype {dtype}, batch 1, K=0, "
        f"{args.new_tokens} new tokens ({steps} steps after the prefill)\n"
        f"- wall {wall * 1e3:.1f} ms for the generate() (prefill included), "
        f"{wall / args.new_tokens * 1e3:.2f} ms "
        f"per token\n- torch {torch.__version__}\n\n```\n{table}\n```\n"
    )
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
