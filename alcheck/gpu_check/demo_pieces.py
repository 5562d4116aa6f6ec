"""Pieces b and c: the embedded demo pair on the device, float32 against the CPU, bfloat16 noise.

Prompts are MT-Bench turn 1 under the vllm-example protocol, built exactly as `alcheck run`
builds them, read straight from the shipped jsonl (no `datasets`). Request order for repeat r is
shuffled with the seed "0:r", as the sweep does.
"""

from __future__ import annotations

import copy
import csv
import json
import random
import time

import torch

from alcheck import paths
from alcheck.gpu_check.common import Context, Piece, counts_consistent, pooled_al
from alcheck.methods.table import proposer_for

BASELINE = paths.REPO_ROOT / "results" / "baselines" / "demo"
BLOCK_SIZE, MAX_BATCH = 16, 128


def settings(dry_run: bool) -> dict:
    """The real check mirrors the shipped baseline run; the dry run is tiny."""
    if dry_run:
        return {"limit": 4, "ks": [1, 2], "max_tokens": 12, "cpu_questions": 3}
    return {"limit": None, "ks": [1, 2, 3, 4, 5], "max_tokens": 256, "cpu_questions": 8}


def load_pair(dtype, device):
    from alcheck.models.loading import load_eagle, load_target

    target = load_target(str(paths.DEMO_TARGET_DIR), dtype, str(device))
    head = load_eagle(str(paths.DEMO_DRAFT_DIR), target, dtype, str(device))
    return target, head


def demo_prompts(tokenizer, limit):
    from alcheck.prompts.dataset import validate_jsonl
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol

    questions = validate_jsonl(paths.MT_BENCH_FILE)
    questions = questions[:limit] if limit else questions
    protocol = get_protocol("vllm-example")
    return questions, [build_prompt_ids(tokenizer, protocol, q.turns[:1]) for q in questions]


def generate(model, head, eos_ids, prompts, k, max_tokens, repeat, engine=None):
    """Results in question order, run in the sweep's shuffled order for `repeat`. `engine`: one
    shared by the calls, as the sweep shares one per loaded pair (its prompt cache)."""
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    order = list(range(len(prompts)))
    random.Random(f"0:{repeat}").shuffle(order)
    runner = PagedRunner(
        model,
        proposer_for(head) if k else None,
        eos_ids,
        RunnerConfig(num_spec_tokens=k, block_size=BLOCK_SIZE, max_batch_size=MAX_BATCH),
        engine=engine,
    )
    shuffled = runner.generate([prompts[i] for i in order], max_tokens)
    results = [None] * len(prompts)
    for i, res in zip(order, shuffled):
        results[i] = res
    return results


def read_baseline(questions, prompts, cfg: dict) -> tuple[dict | None, str]:
    """Per-K rows of the shipped CPU float32 run's repeat 0, keyed by question id, when that run
    used these settings and these prompts; else (None, why not)."""
    run_json, rows_csv = BASELINE / "run.json", BASELINE / "questions.csv"
    if not run_json.is_file() or not rows_csv.is_file():
        return None, f"no baseline at {BASELINE}"
    base = json.loads(run_json.read_text())["config"]
    want = {
        "protocol": "vllm-example",
        "dataset": "mt_bench",
        "max_tokens": cfg["max_tokens"],
        "temperature": 0.0,
        "limit": cfg["limit"],
        "kv_lookahead": True,
    }
    off = {k: base.get(k) for k, v in want.items() if base.get(k) != v}
    if (
        off
        or not str(base.get("target", "")).rstrip("/").endswith(paths.DEMO_TARGET_NAME)
        or not str(base.get("draft", "")).rstrip("/").endswith(paths.DEMO_DRAFT_NAME)
    ):
        return None, f"the baseline was made with other settings ({off or 'another pair'})"
    by_k: dict[int, dict] = {}
    with rows_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            if int(row["repeat"]) == 0 and int(row["turn"]) == 1:
                by_k.setdefault(int(row["k"]), {})[str(row["question_id"])] = row
    lengths = {str(q.question_id): len(p) for q, p in zip(questions, prompts)}
    first = next(iter(by_k.values()), {})
    if any(int(first[qid]["prompt_tokens"]) != n for qid, n in lengths.items() if qid in first) or set(
        lengths
    ) - set(first):
        return None, "the baseline's prompts differ from the ones built here (prompt token counts)"
    return by_k, ""


def piece_fp32(ctx: Context, piece: Piece, budget_s: float):
    """b: float32 on the device must be lossless and give the CPU's AL, question by question."""
    deadline, cfg = ctx.piece_deadline(budget_s), settings(ctx.dry_run)
    target, head = load_pair(torch.float32, ctx.device)
    eos = target.eos_token_ids
    questions, prompts = demo_prompts(target.tokenizer, cfg["limit"])
    n = len(prompts)
    baseline, why = (
        (None, "dry run: compared with the CPU run made here only")
        if ctx.dry_run
        else read_baseline(questions, prompts, cfg)
    )
    if baseline is None:
        piece.notes.append(f"shipped baseline not used: {why}")
    piece.data.update(
        questions=n, max_tokens=cfg["max_tokens"], block_size=BLOCK_SIZE, device=str(ctx.device)
    )
    oracle = generate(target.model, None, eos, prompts, 0, cfg["max_tokens"], 0)
    rows, device_results = [], {0: oracle}
    for k in cfg["ks"]:
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget before K={k}")
            break
        start = time.perf_counter()
        results = generate(target.model, head, eos, prompts, k, cfg["max_tokens"], 0)
        device_results[k] = results
        same = sum(r.output_ids == o.output_ids for r, o in zip(results, oracle))
        row = {"k": k, "al": pooled_al(results), "lossless": same / n, "seconds": time.perf_counter() - start}
        piece.check(
            f"K={k}: lossless (speculative == target-only greedy on {ctx.device})", same == n, f"{same}/{n}"
        )
        piece.check(f"K={k}: counts consistent", counts_consistent(results, k))
        if baseline is not None and k in baseline:
            base_rows = baseline[k]
            differ = [
                q.question_id
                for q, r in zip(questions, results)
                if (r.steps, r.accepted, len(r.output_ids))
                != tuple(
                    int(base_rows[str(q.question_id)][c]) for c in ("steps", "accepted", "generated_tokens")
                )
            ]
            steps = sum(int(base_rows[str(q.question_id)]["steps"]) for q in questions)
            acc = sum(int(base_rows[str(q.question_id)]["accepted"]) for q in questions)
            row.update(al_cpu=(steps + acc) / steps, questions_differing=len(differ))
            piece.check(
                f"K={k}: AL equals the shipped CPU float32 run",
                row["al"] == row["al_cpu"] and not differ,
                f"{row['al']:.4f} here vs {row['al_cpu']:.4f} on CPU; {len(differ)} questions differ"
                + (f" (first: {differ[:5]})" if differ else ""),
            )
        rows.append(row)
    piece.data["rows"] = rows
    ctx.shared["fp32_al"] = {r["k"]: r["al"] for r in rows}
    _cpu_reference(ctx, piece, target, head, prompts, cfg, device_results, deadline)


def _cpu_reference(ctx, piece, target, head, prompts, cfg, device_results, deadline):
    """The same runner on the CPU in float32 on the first few questions: same tokens, same counts."""
    if time.perf_counter() > deadline:
        return piece.notes.append("no time left for the CPU reference run")
    m = min(cfg["cpu_questions"], len(prompts))
    cpu_model = target.model if ctx.device.type == "cpu" else copy.deepcopy(target.model).cpu()
    cpu_head = head if ctx.device.type == "cpu" else copy.deepcopy(head).cpu()
    ks = [0, max(k for k in device_results)]
    for k in ks:
        here = device_results[k][:m]
        cpu = generate(cpu_model, cpu_head, target.eos_token_ids, prompts[:m], k, cfg["max_tokens"], 0)
        same = sum(
            (a.output_ids, a.steps, a.accepted) == (b.output_ids, b.steps, b.accepted)
            for a, b in zip(here, cpu)
        )
        piece.check(
            f"K={k}: same tokens and counts as a CPU float32 run (first {m} questions)",
            same == m,
            f"{same}/{m}",
        )


def piece_bf16(ctx: Context, piece: Piece, budget_s: float):
    """c: bfloat16, 3 repeats with shuffled batches: the lossless rate and the AL spread, measured."""
    deadline, cfg = ctx.piece_deadline(budget_s), settings(ctx.dry_run)
    if ctx.dry_run:  # bfloat16 matmuls are slow on CPUs: one K, three short questions
        cfg.update(limit=3, ks=[2], max_tokens=8)
    target, head = load_pair(torch.bfloat16, ctx.device)
    eos = target.eos_token_ids
    _, prompts = demo_prompts(target.tokenizer, cfg["limit"])
    n, repeats = len(prompts), 3
    piece.data.update(questions=n, max_tokens=cfg["max_tokens"], repeats=repeats, device=str(ctx.device))
    piece.notes.append(
        "a measurement: bfloat16 rounding depends on batch composition, so neither lossless "
        "rate 1.0 nor a zero spread is required"
    )
    oracles: dict[int, list] = {}
    rows = []
    ks = sorted(cfg["ks"], key=lambda k: (k % 2 == 0, k))  # 1, 3, 5, 2, 4: a cut-off run still spans K
    for k in ks:
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget before K={k}")
            break
        als, lossless = [], []
        for r in range(repeats):
            if r not in oracles:  # target-only greedy in bfloat16, same batch order
                oracles[r] = generate(target.model, None, eos, prompts, 0, cfg["max_tokens"], r)
            results = generate(target.model, head, eos, prompts, k, cfg["max_tokens"], r)
            piece.check(f"K={k} repeat {r}: counts consistent", counts_consistent(results, k))
            als.append(pooled_al(results))
            lossless.append(sum(a.output_ids == b.output_ids for a, b in zip(results, oracles[r])) / n)
        row = {
            "k": k,
            "al_repeats": als,
            "al_mean": sum(als) / repeats,
            "al_spread": max(als) - min(als),
            "lossless_repeats": lossless,
        }
        if k in ctx.shared.get("fp32_al", {}):
            row["al_fp32"] = ctx.shared["fp32_al"][k]
        rows.append(row)
    piece.data["rows"] = sorted(rows, key=lambda r: r["k"])
