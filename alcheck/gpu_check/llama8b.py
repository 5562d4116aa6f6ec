"""Piece d: a random-weight Llama-3.1-8B-shaped target with a random EAGLE-1 head, built on the
device in bfloat16 (no checkpoint, no download).

Step time = (wall of a generate() with M new tokens - wall of one with 1) / steps, so the
prefill and the runner's set-up cancel. The bandwidth floor of a step is the bytes of weights it
must read once (K=0: the target; K=3: the target, plus the head and the lm_head per draft step)
over the device's bandwidth, measured by a device-to-device copy (bytes read + written / time).
transformers generate() runs on the same weights (ours are built from its state dict).
"""

from __future__ import annotations

import contextlib
import random
import time

import torch

from alcheck.gpu_check.common import Context, Piece, counts_consistent, pooled_al, sync, timed
from alcheck.tiny import LLAMA31_8B_CONFIG
from alcheck.methods.table import proposer_for

SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
              "tie_word_embeddings")
LLAMA31_8B = {key: LLAMA31_8B_CONFIG[key] for key in SHAPE_KEYS}
TINY = dict(LLAMA31_8B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=320)
BATCHES, KS = (1, 16, 64), (0, 3)


def settings(dry_run: bool) -> dict:
    if dry_run:
        return {"shape": TINY, "prompt": 8, "new_tokens": 4, "copy_bytes": 1 << 24, "name": "tiny Llama (dry run)"}
    return {"shape": LLAMA31_8B, "prompt": 128, "new_tokens": 32, "copy_bytes": 1 << 31,
            "name": "Llama-3.1-8B-shaped, random weights"}


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


def step_time(generate, new_tokens: int, device, steps_of):
    """(seconds per step, results): generate(n) runs one batch to n new tokens; steps_of(results)
    counts the decoding steps after the prefill."""
    generate(2)  # warm-up: kernels, allocator, the KV budget's own warm-up
    # the fastest of three each: a busy machine only ever adds time, and a difference of single
    # timings can even come out negative on a loaded CPU
    one = min(timed(lambda: generate(1), device)[0] for _ in range(3))
    full, results = min((timed(lambda: generate(new_tokens), device) for _ in range(3)), key=lambda x: x[0])
    return (full - one) / max(1, steps_of(results)), results


def run(ctx: Context, piece: Piece, budget_s: float):
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    deadline, cfg, dev = ctx.piece_deadline(budget_s), settings(ctx.dry_run), ctx.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    load_s, (hf, ours, head) = timed(lambda: build(cfg["shape"], dev), dev)
    target_bytes, head_bytes = param_bytes(ours), param_bytes(head)
    lm_head_bytes = param_bytes(ours.lm_head)
    bw = bandwidth(dev, cfg["copy_bytes"])
    piece.data.update(model=cfg["name"], dtype="bfloat16", load_s=load_s, target_weight_bytes=target_bytes,
                      head_weight_bytes=head_bytes, bandwidth_bytes_per_s=bw, prompt_tokens=cfg["prompt"],
                      new_tokens=cfg["new_tokens"], block_size=16)
    vocab, rng = cfg["shape"]["vocab_size"], random.Random(0)
    prompts = [[rng.randrange(vocab) for _ in range(cfg["prompt"])] for _ in range(max(BATCHES))]
    rows, ours_first = [], None
    for batch in BATCHES:
        for k in KS:
            if time.perf_counter() > deadline:
                break
            runner = PagedRunner(ours, proposer_for(head) if k else None, [],
                                RunnerConfig(num_spec_tokens=k, block_size=16, max_batch_size=max(BATCHES)))
            seconds, results = step_time(lambda n: runner.generate(prompts[:batch], n), cfg["new_tokens"], dev,
                                         lambda res: max(r.steps for r in res))
            piece.check(f"batch {batch} K={k}: counts consistent", counts_consistent(results, k))
            floor = (target_bytes + k * (head_bytes + lm_head_bytes)) / bw
            al = pooled_al(results)
            row = {"runner": "alcheck", "batch": batch, "k": k, "step_ms": seconds * 1e3, "floor_ms": floor * 1e3,
                   "al": al, "tokens_per_s": batch * al / seconds}
            if runner.kv_pool:
                row["kv_pool"] = runner.kv_pool
            if batch == 1 and k == 0:
                ours_first = results[0].output_ids
            rows.append(row)
        if time.perf_counter() > deadline:
            piece.notes.append(f"stopped at the time budget during batch {batch}")
            break
        rows.append(_hf_row(hf, prompts[:batch], cfg["new_tokens"], dev, target_bytes / bw,
                            ours_first if batch == 1 else None))
    piece.data["rows"] = rows
    if dev.type == "cuda":
        piece.data["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        piece.data["device_memory_bytes"] = torch.cuda.get_device_properties(dev).total_memory
    del hf, ours, head
    sync(dev)


def _hf_row(hf, prompts, new_tokens, dev, floor_s, ours_tokens):
    ids = torch.tensor(prompts, device=dev)  # equal lengths: no padding

    def gen(n):
        with torch.inference_mode():
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, eos_token_id=None, pad_token_id=0)
        return out[:, ids.shape[1]:]

    seconds, out = step_time(gen, new_tokens, dev, lambda res: res.shape[1] - 1)
    row = {"runner": "transformers generate()", "batch": len(prompts), "k": 0, "step_ms": seconds * 1e3,
           "floor_ms": floor_s * 1e3, "al": 1.0, "tokens_per_s": len(prompts) / seconds}
    if ours_tokens is not None:
        same = out[0].tolist()[: len(ours_tokens)] == ours_tokens
        row["note"] = f"greedy tokens {'equal' if same else 'differ from'} alcheck's (bfloat16)"
    return row
