"""Piece d: the speed table. A random-weight Llama-3.1-8B-shaped target with a random EAGLE-1 head,
built on the device in bfloat16 (no checkpoint, no download), decoded by transformers generate()
and by alcheck's eager (paged), static and CUDA-graph (static, replayed) runners at batch 1, 16
and 64, K = 0 and 3, plus K=5 as a chain and as a tree (topk 8, 32 tokens).

Per row: the attention kernel (torch, flash-attn or triton), the median of every steady step
(timed with CUDA events from one step's start to the next's, the first steps left out), its
10th-90th percentile spread, kernel launches and host syncs
per step (profiler; torch's sync-debug mode), the floor (gpu_check/floor.py: measured copy
bandwidth and matmul peak), step / floor, tokens/s and the ratio to generate() at that batch.
Then a sweep of the batch of 80 at K=1..5 (one repeat measured, times 3), the projected sweep at the
published AL, and the issue's targets, PASS / FAIL. The random head accepts almost nothing (AL
about 1): rows show the cost of a step, not a speed-up. Graph replay must give the static step's
tokens exactly (a check); the targets are reported, not checked.
"""

from __future__ import annotations

import contextlib
import random
import time
from functools import partial

import torch

from alcheck.gpu_check import floor
from alcheck.gpu_check.clock import count_per_step, generate_step_clock, time_runner_steps
from alcheck.gpu_check.common import Context, Piece, counts_consistent, pooled_al, sync, timed
from alcheck.methods.table import proposer_for
from alcheck.testing.tiny import LLAMA31_8B_CONFIG

SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
)
LLAMA31_8B = {key: LLAMA31_8B_CONFIG[key] for key in SHAPE_KEYS}
TINY = dict(
    LLAMA31_8B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=320,
)
BATCHES, KS = (1, 16, 64), (0, 3)
TREE = (5, 8, 32)  # K, topk, T: the tree shape, against the K=5 chain
EAGER, STATIC, GRAPHS, HF = "alcheck eager", "alcheck static", "alcheck graphs", "transformers generate()"


def settings(dry_run: bool) -> dict:
    if dry_run:
        return {
            "shape": TINY,
            "prompt": 8,
            "new_tokens": 12,
            "warm": 2,
            "copy_bytes": 1 << 24,
            "sweep_tokens": 16,
            "sweep_questions": 8,
            "name": "tiny Llama (dry run)",
        }
    return {
        "shape": LLAMA31_8B,
        "prompt": 128,
        "new_tokens": 48,
        "warm": 6,
        "copy_bytes": 1 << 31,
        "sweep_tokens": floor.SWEEP["max_tokens"],
        "sweep_questions": floor.SWEEP["questions"],
        "name": "Llama-3.1-8B-shaped, random weights",
    }


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build(shape: dict, device: torch.device, dtype=torch.bfloat16):
    """(transformers model, our target on the same tensors, random EAGLE-1 head), built in place."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from alcheck.models.config import ModelConfig, rope_inv_freq
    from alcheck.models.eagle import EagleHead
    from alcheck.models.layers import Rotary, stack_checkpoint
    from alcheck.models.llama import LlamaTarget

    torch.manual_seed(0)
    hf_cfg = LlamaConfig(**shape, initializer_range=0.02)
    with default_dtype(dtype), torch.device(device):
        hf = LlamaForCausalLM(hf_cfg).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    cfg = ModelConfig.from_dict(hf_cfg.to_dict())
    with torch.device("meta"):
        ours = LlamaTarget(cfg)
    # fused q/k/v and gate/up are new tensors; everything else shares the transformers model's storage
    ours.load_state_dict(stack_checkpoint(hf.state_dict()), strict=True, assign=True)
    for module in ours.modules():
        if isinstance(module, Rotary):
            module.inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling).to(device)
    head_cfg = ModelConfig.from_dict({**shape, "num_hidden_layers": 1, "rope_scaling": None})
    with default_dtype(dtype), torch.device(device):
        head = EagleHead(head_cfg).eval()
    return hf, ours.eval(), head


def param_bytes(*modules) -> int:
    seen = {}
    for m in modules:
        for p in m.parameters():
            seen[id(p)] = p.numel() * p.element_size()
    return sum(seen.values())


def bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes per second of a device-to-device copy, counting the bytes read and written."""
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    best = min(timed(lambda: y.copy_(x), device)[0] for _ in range(5))
    return 2 * nbytes / best


def configs(has_cuda: bool) -> list[tuple[str, int, int, str]]:
    """(runner, batch, K, shape) in the order they run: what the targets need first, so a run cut
    short by its budget still has them."""
    kinds = [GRAPHS] if has_cuda else []
    first = [(kind, b, k, "chain") for b in (1, 64) for kind in kinds for k in KS] + [
        (HF, b, 0, "chain") for b in (1, 64)
    ]
    tree = [
        (kind, b, TREE[0], shape)
        for b in (1, 16)
        for kind in kinds + [STATIC, EAGER]
        for shape in ("chain", f"tree topk {TREE[1]} T {TREE[2]}")
    ]
    rest = [(kind, b, k, "chain") for b in BATCHES for kind in (EAGER, STATIC) for k in KS]
    rest += [(kind, 16, k, "chain") for kind in kinds for k in KS] + [(HF, 16, 0, "chain")]
    return first + tree[: 2 * len(kinds)] + rest + tree[2 * len(kinds) :]


def make_runner(kind: str, model, head, k: int, shape: str, engine):
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.static.runner import StaticRunner

    tree = {"topk": TREE[1], "num_draft_tokens": TREE[2]} if shape != "chain" else {}
    cfg = RunnerConfig(num_spec_tokens=k, block_size=16, max_batch_size=128, **tree)
    runner = (PagedRunner if kind == EAGER else StaticRunner)(
        model, proposer_for(head) if k else None, [], cfg, engine=engine
    )
    if kind == STATIC:
        runner.graphs = None  # the static step, run eagerly
    return runner


def run(ctx: Context, piece: Piece, budget_s: float, cfg: dict | None = None):
    """cfg: other settings than settings(dry_run) (bench/bench_speed_cpu.py's demo-shaped CPU table)."""
    from alcheck.runner.engine import Engine

    deadline, dev = ctx.piece_deadline(budget_s), ctx.device
    cfg = cfg or settings(ctx.dry_run)
    dtype = cfg.get("dtype", torch.bfloat16)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    load_s, (hf, ours, head) = timed(lambda: build(cfg["shape"], dev, dtype), dev)
    sizes = model_sizes(ours, head)
    bw, peak = bandwidth(dev, cfg["copy_bytes"]), floor.matmul_peak(dev, ctx.dry_run)
    piece.data.update(
        model=cfg["name"],
        dtype=str(dtype).removeprefix("torch."),
        load_s=load_s,
        target_weight_bytes=sizes.target_bytes,
        head_weight_bytes=sizes.head_bytes,
        bandwidth_bytes_per_s=bw,
        peak_flops=peak,
        prompt_tokens=cfg["prompt"],
        new_tokens=cfg["new_tokens"],
        block_size=16,
        warm_steps=cfg["warm"],
    )
    vocab, rng = cfg["shape"]["vocab_size"], random.Random(0)
    prompts = [[rng.randrange(vocab) for _ in range(cfg["prompt"])] for _ in range(max(BATCHES))]
    engine, rows, outputs = Engine(), [], {}
    if dev.type != "cuda":
        piece.notes.append("no CUDA: the graph rows, launches and syncs are not measured")
    for kind, batch, k, shape in configs(dev.type == "cuda"):
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget before {kind} batch {batch} K={k} {shape}")
            break
        context = cfg["prompt"] + cfg["new_tokens"] // 2
        if kind == HF:
            row = _hf_row(hf, prompts[:batch], cfg, dev)
            verify = 1
        else:
            runner = make_runner(kind, ours, head, k, shape, engine)
            row, results = _runner_row(runner, prompts[:batch], cfg, dev)
            row["attention"] = attention_of(runner, kind)
            piece.check(
                f"{kind} batch {batch} K={k} {shape}: counts consistent", counts_consistent(results, k)
            )
            outputs[kind, batch, k, shape] = [r.output_ids for r in results]
            verify = runner.cfg.num_verify_tokens
        floor_ms = sizes.floor_s(batch, k, verify, context, bw, peak) * 1e3
        row.update(
            runner=kind,
            batch=batch,
            k=k,
            shape=shape,
            floor_ms=floor_ms,
            step_over_floor=row["step_ms"] / floor_ms,
        )
        rows.append(row)
    _compare_to_generate(rows)
    for (kind, batch, k, shape), out in outputs.items():
        if kind == GRAPHS and (STATIC, batch, k, shape) in outputs:
            piece.check(
                f"graphs batch {batch} K={k} {shape}: replay gives the static step's tokens",
                out == outputs[STATIC, batch, k, shape],
            )
    piece.data["rows"] = rows
    graphs = engine.state.get("graphs")
    if graphs is not None:
        piece.data["graphs"] = {
            "captured": graphs.captures,
            "replays": graphs.replays,
            "failed": graphs.failed,
        }
        piece.check(
            "CUDA graphs captured for the static step",
            graphs.captures > 0 and not graphs.failed,
            f"{graphs.captures} captured, failed: {graphs.failed or 'none'}",
        )
    from alcheck.models import ops

    piece.data["fused_failed"] = dict(ops.FAILED)  # half-precision fused kernels that fell back to eager
    if ops.FAILED:
        piece.notes.append(f"fused kernels fell back to eager: {', '.join(ops.FAILED)}")
    sweep = _sweep(ctx, piece, ours, head, engine, cfg, load_s, rows, deadline)
    piece.data["sweep"] = sweep
    piece.data["targets"] = floor.targets(rows, sweep)
    if dev.type == "cuda":
        piece.data["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        piece.data["device_memory_bytes"] = torch.cuda.get_device_properties(dev).total_memory
    del hf, ours, head, engine
    sync(dev)


def model_sizes(target, head) -> floor.Sizes:
    attn = target.attention_layers[0]
    elem = next(target.parameters()).element_size()
    return floor.Sizes(
        param_bytes(target),
        param_bytes(target.model.embed_tokens),
        param_bytes(head),
        param_bytes(target.lm_head),
        2 * len(target.attention_layers) * attn.num_kv_heads * attn.head_dim * elem,
        elem,
    )


def attention_of(runner, kind: str) -> str:
    """The kernel the row's verify batches ran: static batches and trees have no flash-attn form."""
    from alcheck.models.attention import pick_attention

    static = kind != EAGER or runner.tree
    return pick_attention(runner.device, runner.cfg.block_size, runner.dtype, static=static)


def _runner_row(runner, prompts, cfg, dev):
    runner.generate(prompts, 3)  # warm-up: the KV budget, buffers, the first graphs
    steps, results = time_runner_steps(runner, prompts, cfg["new_tokens"], cfg["warm"])
    row = steps.summary()
    al = pooled_al(results)
    row.update(al=al, tokens_per_s=len(prompts) * al / (row["step_ms"] / 1e3))
    row.update(
        count_per_step(lambda n: runner.generate(prompts, n), lambda res: max(r.steps for r in res), dev)
    )
    return row, results


def _hf_row(hf, prompts, cfg, dev):
    ids = torch.tensor(prompts, device=dev)  # equal lengths: no padding

    def gen(n, processors=None):
        with torch.inference_mode():
            return hf.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                logits_processor=processors,
            )

    gen(2)
    mark, clock = generate_step_clock(dev)
    gen(cfg["new_tokens"], [mark])
    from alcheck.gpu_check.clock import Steps

    row = Steps(clock.intervals(), cfg["warm"]).summary()
    row.update(al=1.0, tokens_per_s=len(prompts) / (row["step_ms"] / 1e3))
    row.update(count_per_step(gen, lambda out: out.shape[1] - ids.shape[1] - 1, dev))
    return row


def _compare_to_generate(rows):
    for row in rows:
        base = next((r for r in rows if r["runner"] == HF and r["batch"] == row["batch"]), None)
        row["vs_generate"] = row["tokens_per_s"] / base["tokens_per_s"] if base else None


def _sweep(ctx, piece, model, head, engine, cfg, load_s, rows, deadline) -> dict:
    """One repeat of the sweep's cells (the batch of 80 questions, 256 tokens, K=1..5) on the graph
    runner (the static one without CUDA), one engine throughout: measured, and times 3 repeats."""
    kind = GRAPHS if ctx.device.type == "cuda" else STATIC
    n, tokens = cfg["sweep_questions"], cfg["sweep_tokens"]
    rng = random.Random(1)
    vocab = cfg["shape"]["vocab_size"]
    prompts = [
        [rng.randrange(vocab) for _ in range(rng.randint(64, 192) if not ctx.dry_run else 8)]
        for _ in range(n)
    ]
    near = next((r for r in rows if r["runner"] == kind and r["batch"] == 64 and r["k"] == 3), None)
    estimate = near and len(floor.SWEEP["ks"]) * tokens * near["step_ms"] / 1e3 * 1.3
    left = deadline - time.perf_counter()
    out = {"runner": kind, "questions": n, "max_tokens": tokens, "load_s": load_s}
    if estimate is None or estimate > left:
        piece.notes.append(
            f"sweep not measured: about {estimate or float('nan'):.0f} s needed, {left:.0f} s left"
        )
        return out
    walls, step_ms, prefill = (
        {},
        {},
        timed(lambda: make_runner(kind, model, head, 1, "chain", engine).generate(prompts, 1), ctx.device)[0],
    )
    for k in floor.SWEEP["ks"]:
        runner = make_runner(kind, model, head, k, "chain", engine)
        wall, (steps, _) = timed(partial(time_runner_steps, runner, prompts, tokens, cfg["warm"]), ctx.device)
        walls[k], step_ms[k] = wall, steps.summary()["step_ms"]
    out.update(
        prefill_s=prefill,
        cell_s=walls,
        step_ms=step_ms,
        measured_s=load_s + floor.SWEEP["repeats"] * sum(walls.values()),
        projected_s=floor.projected_sweep_s(load_s, prefill, step_ms, floor.published_al()),
        note="measured with a random head (AL about 1, every token a step): an upper bound; projected "
        "at the published AL of EAGLE-LLaMA3.1-Instruct-8B; load = building the random model on the device",
    )
    return out
