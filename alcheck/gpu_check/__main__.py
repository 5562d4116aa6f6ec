"""python -m alcheck.gpu_check [--dry-run] [--out DIR] [--only a,b,...]  (see __init__)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch

from alcheck.device_info import device_name
from alcheck.gpu_check import (
    attention_piece,
    demo_pieces,
    llama8b,
    real_piece,
    static_piece,
    tests_piece,
    tree_piece,
)
from alcheck.gpu_check.common import Context, Piece
from alcheck.gpu_check.report import markdown

TOTAL_S = 9 * 60 + 20
# (key, title, function, budget seconds on a GPU, budget in a dry run); budgets add up to under TOTAL_S
PIECES = [
    ("a", "tests marked gpu", tests_piece.run, 70, 60),
    ("b", "demo pair, float32 on the device vs CPU", demo_pieces.piece_fp32, 60, 20),
    ("c", "demo pair, bfloat16, 3 shuffled repeats", demo_pieces.piece_bf16, 35, 20),
    (
        "h",
        "real model (SmolLM2-135M): float32 equals the CPU rows, bfloat16's AL against float32's",
        real_piece.run,
        60,
        40,
    ),
    (
        "d",
        "Llama-3.1-8B-shaped target: eager / static / graphs vs generate(), floor, sweep, targets",
        llama8b.run,
        150,
        40,
    ),
    ("e", "paged attention: gather vs flex_attention and the Triton kernel", attention_piece.run, 45, 20),
    ("f", "tree drafting on the demo pair: lossless, CPU-equal, bf16 and sampling", tree_piece.run, 45, 30),
    (
        "g",
        "static runner and CUDA graphs on the demo pair: float32 equals the CPU, replay equals eager",
        static_piece.run,
        90,
        30,
    ),
]
SAFETY_S = 15  # for writing the results and the interpreter's exit


def default_out(dry_run: bool) -> Path:
    env = os.environ.get("GPU_CHECK_OUT")
    if env:
        return Path(env)
    return Path.cwd() / "results" / "gpu" / ("dry-run" if dry_run else "")  # absolute: a piece may chdir


def environment(device: torch.device) -> dict:
    from alcheck.models import attention

    pick = attention.pick_attention
    env = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": str(device),
        "device_name": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "flash_attn": attention.flash_attn_varlen_func is not None,
        "triton": attention.triton_available(),
        "attention_backend_bf16_block16": pick(device, 16, torch.bfloat16),
        "attention_backend_bf16_block16_static": pick(device, 16, torch.bfloat16, static=True),
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device_memory_bytes=props.total_memory, device_count=torch.cuda.device_count())
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alcheck.gpu_check", description=__doc__)
    parser.add_argument("--dry-run", action="store_true", help="the same script on the CPU with tiny shapes")
    parser.add_argument("--out", help="output folder (default $GPU_CHECK_OUT, else results/gpu/)")
    parser.add_argument("--only", help="comma-separated piece keys, e.g. b,d")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out) if args.out else default_out(args.dry_run)
    out.mkdir(parents=True, exist_ok=True)
    has_cuda = torch.cuda.is_available()
    device = torch.device("cpu" if args.dry_run or not has_cuda else "cuda:0")
    if args.dry_run:
        torch.set_num_threads(1)  # tiny shapes: threads only add synchronisation
    ctx = Context(args.dry_run, device, out, start + TOTAL_S - SAFETY_S)
    only = set(args.only.split(",")) if args.only else None
    pieces = []
    for key, title, fn, budget, dry_budget in PIECES:
        piece = Piece(key, title)
        pieces.append(piece)
        if only is not None and key not in only:
            piece.skip("not selected (--only)")
            continue
        if key != "a" and not args.dry_run and not has_cuda:
            piece.skip(
                "no CUDA device is visible here (python -m alcheck.gpu_check --dry-run runs it on the CPU)"
            )
            continue
        if time.perf_counter() > ctx.deadline:
            piece.skip("the 9-minute budget was spent before this piece")
            continue
        began = time.perf_counter()
        print(f"[gpu-check] {key}. {title} ...", file=sys.stderr, flush=True)
        try:
            fn(ctx, piece, dry_budget if args.dry_run else budget)
        except Exception as exc:  # noqa: BLE001 - one broken piece must not hide the others' results
            piece.status = "error"
            piece.notes.append(
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            )
            piece.data["traceback"] = traceback.format_exc()[-4000:]
        finally:
            piece.seconds = time.perf_counter() - began
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(f"[gpu-check] {key}. {piece.status} in {piece.seconds:.1f} s", file=sys.stderr, flush=True)
    failed = [p.key for p in pieces if p.status in ("fail", "error")]
    result = {
        "schema": "alcheck.gpu_check/1",
        "dry_run": args.dry_run,
        "environment": environment(device),
        "status": "fail" if failed else "pass",
        "seconds": round(time.perf_counter() - start, 1),
        "pieces": [p.to_dict() for p in pieces],
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(markdown(result))
    print(f"[gpu-check] {result['status']} in {result['seconds']} s: {out / 'summary.md'}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
