"""Benchmark (not a test): the static runner's attention on a GPU, torch's gather path against the
Triton kernel (alcheck/models/triton_attention.py), on the batches the static step builds.

    python bench/bench_triton_attention.py [--out results/bench-triton-attention.md] [--dry-run]

Llama-3.1-8B's attention (32 heads / 8 KV heads, dim 128), bfloat16, block size 16, a batch of
64 lanes at 512, 1024 and 2048 tokens of context (lengths vary by up to half; the table is as
wide as the longest lane, as the static runner pads it), feeding 1 query (decode), 4 (a K=3
chain) or 32 (a K=5 tree with a random tree mask). Each case checks the two kernels agree, then
times one attention call with CUDA events (median of 20 after a warm-up). Without CUDA it says so
and exits 0; --dry-run runs tiny shapes on the CPU under TRITON_INTERPRET=1 (checks the script).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def case(batch, context, n, tree, dims, device, dtype, gen):
    """(q, k_cache, v_cache, make_batch) for one static step's attention."""
    import torch

    from alcheck.runner.static.batch import static_batch
    from alcheck.runner.tree import ancestor_mask

    heads, kv_heads, dim, block_size = dims
    lens = torch.randint(context // 2, context + 1, (batch,), generator=gen)
    width = -(-int(lens.max()) // block_size)
    table = (torch.randperm(batch * width, generator=gen) + 1).view(batch, width)
    k, v = (
        torch.randn(batch * width + 1, block_size, kv_heads, dim, generator=gen).to(device, dtype)
        for _ in "kv"
    )
    positions = (lens[:, None] - n + torch.arange(n)).to(device)
    q = torch.randn(batch * n, heads, dim, generator=gen).to(device, dtype)
    mask = None
    if tree:
        parents = torch.stack([torch.randint(0, i, (batch,), generator=gen) for i in range(1, n)], 1)
        mask = ancestor_mask(parents.to(device), n)
    table = table.to(device)
    return (
        q,
        k,
        v,
        lambda: static_batch(
            table, positions, block_size, dtype, tree_mask=mask, tree_width=n if tree else 0
        ),
    )


def timed(fn, device, repeats):
    import torch

    for _ in range(3):
        fn()
    if device.type != "cuda":
        return float("nan")
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


TOLERANCE = (
    2e-2  # bfloat16 / float16 outputs, relative to the largest |output| (the kernels round differently)
)
HEADER = [
    "| batch | context | queries | tree | torch ms | triton ms | torch / triton | max abs diff |",
    "|---|---|---|---|---|---|---|---|",
]


def shapes_for(dry_run: bool) -> list[tuple]:
    if dry_run:
        return [(2, 40, 1, False), (2, 40, 5, True)]
    return [(64, c, n, tree) for c in (512, 1024, 2048) for n, tree in ((1, False), (4, False), (32, True))]


def measure(device, dtype, dims, shapes, repeats: int = 20, deadline: float | None = None) -> list[dict]:
    """One row per shape: both kernels' median ms (NaN off CUDA), their largest difference and
    whether it is within TOLERANCE. Stops early (fewer rows) past `deadline` (time.perf_counter())."""
    import time

    import torch

    from alcheck.models.attention import FORCE_ENV, paged_attention

    gen = torch.Generator().manual_seed(0)
    rows, forced = [], os.environ.get(FORCE_ENV)
    try:
        for batch, context, n, tree in shapes:
            if deadline is not None and time.perf_counter() > deadline:
                break
            q, k, v, make_batch = case(batch, context, n, tree, dims, device, dtype, gen)
            runs = {}
            for kernel in ("torch", "triton"):
                os.environ[FORCE_ENV] = kernel
                call = functools.partial(paged_attention, q, k, v, make_batch(), dims[2] ** -0.5)
                runs[kernel] = (call(), timed(call, device, repeats))
            want, got = runs["torch"][0].float(), runs["triton"][0].float()
            diff = (want - got).abs().max().item()
            rows.append(
                {
                    "batch": batch,
                    "context": context,
                    "queries": n,
                    "tree": tree,
                    "torch_ms": runs["torch"][1],
                    "triton_ms": runs["triton"][1],
                    "max_abs_diff": diff,
                    "agree": diff <= TOLERANCE * max(1.0, want.abs().max().item()),
                }
            )
    finally:
        if forced is None:
            os.environ.pop(FORCE_ENV, None)
        else:
            os.environ[FORCE_ENV] = forced
    return rows


def markdown(rows: list[dict]) -> list[str]:
    return HEADER + [
        f"| {r['batch']} | {r['context']} | {r['queries']} | {'yes' if r['tree'] else 'no'} | "
        f"{r['torch_ms']:.3f} | {r['triton_ms']:.3f} | {r['torch_ms'] / r['triton_ms']:.2f} | "
        f"{r['max_abs_diff']:.2e} |"
        for r in rows
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on the CPU, under the interpreter"
    )
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    from alcheck.models.attention import triton_available

    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA: the Triton kernel is timed on a GPU only (--dry-run checks the script on the CPU)")
        return 0
    if not triton_available():
        print("triton is not installed: pip install 'triton>=3' (or alcheck[gpu])")
        return 0
    device = torch.device("cpu" if args.dry_run else "cuda")
    dtype = torch.float16 if args.dry_run else torch.bfloat16  # the interpreter's bfloat16 dot is wrong
    dims = (4, 2, 32, 16) if args.dry_run else (32, 8, 128, 16)
    rows = measure(device, dtype, dims, shapes_for(args.dry_run))
    table = "\n".join(markdown(rows))
    print(table)
    if args.out:
        Path(args.out).write_text(
            f"# Paged attention: torch gather vs Triton\n\n{__doc__.split(chr(10) * 2)[1]}\n\n{table}\n"
        )
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
