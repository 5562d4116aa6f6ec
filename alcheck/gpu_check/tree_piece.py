"""Piece f: tree drafting (EAGLE-2 dynamic trees) on the device with the demo pair.

float32: every tree shape must be lossless against target-only greedy decoding on the device and
give the CPU's tokens and counts on the first questions (the same runner, tree masks through the
torch attention path). bfloat16 and temperature > 0: measured, not required to be exact.
"""

from __future__ import annotations

import copy
import time

import torch

from alcheck.gpu_check.common import Context, Piece, counts_consistent, pooled_al
from alcheck.gpu_check.demo_pieces import BLOCK_SIZE, MAX_BATCH, demo_prompts, load_pair
from alcheck.methods.table import proposer_for

SHAPES = [(3, 4, 16), (5, 8, 32)]  # (K draft steps, topk, tokens verified per step)


def _generate(model, head, eos, prompts, max_tokens, k=0, topk=1, t=None, temperature=0.0):
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    cfg = RunnerConfig(
        num_spec_tokens=k,
        block_size=BLOCK_SIZE,
        max_batch_size=MAX_BATCH,
        topk=topk,
        num_draft_tokens=t,
        temperature=temperature,
    )
    return PagedRunner(model, proposer_for(head) if k else None, eos, cfg).generate(prompts, max_tokens)


def run(ctx: Context, piece: Piece, budget_s: float):
    deadline = ctx.piece_deadline(budget_s)
    limit, max_tokens, cpu_n = (4, 12, 2) if ctx.dry_run else (None, 256, 6)
    target, head = load_pair(torch.float32, ctx.device)
    eos = target.eos_token_ids
    _, prompts = demo_prompts(target.tokenizer, limit)
    n = len(prompts)
    oracle = _generate(target.model, None, eos, prompts, max_tokens)
    cpu_model, cpu_head = (
        (target.model, head)
        if ctx.device.type == "cpu"
        else (copy.deepcopy(target.model).cpu(), copy.deepcopy(head).cpu())
    )
    rows = []
    for k, topk, t in SHAPES:
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget before K={k} topk {topk}")
            break
        start = time.perf_counter()
        results = _generate(target.model, head, eos, prompts, max_tokens, k, topk, t)
        seconds = time.perf_counter() - start
        chain = _generate(target.model, head, eos, prompts, max_tokens, k)
        same = sum(r.output_ids == o.output_ids for r, o in zip(results, oracle))
        name = f"K={k} topk {topk} T {t}"
        piece.check(
            f"{name}: lossless (tree == target-only greedy on {ctx.device})", same == n, f"{same}/{n}"
        )
        piece.check(f"{name}: counts consistent", counts_consistent(results, k))
        cpu = _generate(cpu_model, cpu_head, eos, prompts[:cpu_n], max_tokens, k, topk, t)
        agree = sum(
            (a.output_ids, a.steps, a.accepted, list(a.accepted_per_pos))
            == (b.output_ids, b.steps, b.accepted, list(b.accepted_per_pos))
            for a, b in zip(results, cpu)
        )
        piece.check(
            f"{name}: same tokens and counts as a CPU float32 run (first {cpu_n} questions)",
            agree == cpu_n,
            f"{agree}/{cpu_n}",
        )
        piece.check(
            f"{name}: tree AL above the chain's at the same depth",
            pooled_al(results) > pooled_al(chain),
            f"{pooled_al(results):.4f} vs {pooled_al(chain):.4f}",
        )
        rows.append(
            {
                "k": k,
                "topk": topk,
                "t": t,
                "al_tree": pooled_al(results),
                "al_chain": pooled_al(chain),
                "lossless": same / n,
                "seconds": seconds,
            }
        )
    piece.data.update(questions=n, max_tokens=max_tokens, rows=rows)
    if time.perf_counter() < deadline:  # bfloat16 and sampling: they must run; their numbers are measured
        target16, head16 = load_pair(torch.bfloat16, ctx.device)
        k, topk, t = SHAPES[0]
        res16 = _generate(target16.model, head16, eos, prompts, max_tokens, k, topk, t)
        sampled = _generate(target.model, head, eos, prompts, max_tokens, k, topk, t, temperature=1.0)
        piece.check(
            "bfloat16 and temperature 1.0 trees run; counts consistent",
            counts_consistent(res16, k) and counts_consistent(sampled, k),
        )
        piece.data.update(al_tree_bf16=pooled_al(res16), al_tree_t1=pooled_al(sampled))
