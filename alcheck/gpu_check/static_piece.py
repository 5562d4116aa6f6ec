"""Piece g: the static runner on the device must equal the CPU. The demo pair in float32, all 80
MT-Bench questions, K=1..5, chains and trees (topk 4), the EAGLE-1 and the EAGLE-3 head, through
the static runner with CUDA graphs: every question's tokens and counts must equal the paged
runner's on the CPU (results/gpu/cpu-reference.json, bench/bench_static_demo.py), and every graph
replay must equal the eager static step on the same input, bit for bit (StepGraphs.check). The
dry run compares a few questions with a paged run made here on the CPU."""

from __future__ import annotations

import time

import torch

from alcheck.gpu_check import reference
from alcheck.gpu_check.common import Context, Piece, pooled_al
from alcheck.gpu_check.demo_pieces import demo_prompts


def run(ctx: Context, piece: Piece, budget_s: float):
    from alcheck import paths
    from alcheck.models.loading import load_target
    from alcheck.runner.engine import Engine
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.static.graphs import StepGraphs
    from alcheck.runner.static.runner import StaticRunner

    deadline = ctx.piece_deadline(budget_s)
    limit, ks, max_tokens = (3, (2,), 16) if ctx.dry_run else (None, (1, 2, 3, 4, 5), reference.MAX_TOKENS)
    target = load_target(str(paths.DEMO_TARGET_DIR), torch.float32, str(ctx.device))
    heads = reference.load_heads(target, torch.float32, ctx.device)
    _, prompts = demo_prompts(target.tokenizer, limit)
    shipped = None if ctx.dry_run else reference.read()
    if not ctx.dry_run and shipped is None:
        piece.check(
            "the CPU reference is shipped",
            False,
            f"{reference.REFERENCE_FILE} is missing: run bench/bench_static_demo.py on a CPU and commit it",
        )
        return
    engine = Engine()
    graphs = StepGraphs.for_engine(engine, ctx.device)
    if graphs is not None:
        graphs.check = True  # each replay also runs the eager step on the same input and compares
    else:
        piece.notes.append("no CUDA: graph replay not exercised (the static step runs eagerly)")
    piece.data.update(questions=len(prompts), max_tokens=max_tokens, device=str(ctx.device))
    rows = []
    for head, k, topk, t in sorted(
        reference.shapes(ks), key=lambda s: (s[1], s[2], s[0])
    ):  # K first: a cut spans both
        name = reference.shape_name(head, k, topk, t)
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget before {name}")
            break
        start = time.perf_counter()
        results, runner = reference.generate(
            StaticRunner, target, heads[head], prompts, k, topk, t, max_tokens, engine=engine
        )
        if shipped is not None:
            want = shipped["shapes"].get(name)
        else:
            want = reference.record(
                reference.generate(PagedRunner, target, heads[head], prompts, k, topk, t, max_tokens)[0]
            )
        got = reference.record(results)
        differ = [i for i, (a, b) in enumerate(zip(got, want or [])) if a != b]
        piece.check(
            f"{name}: static on {ctx.device} equals the CPU float32 run",
            want is not None and not differ,
            "no CPU reference for this shape"
            if want is None
            else f"{len(got) - len(differ)}/{len(got)} questions equal"
            + (f" (first differing: {differ[:5]})" if differ else ""),
        )
        rows.append(
            {
                "shape": name,
                "al": pooled_al(results),
                "equal": len(got) - len(differ),
                "questions": len(got),
                "static_steps": runner.static_steps,
                "seconds": time.perf_counter() - start,
            }
        )
    piece.data["rows"] = rows
    if graphs is not None:
        piece.data["graphs"] = {
            "captured": graphs.captures,
            "replays": graphs.replays,
            "mismatches": graphs.mismatches,
            "failed": graphs.failed,
        }
        piece.check(
            "graph replay equals the eager static step (every replay, bit for bit)",
            graphs.replays > 0 and graphs.mismatches == 0,
            f"{graphs.replays} replays of {graphs.captures} graphs, {graphs.mismatches} differed",
        )
        piece.check("every step key was captured", not graphs.failed, f"failed: {graphs.failed or 'none'}")
