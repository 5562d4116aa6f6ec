"""The static runner against the paged runner on the embedded demo pair (issue 22), CPU float32:
all 80 MT-Bench questions (turn 1, vllm-example, 256 tokens), K=1..5, chains and trees (topk 4),
EAGLE-1 and EAGLE-3 heads, every question in one batch. Writes the paged runner's outputs as the
CPU reference gpu-check's piece g compares the device with (results/gpu/cpu-reference.json) and a
markdown table (results/bench-static-demo.md): equal outputs and counts, wall and CPU seconds.

    OMP_NUM_THREADS=1 python bench/bench_static_demo.py [--limit N] [--ks 1,3] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from alcheck import paths  # noqa: E402
from alcheck.gpu_check import reference  # noqa: E402
from alcheck.gpu_check.demo_pieces import demo_prompts  # noqa: E402
from alcheck.models.loading import load_target  # noqa: E402
from alcheck.runner.engine import Engine  # noqa: E402
from alcheck.runner.paged import PagedRunner  # noqa: E402
from alcheck.runner.static.runner import StaticRunner  # noqa: E402


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int)
    parser.add_argument("--ks", default="1,2,3,4,5")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target = load_target(str(paths.DEMO_TARGET_DIR))
    heads = reference.load_heads(target, torch.float32, "cpu")
    _, prompts = demo_prompts(target.tokenizer, args.limit)
    ks = tuple(int(k) for k in args.ks.split(","))
    lines = [
        "| head | K | drafting | AL | static == paged (tokens and counts) | paged wall s / CPU s | "
        "static wall s / CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    entries, engine, all_equal = {}, Engine(), True
    for head, k, topk, t in reference.shapes(ks):
        shape = (target, heads[head], prompts, k, topk, t, reference.MAX_TOKENS)
        (paged, _), pw, pc = timed(partial(reference.generate, PagedRunner, *shape))
        (static, _), sw, sc = timed(partial(reference.generate, StaticRunner, *shape, engine=engine))
        want, got = reference.record(paged), reference.record(static)
        same = sum(a == b and x.output_ids == y.output_ids for a, b, x, y in zip(want, got, paged, static))
        all_equal &= same == len(prompts)
        entries[reference.shape_name(head, k, topk, t)] = want
        steps = sum(r.steps for r in paged)
        al = (steps + sum(r.accepted for r in paged)) / steps
        drafting = "chain" if topk == 1 else f"tree, topk {topk}, T {t}"
        lines.append(
            f"| {head} | {k} | {drafting} | {al:.3f} | {same}/{len(prompts)} | {pw:.1f} / {pc:.1f} | "
            f"{sw:.1f} / {sc:.1f} |"
        )
        print(lines[-1], flush=True)
    meta = {
        "questions": len(prompts),
        "max_tokens": reference.MAX_TOKENS,
        "block_size": reference.BLOCK_SIZE,
        "tree_topk": reference.TREE_TOPK,
        **reference.torch_info(),
    }
    if not args.no_write and args.limit is None:
        reference.write(entries, meta)
        out = paths.REPO_ROOT / "results" / "bench-static-demo.md"
        out.write_text(
            "# Static runner vs paged runner on the demo pair (CPU float32)\n\n"
            f"{datetime.date.today()}, torch {torch.__version__}, 1 thread, {len(prompts)} questions, "
            "256 tokens, every question in one batch. Wall seconds depend on what else runs on the "
            "machine; CPU seconds less so.\n\n" + "\n".join(lines) + "\n"
        )
    print("all equal" if all_equal else "DIFFERENCES FOUND")
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
