"""Piece e: paged attention on the device, alcheck's gather path against flex_attention with a
paged block mask (bench/bench_attention.py, loaded from the repository by path)."""

from __future__ import annotations

import importlib.util
import sys
import time

from alcheck import paths
from alcheck.gpu_check.common import Context, Piece

BENCH = paths.REPO_ROOT / "bench" / "bench_attention.py"


def load_bench():
    name = "alcheck_bench_attention"
    if name not in sys.modules:  # registered first: dataclasses look their module up while it loads
        spec = importlib.util.spec_from_file_location(name, BENCH)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def run(ctx: Context, piece: Piece, budget_s: float):
    if not BENCH.is_file():
        return piece.skip(f"{BENCH} is not here (an installed copy without the repository)")
    bench = load_bench()
    left = ctx.piece_deadline(budget_s) - time.perf_counter()
    if left < 5:
        return piece.skip("no time left in the 9-minute budget")
    # the dry run skips torch.compile: compiling on a CPU takes longer than the whole dry run
    dtype = "float32" if ctx.dry_run else "bfloat16"
    result = bench.measure(str(ctx.device), dtype, repeats=2 if ctx.dry_run else 5, quick=ctx.dry_run, compile_flex=not ctx.dry_run,
                           budget_s=left * 0.8)
    piece.data.update(result)
    piece.notes.extend(result["notes"])
    failed = [r for r in result["rows"] if "flex_error" in r]
    if failed:
        piece.notes.append(f"flex could not run {len(failed)} case(s): {failed[0]['flex_error']}")
    piece.notes.append(f"keep: {result['keep']} (flex faster per forward in {result['flex_wins']} "
                       f"of {result['cases_timed']} timed cases)")
