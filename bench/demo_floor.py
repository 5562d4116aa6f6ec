"""How fast `make demo` could be on this machine: the demo's own matmuls and attention, timed alone.

Issue 36 asks for the demo (the demo pair, EAGLE-1, K=1..5, 3 repeats, 80 MT-Bench questions, 256
tokens, float32) in 30 s on 2 cores. This measures the floor under that wall:

1. the demo as `make demo` runs it (`python -m alcheck run` into a temp folder): wall, the cells'
   sum, and what is spent outside them;
2. the same 15 cells in-process (one loaded pair, one Engine, the sweep's shuffles), recording the
   shape of every linear call (rows x in x out, with its packed oneDNN weight) and every SDPA call;
3. each recorded shape replayed alone, best of 3, times its count, at 2 threads and at 1: the
   cost of the arithmetic itself with every other op, Python and gather gone;
4. the imports a run cannot skip (torch, and transformers for the tokenizer and the config), each
   in a fresh interpreter.

    python bench/demo_floor.py        # ~4 minutes: results/demo-floor.md
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from alcheck.device_info import device_name  # noqa: E402
from alcheck.models import cpu_linear  # noqa: E402

KS, REPEATS, MAX_TOKENS = (1, 2, 3, 4, 5), 3, 256


def demo_wall() -> dict:
    """`python -m alcheck run` (the demo's defaults) into a temp folder, as `make demo` runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo"
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "alcheck", "run", "--out", str(out)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - start
        cells = json.loads((out / "run.json").read_text())["cells"]
    return {"wall": wall, "cells": sum(c["wall_s"] for c in cells), "count": len(cells)}


def record_shapes() -> tuple[Counter, Counter, dict]:
    """Run the demo's cells in-process with every linear and SDPA call's shape counted."""
    from alcheck.gpu_check.demo_pieces import demo_prompts, generate, load_pair
    from alcheck.models.cpu_linear import pack_linears
    from alcheck.runner.engine import Engine

    target, head = load_pair(torch.float32, "cpu")
    pack_linears(target.model, head)  # as `alcheck run` loads the pair (methods/pair.py)
    _, prompts = demo_prompts(target.tokenizer, None)
    linears, sdpa, weights = Counter(), Counter(), {}
    linear_forward, sdpa_call = cpu_linear.PackedLinear.forward, F.scaled_dot_product_attention

    def counted_linear(module, x):
        key = (x.numel() // x.shape[-1], module.in_features, module.out_features, id(module))
        linears[key] += 1
        weights[id(module)] = module
        return linear_forward(module, x)

    def counted_sdpa(q, k, v, attn_mask=None, **kwargs):
        sdpa[(tuple(q.shape), tuple(k.shape), None if attn_mask is None else tuple(attn_mask.shape))] += 1
        return sdpa_call(q, k, v, attn_mask=attn_mask, **kwargs)

    cpu_linear.PackedLinear.forward, F.scaled_dot_product_attention = counted_linear, counted_sdpa
    try:
        engine = Engine()  # one per loaded pair, as the sweep keeps it
        for k in KS:
            for repeat in range(REPEATS):  # the sweep's order and shuffles
                generate(target.model, head, target.eos_token_ids, prompts, k, MAX_TOKENS, repeat, engine)
    finally:
        cpu_linear.PackedLinear.forward, F.scaled_dot_product_attention = linear_forward, sdpa_call
    return linears, sdpa, weights


def best_of(fn, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def replay(linears: Counter, sdpa: Counter, weights: dict, threads: int) -> dict:
    """Each recorded shape alone, best of 3, times its count: seconds for linears and for SDPA."""
    torch.set_num_threads(threads)
    linear_s = flops = 0.0
    with torch.no_grad():
        for (rows, n_in, n_out, mid), count in linears.items():
            module = weights[mid]
            x = torch.randn(rows, n_in)
            linear_s += count * best_of(lambda m=module, x=x: m(x))
            flops += count * 2.0 * rows * n_in * n_out
        sdpa_s = 0.0
        for (q_shape, k_shape, mask_shape), count in sdpa.items():
            q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(k_shape)
            mask = torch.zeros(mask_shape) if mask_shape else None
            call = functools.partial(F.scaled_dot_product_attention, q, k, v, attn_mask=mask)
            sdpa_s += count * best_of(call)
    return {"linear": linear_s, "sdpa": sdpa_s, "gflops": flops / linear_s / 1e9}


def import_floor() -> dict:
    """Seconds for the imports every `alcheck run` needs, each in a fresh interpreter."""
    tokenizer = (
        "from alcheck import paths; from alcheck.prompts.tokenizer import load_tokenizer; "
        "from alcheck.models.llama_loading import model_config; import json; "
        "raw = json.loads((paths.DEMO_TARGET_DIR / 'config.json').read_text()); "
        "model_config(raw, paths.DEMO_TARGET_DIR, 'target'); "
        "load_tokenizer(paths.DEMO_TARGET_DIR, 'target')"
    )
    out = {}
    for name, code in (("python", "pass"), ("torch", "import torch"), ("torch+tokenizer+config", tokenizer)):
        walls = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
            walls.append(time.perf_counter() - start)
        out[name] = min(walls)
    return out


def report(demo: dict, linears: Counter, sdpa: Counter, floors: dict, imports: dict) -> str:
    two, one = floors[2], floors[1]
    startup = imports["torch+tokenizer+config"]
    serial = startup + two["linear"] + two["sdpa"]
    parallel = startup + (one["linear"] + one["sdpa"]) / 2
    calls = sum(linears.values())
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"""# How fast `make demo` could be here (bench/demo_floor.py)

Date: {now:%Y-%m-%d %H:%M} UTC. Machine: {device_name("cpu")}, \
{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}; load average \
{" ".join(f"{x:.2f}" for x in os.getloadavg())} at the end.

The demo: the demo pair, EAGLE-1, K=1..5, {REPEATS} repeats, 80 MT-Bench questions, {MAX_TOKENS} tokens, \
float32 ({demo["count"]} cells).

| what | seconds |
|---|---:|
| `python -m alcheck run` (the demo, as `make demo` runs it) | {demo["wall"]:.1f} |
| its cells (run.json's wall_s, summed) | {demo["cells"]:.1f} |
| outside the cells (imports, loading, planning, saving, the table) | {demo["wall"] - demo["cells"]:.1f} |
| imports every run needs: python alone / torch / torch + tokenizer + model config, fresh interpreter | \
{imports["python"]:.1f} / {imports["torch"]:.1f} / {startup:.1f} |
| the demo's {calls} linear calls ({len(linears)} distinct rows x weight) alone, 2 threads | \
{two["linear"]:.1f} ({two["gflops"]:.0f} GFLOP/s) |
| its {sum(sdpa.values())} SDPA calls alone, 2 threads | {two["sdpa"]:.1f} |
| the linears alone, 1 thread | {one["linear"]:.1f} ({one["gflops"]:.0f} GFLOP/s) |
| the SDPA calls alone, 1 thread | {one["sdpa"]:.1f} |
| **floor, one process at 2 threads**: imports + linears + SDPA | **{serial:.1f}** |
| **floor, two 1-thread workers splitting the cells perfectly**: imports + \
(linears + SDPA at 1 thread) / 2 | **{parallel:.1f}** |

Each shape is replayed alone, best of 3, hot in cache, with the weights the demo packs (oneDNN) and
additive masks of the demo's shapes: no KV gather, no norms, RoPE, sampling, acceptance, batch
assembly or Python. The real demo needs all of those, so it cannot be faster than the floor on this
machine; a 30 s demo needs everything but the matmuls and attention nearly gone as well as both
cores kept busy.
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "demo-floor.md")
    args = parser.parse_args(argv)
    imports = import_floor()
    print(f"imports: {imports}", flush=True)
    demo = demo_wall()
    print(f"demo: {demo['wall']:.1f} s", flush=True)
    linears, sdpa, weights = record_shapes()
    floors = {t: replay(linears, sdpa, weights, t) for t in (2, 1)}
    print(f"floors: {floors}", flush=True)
    text = report(demo, linears, sdpa, floors, imports)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
