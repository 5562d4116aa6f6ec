"""Tensor parallelism on CPU: TP=1 vs TP=2 on the demo pair (alcheck-demo-llama: 4 layers, hidden
256, 4 heads / 2 KV heads, vocabulary 4096; its EAGLE-1 head), gloo over loopback.

Each configuration runs in its own spawned ranks (alcheck.tp.launch.run_ranks), one intra-op
thread per rank. Per rank: weight bytes (target shard + the replicated head), KV cache bytes
(target + draft, the same block count), and the decode step time (mean wall time of one
verify + accept + propose step, after a warm-up generate) at K=3 over a batch of 8 prompts.
TP=1 uses the unsplit loaders and modules (the path every run takes today). The outputs at
TP=2 are compared with TP=1's (greedy: they must be identical).

It also times, on the TP=2 ranks, the vocab-parallel lm_head (local matmul + all-gather) and
embedding (masked lookup + all-reduce) against a replicated full-vocabulary lm_head matmul and
lookup on the same rows: what replicating them would save per call, and cost in memory.

    python bench/bench_tp.py [--out results/bench-tp.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OMP_NUM_THREADS", "1")

K = 3
NUM_PROMPTS = 8
MAX_TOKENS = 64
BLOCK_SIZE = 16
REPEATS = 200  # timed calls per lm_head / embedding variant


def _timed(fn, repeats=REPEATS):
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def _rank(tp, target_dir: str, draft_dir: str, prompts):
    import torch
    import torch.nn.functional as F

    from alcheck.methods.pair import PairPlan, load_pair
    from alcheck.methods.table import proposer_for
    from alcheck.models.loading import load_eagle, load_target
    from alcheck.models.sizes import module_bytes
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    torch.set_num_threads(1)
    if tp.size == 1:  # today's path: unsplit modules, no process group in the model
        target = load_target(target_dir)
        head = load_eagle(draft_dir, target)
    else:
        loaded = load_pair(
            PairPlan(Path(target_dir), Path(draft_dir), "eagle", "float32"), str(tp.device), tp=tp
        )
        target, head = loaded.target, loaded.head
    runner = PagedRunner(
        target.model,
        proposer_for(head),
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=K, block_size=BLOCK_SIZE),
    )
    runner.generate(prompts, MAX_TOKENS)  # warm-up
    times = []
    step = runner._step

    def timed_step(running, waiting):
        start = time.perf_counter()
        step(running, waiting)
        times.append(time.perf_counter() - start)

    runner._step = timed_step
    results = runner.generate(prompts, MAX_TOKENS)
    out = {
        "rank": tp.rank,
        "weights": module_bytes(target.model) + module_bytes(head),
        "target_weights": module_bytes(target.model),
        "kv": runner.kv_cache.numel() * runner.kv_cache.element_size()
        + runner.draft_kv_cache.numel() * runner.draft_kv_cache.element_size(),
        "kv_heads": runner.kv_cache.shape[-2],
        "step_s": sum(times) / len(times),
        "steps": len(times),
        "outputs": [r.output_ids for r in results],
    }
    import torch.distributed as dist

    if tp.size > 1:
        lm_head, embedding = target.model.lm_head, target.model.model.embed_tokens
        vocab = lm_head.vocab_size
        full_head = tp.all_gather_last(lm_head.weight.t().contiguous(), vocab).t().contiguous()
        full_embed = tp.all_gather_last(embedding.weight.t().contiguous(), vocab).t().contiguous()
        rows = NUM_PROMPTS * (K + 1)
        hidden = torch.randn(rows, full_head.shape[1], generator=torch.Generator().manual_seed(0))
        ids = torch.randint(0, vocab, (rows,), generator=torch.Generator().manual_seed(1))
        with torch.inference_mode():
            out["head_parallel_s"] = _timed(lambda: target.model.compute_logits(hidden))
            out["head_replicated_s"] = _timed(lambda: F.linear(hidden, full_head))
            out["embed_parallel_s"] = _timed(lambda: target.model.embed(ids))
            out["embed_replicated_s"] = _timed(lambda: F.embedding(ids, full_embed))
            x = torch.zeros(rows, full_head.shape[1])
            out["all_reduce_s"] = _timed(lambda: dist.all_reduce(x))
        out["head_embed_full_bytes"] = (full_head.numel() + full_embed.numel()) * full_head.element_size()
    everyone = [out]
    if tp.size > 1:
        everyone = [None] * tp.size
        dist.all_gather_object(everyone, out)
    return everyone


def _machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-tp.md"))
    args = parser.parse_args()
    import torch

    from alcheck import paths
    from alcheck.tp.launch import run_ranks

    target_dir, draft_dir = str(paths.DEMO_TARGET_DIR), str(paths.DEMO_DRAFT_DIR)
    rng = random.Random(0)
    prompts = [[rng.randrange(10, 4096) for _ in range(rng.randint(20, 60))] for _ in range(NUM_PROMPTS)]
    runs = {}
    for n in (1, 2):
        start = time.perf_counter()
        runs[n] = run_ranks(n, _rank, target_dir, draft_dir, prompts, threads=1)
        print(f"TP={n}: {time.perf_counter() - start:.1f} s including start-up", flush=True)
    same = all(r["outputs"] == runs[1][0]["outputs"] for r in runs[2])
    total = runs[1][0]["target_weights"]
    lines = [
        "# Tensor parallelism on CPU (bench/bench_tp.py)",
        "",
        f"Date: 2026-11-30. Machine: {_machine()}, torch "
        f"{torch.__version__}, gloo over loopback, one intra-op "
        "thread per rank. The machine was shared with other jobs while this ran.",
        "",
        "On 2 cores TP=2 is about correctness and memory, not speed: the split matmuls of a model "
        "this small take microseconds, and every layer adds two all-reduces, the embedding one more and "
        "the lm_head an all-gather, each a loopback round trip.",
        "",
        "Demo pair (alcheck-demo-llama + alcheck-demo-eagle), "
        f"float32, K={K}, {NUM_PROMPTS} prompts of 20-60 "
        f"random tokens, {MAX_TOKENS} new tokens, block size {BLOCK_SIZE}; target-only weights at TP=1: "
        f"{total / 2**20:.2f} MiB.",
        "",
        "| TP | rank | target weights | + replicated head | KV cache "
        "(target + draft) | KV heads per layer | decode step | steps |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (1, 2):
        for r in runs[n]:
            lines.append(
                f"| {n} | {r['rank']} | {r['target_weights'] / 2**20:.2f} MiB "
                f"({r['target_weights'] / total:.1%}) "
                f"| {r['weights'] / 2**20:.2f} MiB | {r['kv'] / 2**20:.2f} MiB | {r['kv_heads']} "
                f"| {r['step_s'] * 1e3:.2f} ms | {r['steps']} |"
            )
    first = runs[2][0]
    lines += [
        "",
        f"Outputs at TP=2 identical to TP=1: {'yes' if same else 'NO'}.",
        "",
        "Vocab-parallel vs replicated embedding and lm_head (TP=2, rank 0, "
        f"{NUM_PROMPTS * (K + 1)} rows, mean of {REPEATS} calls):",
        "",
        "| | vocab-parallel (this code) | replicated |",
        "|---|---:|---:|",
        f"| lm_head | {first['head_parallel_s'] * 1e6:.0f} us (matmul + all-gather) | "
        f"{first['head_replicated_s'] * 1e6:.0f} us |",
        f"| embedding | {first['embed_parallel_s'] * 1e6:.0f} us (lookup + all-reduce) | "
        f"{first['embed_replicated_s'] * 1e6:.0f} us |",
        f"| memory per rank | 1/2 of {first['head_embed_full_bytes'] / 2**20:.2f} MiB | "
        f"{first['head_embed_full_bytes'] / 2**20:.2f} MiB |",
        "",
        f"One all-reduce of {NUM_PROMPTS * (K + 1)} hidden rows: {first['all_reduce_s'] * 1e6:.0f} us.",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    assert same, "TP=2 outputs differ from TP=1"


if __name__ == "__main__":
    main()
