"""Piece e: paged attention on the device, alcheck's gather path against flex_attention with a
paged block mask (bench/bench_attention.py), then against alcheck's Triton kernel on the static
runner's batches, Llama-8B's attention in bfloat16 at batch 64 and 512-2,048 tokens, chains and
trees (bench/bench_triton_attention.py); the kernels must agree. Both benches are loaded from the
repository by path."""

from __future__ import annotations

import importlib.util
import sys
import time

from alcheck import paths
from alcheck.gpu_check.common import Context, Piece

BENCH = paths.REPO_ROOT / "bench" / "bench_attention.py"
TRITON_BENCH = paths.REPO_ROOT / "bench" / "bench_triton_attention.py"


def load_bench(path=BENCH):
    name = f"alcheck_{path.stem}"
    if name not in sys.modules:  # registered first: dataclasses look their module up while it loads
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def run(ctx: Context, piece: Piece, budget_s: float):
    if not BENCH.is_file():
        return piece.skip(f"{BENCH} is not here (an installed copy without the repository)")
    bench = load_bench()
    deadline = ctx.piece_deadline(budget_s)
    left = deadline - time.perf_counter()
    if left < 5:
        return piece.skip("no time left in the 9-minute budget")
    # the dry run skips torch.compile: compiling on a CPU takes longer than the whole dry run
    dtype = "float32" if ctx.dry_run else "bfloat16"
    result = bench.measure(
        str(ctx.device),
        dtype,
        repeats=2 if ctx.dry_run else 5,
        quick=ctx.dry_run,
        compile_flex=not ctx.dry_run,
        budget_s=left * (0.8 if ctx.device.type != "cuda" else 0.55),
    )  # the rest: triton
    piece.data.update(result)
    piece.notes.extend(result["notes"])
    failed = [r for r in result["rows"] if "flex_error" in r]
    if failed:
        piece.notes.append(f"flex could not run {len(failed)} case(s): {failed[0]['flex_error']}")
    piece.notes.append(
        f"keep: {result['keep']} (flex faster per forward in {result['flex_wins']} "
        f"of {result['cases_timed']} timed cases)"
    )
    triton_rows(ctx, piece, deadline)


def triton_rows(ctx: Context, piece: Piece, deadline: float):
    """The Triton kernel against the gather path, where it runs compiled: on CUDA with triton."""
    import torch

    from alcheck.models.attention import triton_available

    if ctx.device.type != "cuda":  # its CPU interpreter must be chosen before triton is imported
        piece.notes.append(
            "triton kernel: timed on a GPU only (tests/test_triton_attention.py checks it on the CPU)"
        )
        return
    if not triton_available() or not TRITON_BENCH.is_file():
        piece.notes.append("triton kernel: not measured (triton not installed, or no bench/ here)")
        return
    bench = load_bench(TRITON_BENCH)
    rows = bench.measure(
        ctx.device, torch.bfloat16, (32, 8, 128, 16), bench.shapes_for(False), deadline=deadline
    )
    piece.data["triton"] = rows
    bad = [r for r in rows if not r["agree"]]
    piece.check(
        "the Triton kernel agrees with the gather path (bfloat16, Llama-8B attention)",
        rows and not bad,
        f"{len(rows) - len(bad)} of {len(rows)} shapes within {bench.TOLERANCE} of the largest output"
        + (f"; worst {max(r['max_abs_diff'] for r in bad):.2e}" if bad else ""),
    )
    if rows:
        ratios = [r["torch_ms"] / r["triton_ms"] for r in rows]
        piece.notes.append(
            f"triton vs gather: {min(ratios):.2f}-{max(ratios):.2f}x as fast over {len(rows)} shapes"
        )
