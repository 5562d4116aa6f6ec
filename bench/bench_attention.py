"""Benchmark (not a test): paged attention, the gather path against torch's flex_attention.

    python bench/bench_attention.py [--device cpu|cuda] [--dtype float32|bfloat16] [--quick]
                                    [--out results/bench-attention.md] [--json FILE]

The gather path is alcheck's own (`alcheck.models.attention.paged_attention`): copy each
request's blocks out of the cache through the block table, then one SDPA call with an additive
causal mask. The flex path reads the cache in place: the KV is the whole pool seen as one
sequence, and a `BlockMask` built straight from the block tables (vLLM's flex backend does the
same) lists each request's physical blocks; a mask_mod maps a physical slot back to its logical
position for causality. Nothing is gathered, but every call goes through torch.compile (eager
flex materialises a score for every slot of the pool).

Each case (batch, context, query length: decode 1, verify K+1 = 4, prefill) first checks that
both paths give the same output, then times one attention call (best of --repeats after a
warm-up); for flex the block mask, built once per forward and shared by all layers, is timed
apart. "per forward" = mask + layers x attention. Compile time is reported, not counted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alcheck.device_info import device_name  # noqa: E402
from alcheck.models.attention import AttnBatch, paged_attention  # noqa: E402

BLOCK_SIZE = 16
WARM_UP = 3
Q_BLOCK = 16  # the block mask's query granularity; the CUDA kernel's tiles are set to match
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Shape:
    name: str
    heads: int
    kv_heads: int
    head_dim: int
    layers: int


DEMO = Shape("demo (4 heads / 2 KV, dim 64)", 4, 2, 64, 4)
LLAMA8B = Shape("Llama-3.1-8B (32 heads / 8 KV, dim 128)", 32, 8, 128, 32)


def make_case(shape: Shape, batch: int, context: int, q_len: int, dtype, device, seed: int = 0):
    """A pool holding `batch` requests of about `context` tokens (lengths vary by up to half),
    their blocks scattered over the pool; each request feeds its last q_len tokens."""
    rng = random.Random(seed)
    seq_lens = [max(q_len, rng.randint(context // 2, context)) for _ in range(batch)]
    blocks_per = [-(-n // BLOCK_SIZE) for n in seq_lens]
    num_blocks = sum(blocks_per) + 1  # block 0 stays the null block
    physical = list(range(1, num_blocks))
    rng.shuffle(physical)
    width = max(blocks_per)
    tables, at = [], 0
    for n in blocks_per:
        tables.append(physical[at : at + n] + [0] * (width - n))
        at += n
    g = torch.Generator().manual_seed(seed)
    cache_shape = (num_blocks, BLOCK_SIZE, shape.kv_heads, shape.head_dim)
    k_cache = torch.randn(cache_shape, generator=g).to(device=device, dtype=dtype)
    v_cache = torch.randn(cache_shape, generator=g).to(device=device, dtype=dtype)
    q_lens = [min(q_len, n) for n in seq_lens]
    q = torch.randn(sum(q_lens), shape.heads, shape.head_dim, generator=g).to(device=device, dtype=dtype)
    positions = [p for n, ql in zip(seq_lens, q_lens) for p in range(n - ql, n)]
    table = torch.tensor(tables, dtype=torch.int32, device=device)
    slots = torch.full((len(positions),), -1, dtype=torch.long, device=device)  # K/V already stored
    batch_meta = AttnBatch.build(positions, slots, table, q_lens, seq_lens, BLOCK_SIZE, "torch", dtype)
    return q, k_cache, v_cache, batch_meta


# -- the flex candidate ------------------------------------------------------------------------


def flex_block_mask(batch: AttnBatch, num_blocks: int):
    """BlockMask over the whole pool: request b may read its own physical blocks, up to its
    query position. Built once per forward (all layers share it)."""
    from torch.nn.attention.flex_attention import BlockMask

    device = batch.block_tables.device
    num, bs = batch.block_tables.shape[0], batch.block_size
    used = torch.tensor([-(-n // bs) for n in batch.seq_lens], device=device)
    width = batch.block_tables.shape[1]
    col = torch.arange(width, device=device)
    tables = batch.block_tables.long()
    kv_indices = torch.zeros(num, 1, 1, num_blocks, dtype=torch.int32, device=device)
    kv_indices[:, 0, 0, :width] = tables.int()
    # physical block -> its logical index in request b (-1: not b's)
    logical = torch.full((num, num_blocks), -1, dtype=torch.long, device=device)
    rows = torch.arange(num, device=device)[:, None].expand(num, width)
    keep = col[None, :] < used[:, None]
    logical[rows[keep], tables[keep]] = col[None, :].expand(num, width)[keep]
    q_start = torch.tensor([s - n for s, n in zip(batch.seq_lens, batch.query_lens)], device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        j = logical[b, kv_idx // bs]
        return (j >= 0) & (j * bs + kv_idx % bs <= q_start[b] + q_idx)

    # every query block of a request lists the same blocks: causality is left to mask_mod
    q_blocks = -(-batch.max_q // Q_BLOCK)
    return BlockMask.from_kv_blocks(
        used.int().view(num, 1, 1).expand(num, 1, q_blocks).contiguous(),
        kv_indices.expand(num, 1, q_blocks, num_blocks).contiguous(),
        BLOCK_SIZE=(Q_BLOCK, bs),
        mask_mod=mask_mod,
        seq_lengths=(batch.max_q, num_blocks * bs),
    )


def flex_paged_attention(flex_fn, q, k_cache, v_cache, batch: AttnBatch, block_mask, scale: float):
    """q [T, heads, dim] -> [T, heads, dim], keys and values read in place from the pool."""
    num, max_q = batch.block_tables.shape[0], batch.max_q
    heads, dim = q.shape[1], q.shape[2]
    if batch.dense:
        padded = q.view(num, max_q, heads, dim)
    else:
        padded = q.new_zeros(num * max_q, heads, dim)
        padded[batch.q_index] = q
        padded = padded.view(num, max_q, heads, dim)
    n_slots = k_cache.shape[0] * k_cache.shape[1]
    keys = k_cache.view(1, n_slots, *k_cache.shape[2:]).transpose(1, 2)
    values = v_cache.view(1, n_slots, *v_cache.shape[2:]).transpose(1, 2)
    # on CUDA the kernel's tiles must divide the 16-token paging blocks (vLLM's flex backend does the same)
    options = (
        {"FORCE_USE_FLEX_ATTENTION": True, "BLOCK_M": Q_BLOCK, "BLOCK_N": batch.block_size}
        if q.is_cuda
        else None
    )
    out = flex_fn(
        padded.transpose(1, 2),
        keys,
        values,
        block_mask=block_mask,
        scale=scale,
        enable_gqa=True,
        kernel_options=options,
    )
    out = out.transpose(1, 2).reshape(num * max_q, heads, dim)
    return out if batch.dense else out[batch.q_index]


# -- timing ------------------------------------------------------------------------------------


def timed(fns, repeats: int, device) -> list[float]:
    """Best wall seconds of each function over `repeats` rounds, after WARM_UP rounds (the first
    calls of a new size pay page faults). The functions take turns within a round, so a busy
    spell on a shared machine hits all of them."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    best = [float("inf")] * len(fns)
    for round_ in range(WARM_UP + repeats):
        for i, fn in enumerate(fns):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            if round_ >= WARM_UP:
                best[i] = min(best[i], time.perf_counter() - start)
    return best


def run_case(shape, batch, context, q_len, dtype, device, repeats, flex_fn):
    q, k_cache, v_cache, meta = make_case(shape, batch, context, q_len, dtype, device)
    scale = shape.head_dim**-0.5
    gather = lambda: paged_attention(q, k_cache, v_cache, meta, scale)  # noqa: E731
    with torch.inference_mode():
        want = gather()
        row = {
            "shape": shape.name,
            "layers": shape.layers,
            "batch": batch,
            "context": context,
            "q_len": q_len,
        }
        try:
            start = time.perf_counter()
            mask = flex_block_mask(meta, k_cache.shape[0])
            got = flex_paged_attention(flex_fn, q, k_cache, v_cache, meta, mask, scale)
            first_s = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run this case is reported
            row["flex_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            row["gather_ms"] = timed([gather], repeats, device)[0] * 1e3
            return row
        tol = 2e-3 if dtype == torch.float32 else 3e-2
        err = (got.float() - want.float()).abs().max().item()
        row["max_abs_diff"] = err
        if not err <= tol:
            row["flex_error"] = f"outputs differ from the gather path by {err:.3g} (tolerance {tol})"
            row["gather_ms"] = timed([gather], repeats, device)[0] * 1e3
            return row
        row["flex_first_call_s"] = first_s  # compiles when a shape is new (dynamic=False)
        seconds = timed(
            [
                gather,
                lambda: flex_block_mask(meta, k_cache.shape[0]),
                lambda: flex_paged_attention(flex_fn, q, k_cache, v_cache, meta, mask, scale),
            ],
            repeats,
            device,
        )
        row["gather_ms"], row["flex_mask_ms"], row["flex_ms"] = (x * 1e3 for x in seconds)
    row["gather_forward_ms"] = row["gather_ms"] * shape.layers
    row["flex_forward_ms"] = row["flex_mask_ms"] + row["flex_ms"] * shape.layers
    row["faster"] = "flex" if row["flex_forward_ms"] < row["gather_forward_ms"] else "gather"
    return row


def cases(device, quick: bool):
    """(shape, batch, context, q_len): decode, verify (K=3) and prefill."""
    if quick:
        return [(DEMO, 2, 32, 4)]
    if device.type == "cuda":  # the most telling first: gpu-check's budget may stop the list early
        first = [(64, 512, 4), (16, 512, 4), (1, 512, 4), (64, 2048, 1), (64, 2048, 4), (4, 1024, 1024)]
        rest = [(b, c, q) for b in (1, 16, 64) for c in (512, 2048) for q in (1, 4) if (b, c, q) not in first]
        return [(LLAMA8B, *case) for case in first + rest]
    out = [(DEMO, b, c, q) for b in (1, 32) for c in (128, 512) for q in (1, 4)]
    # 80 x 256 x verify: the demo run (80 MT-Bench questions in one batch, K=3)
    out += [(DEMO, 80, 256, 4), (DEMO, 4, 256, 256), (LLAMA8B, 1, 512, 1), (LLAMA8B, 4, 256, 4)]
    return out


def measure(
    device: str = "cpu",
    dtype: str = "float32",
    repeats: int = 5,
    quick: bool = False,
    compile_flex: bool = True,
    budget_s: float | None = None,
) -> dict:
    """Rows of measurements; stops adding cases once budget_s has passed."""
    from torch.nn.attention.flex_attention import flex_attention

    dev = torch.device(device)
    flex_fn = torch.compile(flex_attention, dynamic=False) if compile_flex else flex_attention
    start, rows, notes = time.perf_counter(), [], []
    for shape, batch, context, q_len in cases(dev, quick):
        if budget_s is not None and time.perf_counter() - start > budget_s:
            notes.append(
                f"stopped at the {budget_s:.0f} s budget before {shape.name} batch {batch} "
                f"context {context} q_len {q_len}"
            )
            break
        rows.append(run_case(shape, batch, context, q_len, DTYPES[dtype], dev, repeats, flex_fn))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    timed_rows = [r for r in rows if "faster" in r]
    wins = sum(r["faster"] == "flex" for r in timed_rows)
    return {
        "device": device,
        "dtype": dtype,
        "compiled": compile_flex,
        "repeats": repeats,
        "rows": rows,
        "notes": notes,
        "flex_wins": wins,
        "cases_timed": len(timed_rows),
        "keep": "flex" if timed_rows and wins > len(timed_rows) / 2 else "gather",
    }


def markdown(result: dict, machine: str) -> str:
    max_diff = max((r["max_abs_diff"] for r in result["rows"] if "faster" in r), default=float("nan"))
    header = (
        "shape",
        "batch",
        "context",
        "q_len",
        "gather ms / layer",
        "flex ms / layer",
        "flex mask ms",
        "gather ms / forward",
        "flex ms / forward",
        "faster",
        "note",
    )
    lines = [
        "# Paged attention: gather path vs flex_attention",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {machine}; torch {torch.__version__}, torch threads {torch.get_num_threads()}; "
        f"{platform.platform()}",
        f"- {result['device']}, {result['dtype']}, block size {BLOCK_SIZE}; flex "
        f"{'through torch.compile (dynamic=False)' if result['compiled'] else 'eager'}; "
        "each time is the best of "
        f"{result.get('repeats', '?')} rounds in which gather, "
        f"the flex mask and flex take turns, after {WARM_UP} warm-up rounds",
        "- per forward = layers x attention (+ flex's block mask, built once per forward)",
        f"- flex's output equals the gather path's to within {max_diff:.1e} (max abs) in every timed case",
        f"- flex faster in {result['flex_wins']} of {result['cases_timed']} cases: keep **{result['keep']}**",
        *(f"- {n}" for n in result["notes"]),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in result["rows"]:
        note = r.get("flex_error", "")
        if "flex_first_call_s" in r:
            note = f"first flex call {r['flex_first_call_s']:.1f} s (compiles each new shape)"
        cells = (
            r["shape"],
            r["batch"],
            r["context"],
            r["q_len"],
            f"{r['gather_ms']:.3f}",
            f"{r['flex_ms']:.3f}" if "flex_ms" in r else "-",
            f"{r['flex_mask_ms']:.3f}" if "flex_mask_ms" in r else "-",
            f"{r['gather_forward_ms']:.2f}" if "gather_forward_ms" in r else "-",
            f"{r['flex_forward_ms']:.2f}" if "flex_forward_ms" in r else "-",
            r.get("faster", "-"),
            note,
        )
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per case; the best counts")
    parser.add_argument("--quick", action="store_true", help="two tiny cases (a smoke run)")
    parser.add_argument("--eager", action="store_true", help="flex without torch.compile")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-attention.md"))
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure(args.device, args.dtype, args.repeats, args.quick, not args.eager)
    text = markdown(result, device_name(args.device))
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
