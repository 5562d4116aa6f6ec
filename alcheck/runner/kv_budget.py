"""GPU memory: the KV pool's size from free memory, and whether the weights fit at all.

`--gpu-memory-utilization` means what it means in vLLM: the fraction of the device's total
memory this run may use. The KV pool gets that fraction, minus what is already in use once the
weights are loaded (this process's tensors and CUDA context, and any other process), minus the
activation peak of warm-up forwards at the largest batch the run will form:

    pool bytes = utilization * total - (total - free) - activation peak
    blocks     = pool bytes // bytes per block      (K and V of every target and draft layer)

The runner allocates no more blocks than the whole batch needs at once; when the pool holds
fewer, the scheduler admits fewer requests and preempts, and the results are the same. On the
CPU the pool stays "enough for every request at once" (host memory is not budgeted).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from alcheck.errors import AlcheckError
from alcheck.runner.config import check_utilization

GIB = float(1 << 30)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def block_bytes(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes one KV block takes across `num_layers` layers: a K and a V slot per token."""
    return 2 * num_layers * block_size * num_kv_heads * head_dim * dtype_bytes


def pool_blocks(
    free_bytes: int, total_bytes: int, bytes_per_block: int, utilization: float, activation_bytes: int = 0
) -> int:
    """KV blocks that fit: utilization * total, less memory in use (total - free) and the
    activation peak, in whole blocks; 0 when nothing is left."""
    check_utilization(utilization)
    if not 0 <= free_bytes <= total_bytes or bytes_per_block < 1 or activation_bytes < 0:
        raise ValueError(
            f"bad memory figures: free {free_bytes}, total {total_bytes}, "
            f"block {bytes_per_block}, activations {activation_bytes}"
        )
    pool = int(utilization * total_bytes) - (total_bytes - free_bytes) - activation_bytes
    return max(0, pool // bytes_per_block)


def too_small(
    blocks: int,
    need: int,
    free_bytes: int,
    total_bytes: int,
    activation_bytes: int,
    bytes_per_block: int,
    utilization: float,
    device,
) -> AlcheckError:
    """The error for a pool with fewer than `need` blocks (the null block plus one request)."""
    return AlcheckError(
        f"KV cache: --gpu-memory-utilization {utilization} of {device}'s {gib(total_bytes)} leaves room for "
        f"{blocks} KV blocks ({gib(bytes_per_block)} each) after {gib(total_bytes - free_bytes)} in use and "
        f"{gib(activation_bytes)} of activations, but one request needs {need}: raise "
        "--gpu-memory-utilization, "
        "lower --max-batch-size, or free the GPU"
    )


# -- the device ---------------------------------------------------------------------------------
# Small functions so tests can stand in fake numbers for a GPU that is not there.


def sizes_from_memory(device: torch.device) -> bool:
    """Whether the KV pool on this device is budgeted from its memory (CUDA only)."""
    return device.type == "cuda"


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes on the device, after returning the caching allocator's idle blocks."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return int(free), int(total)


def smallest_memory(devices: list[str]) -> int | None:
    """The smallest total memory of the devices (RAM for cpu), or None when it cannot be read."""
    sizes = []
    for device in devices:
        if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
            try:
                sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
            except (ValueError, OSError, AttributeError):
                return None
        elif torch.cuda.is_available():
            index = int(device.split(":")[1]) if ":" in device else 0
            if index >= torch.cuda.device_count():
                return None  # named later, with the machine's devices
            sizes.append(torch.cuda.get_device_properties(index).total_memory)
        else:
            return None
    return min(sizes) if sizes else None


class ActivationPeak:
    """Peak bytes allocated above the level at entry, while the block runs (0 off CUDA)."""

    def __init__(self, device: torch.device):
        self.device, self.bytes = device, 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = max(0, torch.cuda.max_memory_allocated(self.device) - self._base)
        return False


# -- weights, before loading --------------------------------------------------------------------


def check_weights_fit(weight_bytes: int, free_bytes: int, total_bytes: int, device, dtype: str):
    """Weights larger than the device's free memory: exit 2 before loading, saying how much."""
    if weight_bytes > free_bytes:
        smaller = " or --dtype bfloat16 (half of float32)," if DTYPE_BYTES[dtype] > 2 else ""
        raise AlcheckError(
            f"the target and draft weights need {gib(weight_bytes)} in {dtype} but {device} has "
            f"{gib(free_bytes)} free of {gib(total_bytes)}: use "
            f"a GPU with more memory,{smaller} or free the GPU"
        )


def check_device_weights(weight_bytes: int, dtype: str, device: str):
    """check_weights_fit for a device spec, on devices whose memory is budgeted. weight_bytes: what
    this device holds (methods/pair.plan_pair counts the target, or a rank's shard, plus the head)."""
    dev = torch.device(device)
    if not sizes_from_memory(dev):
        return
    free, total = device_memory(dev)
    check_weights_fit(weight_bytes, free, total, dev, dtype)


# -- the runner's pool on a GPU -----------------------------------------------------------------


def gpu_pool_blocks(runner, requests, max_tokens: int, need_blocks: int, largest_blocks: int) -> int:
    """Blocks for `runner`'s pool: what the whole batch needs (need_blocks), capped by what
    memory allows after a measured warm-up. Records the figures in runner.kv_pool.

    The measurement lives on the runner's engine (runner/engine.py) and is reused while its
    warm-up covered this call's largest forwards; otherwise the pools are let go and the warm-up
    runs again at the larger of the two shapes."""
    cfg, engine = runner.cfg, runner.engine
    layers = _cache_layers(runner)
    shape = warm_shape(runner, requests, max_tokens)
    budget = engine.budget
    if budget is None or not budget.shape.covers(shape) or budget.utilization != cfg.gpu_memory_utilization:
        budget = _measure(runner, shape if budget is None else shape.merge(budget.shape))
    elem = torch.empty((), dtype=runner.dtype).element_size()
    per_block = sum(block_bytes(1, cfg.block_size, a.num_kv_heads, a.head_dim, elem) for a in layers)
    free, total, peak = budget.free_bytes, budget.total_bytes, budget.activation_peak_bytes
    blocks = pool_blocks(free, total, per_block, cfg.gpu_memory_utilization, peak)
    minimum = largest_blocks + (1 if cfg.kv_lookahead else 0)  # one request, and the null block
    if blocks < minimum:
        raise too_small(
            blocks, minimum, free, total, peak, per_block, cfg.gpu_memory_utilization, runner.device
        )
    chosen = min(blocks, need_blocks)
    runner.kv_pool = {
        "blocks": chosen,
        "blocks_needed": need_blocks,
        "blocks_memory_allows": blocks,
        "bytes_per_block": per_block,
        "pool_bytes": chosen * per_block,
        "free_bytes": free,
        "total_bytes": total,
        "activation_peak_bytes": peak,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "warm_ups": runner.engine.warm_ups,
    }
    return chosen


def _measure(runner, shape: WarmShape):
    """Let the pools go, run the warm-up at `shape`, and keep free memory and the peak on the engine."""
    from alcheck.runner.engine import MemoryBudget

    for layer in _cache_layers(
        runner
    ):  # an earlier generate()'s pool is still bound to the layers: let it go
        layer.k_cache = layer.v_cache = None
    runner.kv_cache = runner.draft_kv_cache = None
    runner.engine.release()
    runner.engine.budget = None
    with ActivationPeak(runner.device) as peak:
        _warm_up(runner, shape)
    free, total = device_memory(runner.device)
    runner.engine.warm_ups += 1
    runner.engine.budget = MemoryBudget(free, total, peak.bytes, runner.cfg.gpu_memory_utilization, shape)
    return runner.engine.budget


@dataclass(frozen=True)
class WarmShape:
    """The largest forwards of a call: the prefill the scheduler can form, the full batch, the
    longest context, the tokens verified per step, and the drafting shape (K, topk)."""

    prefill: tuple[int, ...]  # the requests of the largest prefill forward, longest first
    batch: int
    context: int
    verify: int
    k: int
    topk: int

    def covers(self, other: WarmShape) -> bool:
        """Whether this warm-up's forwards were at least as large as other's: more K (and the
        same branching) means more tokens per forward; target-only (K=0) is covered by any."""
        drafting = other.k == 0 or (self.k >= other.k and self.topk == other.topk)
        return (
            drafting
            and sum(self.prefill) >= sum(other.prefill)
            and max(self.prefill) >= max(other.prefill)
            and self.batch >= other.batch
            and self.context >= other.context
            and self.verify >= other.verify
        )

    def merge(self, other: WarmShape) -> WarmShape:
        """The larger request-side figures of both; the drafting shape (verify, K, topk) stays this one's."""
        prefill = next(
            (
                p
                for p in (self.prefill, other.prefill)
                if _larger(p, self.prefill) and _larger(p, other.prefill)
            ),
            tuple(sorted(self.prefill + other.prefill, reverse=True)),
        )  # neither: both at once (more)
        return WarmShape(
            prefill,
            max(self.batch, other.batch),
            max(self.context, other.context),
            self.verify,
            self.k,
            self.topk,
        )


def _larger(a: tuple, b: tuple) -> bool:
    return sum(a) >= sum(b) and max(a) >= max(b)


def warm_shape(runner, requests, max_tokens: int) -> WarmShape:
    cfg, k = runner.cfg, runner.cfg.num_spec_tokens
    longest = sorted((r.num_prompt_tokens + max_tokens for r in requests), reverse=True)[: cfg.max_batch_size]
    prefill = [longest[0]]
    for n in longest[1:]:
        if sum(prefill) + n > cfg.max_prefill_tokens:
            break
        prefill.append(n)
    return WarmShape(
        tuple(prefill),
        min(cfg.max_batch_size, len(requests)),
        longest[0] + k - 1,  # the most positions a generation needs (models/compat.positions_needed)
        cfg.num_verify_tokens,
        k,
        cfg.topk if runner.tree else 1,
    )


def _cache_layers(runner) -> list:
    layers = list(runner.target.attention_layers)
    if runner.proposer is not None:
        layers += list(runner.proposer.attention_layers)
    return layers


class _ScratchContext:
    """The warm-up's draft context (runner/context.py): scratch attention metadata in which every
    block-table entry reads one shared scratch block and nothing is stored, and its own generator,
    so the runner's own state is not touched before _setup seeds it."""

    def __init__(self, runner):
        self.runner, self.device, self.target = runner, runner.device, runner.target
        self.generator = torch.Generator(device=runner.device)

    def attn_batch(self, reqs, starts, lens, layer, rope_positions=None, tree_masks=None):
        return _scratch_batch(self.runner, starts, lens, rope_positions=rope_positions, tree_masks=tree_masks)

    def draft_sample(self, logits):
        from alcheck.runner.sampling import draft_token

        cfg = self.runner.cfg
        return draft_token(logits, cfg.temperature, cfg.draft_sampling, self.generator)


def _warm_up(runner, shape: WarmShape):
    """The run's largest forwards on dummy tokens: the biggest prefill the scheduler can form
    (a preempted request re-prefills up to its prompt + max_tokens), then a verify step, its
    acceptance and a proposal for a full batch at full context. Every block-table entry reads
    one shared scratch block and nothing is stored, so the pool itself is not needed yet."""
    from alcheck.models.attention import bind_kv_cache

    cfg, k = runner.cfg, runner.cfg.num_spec_tokens
    for group in (
        runner.target.attention_layers,
        _cache_layers(runner)[len(runner.target.attention_layers) :],
    ):
        if group:
            bind_kv_cache(group, 1, cfg.block_size, runner.dtype, runner.device)
    prefill, full = list(shape.prefill), shape.batch
    ctx = _ScratchContext(runner)
    try:
        _dummy_step(runner, ctx, [0] * len(prefill), prefill, prefill=True)
        _dummy_step(runner, ctx, [shape.context - k - 1] * full, [shape.verify] * full, prefill=False)
    finally:
        for layer in _cache_layers(runner):
            layer.k_cache = layer.v_cache = None


def _scratch_batch(runner, starts, lens, rope_positions=None, tree_masks=None):
    """Scratch metadata; a tree's masks are kept, since a tree mask moves attention to the torch
    path, whose gathered keys and masks are the memory this warm-up measures."""
    from alcheck.models.attention import AttnBatch

    bs, device = runner.cfg.block_size, runner.device
    seq_lens = [s + n for s, n in zip(starts, lens)]
    table = torch.zeros(len(lens), -(-max(seq_lens) // bs), dtype=torch.int32, device=device)
    positions = [p for s, n in zip(starts, lens) for p in range(s, s + n)]
    slots = torch.full((len(positions),), -1, dtype=torch.long, device=device)
    return AttnBatch.build(
        positions,
        slots,
        table,
        lens,
        seq_lens,
        bs,
        runner.attention,
        runner.dtype,
        rope_positions=rope_positions,
        tree_masks=tree_masks,
    )


def _dummy_step(runner, ctx: _ScratchContext, starts, lens, prefill: bool):
    from alcheck.runner.sampling import greedy_accept, rejection_accept, target_token

    cfg, k, device = runner.cfg, runner.cfg.num_spec_tokens, runner.device
    num = len(lens)
    ids = torch.zeros(sum(lens), dtype=torch.long, device=device)
    masks = None
    if runner.tree and not prefill:  # the verify forward of T tree nodes carries a [B, T, T] mask
        masks = torch.ones(num, lens[0], lens[0], dtype=torch.bool, device=device).tril()
    hidden, features = runner.run_model(ids, _scratch_batch(runner, starts, lens, tree_masks=masks))
    ends = torch.tensor(lens, device=device).cumsum(0)
    if prefill:
        target_token(runner.target.compute_logits(hidden[ends - 1]), cfg.temperature, ctx.generator)
    else:
        logits = runner.target.compute_logits(hidden).view(num, lens[0], -1)
        drafts = torch.zeros(num, k, dtype=torch.long, device=device)
        if runner.tree:  # the tree walk reads the target's probabilities [B, T, V] (or their argmax)
            (torch.softmax(logits.float(), -1) if cfg.temperature > 0 else logits.argmax(-1)).sum()
        elif (
            cfg.temperature > 0 and k > 0
        ):  # rejection sampling holds q [B, K, V]: the larger of the sampled rules
            q = torch.full((num, k, logits.shape[-1]), 1.0 / logits.shape[-1], device=device)
            rejection_accept(drafts, q, logits, cfg.temperature, ctx.generator)
        elif cfg.temperature > 0:
            target_token(logits[:, 0], cfg.temperature, ctx.generator)
        else:
            greedy_accept(drafts, logits)
    if runner.proposer is not None and k > 0:
        inputs = [[0] * n for n in lens]
        if runner.tree:
            runner.proposer.propose_tree(
                ctx, [None] * num, inputs, features, starts, k, cfg.topk, cfg.num_verify_tokens
            )
        else:
            runner.proposer.propose(ctx, [None] * num, inputs, features, starts, k)
