"""Paged attention: store new K/V through the slot mapping, attend through the block table.

One forward pass carries a flat batch of tokens from several requests (varlen, nano-vllm style).
Each request's queries are the last `q_len` positions of its context, so causality is
"key position <= query position". Slot -1 marks padding: its K/V is not stored.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from alcheck.errors import AlcheckError

try:  # optional GPU extra
    from flash_attn import flash_attn_varlen_func
except Exception:  # noqa: BLE001 - any import failure means "not available"
    flash_attn_varlen_func = None

KERNELS = ("torch", "flash-attn", "triton")
# a torch-path batch with unequal query lengths this long or longer (prefills) attends per request
PER_REQUEST_MIN_Q = 64
CHUNK = 16  # requests per chunk of a dense torch-path batch (AttnBatch.split_by_length)
# forces a kernel everywhere (tests run "triton" on the CPU under TRITON_INTERPRET=1)
FORCE_ENV = "ALCHECK_ATTENTION"


@dataclass
class AttnBatch:
    """Attention metadata shared by every layer of one forward pass."""

    positions: torch.Tensor  # [T] long: RoPE positions (the slot positions unless a tree says otherwise)
    slot_mapping: torch.Tensor  # [T] long, -1 = do not store
    block_tables: torch.Tensor  # [B, W] int, unset entries are 0
    query_lens: list[int]  # per request
    seq_lens: list[int]  # per request: context length including the new tokens
    block_size: int
    kernel: str = "torch"  # "torch" (SDPA over gathered blocks), "flash-attn" or "triton"
    # derived for the torch path
    q_index: torch.Tensor | None = None  # [T] flat index into [B * max_q]
    mask: torch.Tensor | None = None  # [B, 1, max_q, max_kv] additive (0 / -inf), built once per forward
    max_q: int = 0
    max_kv: int = 0
    cu_q: torch.Tensor | None = None
    cu_k: torch.Tensor | None = None
    dense: bool = False  # all query_lens equal max_q
    # every slot is >= 0 (the runner's batches): store without the boolean mask, whose nonzero()
    # waits for the device - three host syncs per layer per forward on a GPU
    all_stored: bool = False
    fused: bool = (
        False  # half precision on CUDA in the static runner: the layers' fused kernels (models/fused.py)
    )
    # the torch path attends request by request over each one's own keys (a prefill: padding all
    # to the longest would multiply the work); no batch mask then, query_pos holds the positions
    per_request: bool = False
    # a dense torch-path batch of many requests attends in chunks of similar context length, each
    # over its own longest context rather than the batch's (sub-batches: block tables, masks)
    chunks: list | None = None
    chunk_rows: list | None = None  # [chunk] long: the requests of each chunk
    chunk: tuple | None = None  # a chunk's own: (its first index in length order, its requests)
    # derived for the triton path (models/triton_attention.py), which takes no additive mask
    query_pos: torch.Tensor | None = None  # [B, max_q] long: each query's position (padded rows: 0)
    tree_mask: torch.Tensor | None = None  # [B, max_q, width] bool over the keys tree_start .. + width - 1
    tree_start: torch.Tensor | None = None  # [B] long
    rope_cache: dict = field(default_factory=dict)
    group_masks: dict = field(default_factory=dict)  # (GQA group size, dtype) -> mask repeated per query head
    # a chain's single-token draft steps (runner/paged.py): one dict shared by the steps, holding each
    # layer's (and chunk's) gathered keys and values, which the next step extends by its one new row
    kv_reuse: dict | None = None

    @classmethod
    def build(
        cls,
        positions,
        slot_mapping,
        block_tables,
        query_lens,
        seq_lens,
        block_size,
        kernel,
        dtype=torch.float32,
        rope_positions=None,
        tree_masks=None,
        all_stored=False,
    ):
        """positions: per token (a list or tensor), the position of its slot; request b's tokens
        are the b-th run of query_lens. rope_positions: per token, when RoPE differs (tree nodes
        at their depth). tree_masks: bool [B, max_q, W] over each request's last W keys."""
        device = block_tables.device
        if isinstance(positions, torch.Tensor):
            positions = positions.tolist()
        if tree_masks is not None and kernel == "flash-attn":  # its paged kernel is causal-only
            kernel = pick_attention(device, block_size, dtype, tree=True)
        rope = positions if rope_positions is None else rope_positions
        b = cls(
            torch.as_tensor(rope, device=device),
            slot_mapping,
            block_tables,
            list(query_lens),
            list(seq_lens),
            block_size,
            kernel,
            all_stored=all_stored,
        )
        b.max_q = max(query_lens)
        b.max_kv = max(seq_lens)
        if kernel == "flash-attn":
            b.cu_q = _cumsum(query_lens, device)
            b.cu_k = _cumsum(seq_lens, device)
            return b
        num = len(query_lens)
        b.dense = all(n == b.max_q for n in query_lens)
        if b.dense:  # every row is a query: the flat index is the identity (a decode or verify step)
            b.q_index = torch.arange(num * b.max_q, device=device)
            slot_pos = b.positions if rope_positions is None else torch.tensor(positions, device=device)
            q_pos_t = slot_pos.view(num, b.max_q)
        else:
            q_index, q_pos = [], [0] * (num * b.max_q)  # padded query rows get key 0: never all-masked
            at = 0
            for r, n in enumerate(query_lens):
                for j in range(n):
                    q_index.append(r * b.max_q + j)
                    q_pos[r * b.max_q + j] = positions[at + j]
                at += n
            b.q_index = torch.tensor(q_index, device=device)
            q_pos_t = torch.tensor(q_pos, device=device).view(num, b.max_q)
        if kernel == "triton":
            b.query_pos = q_pos_t
            if tree_masks is not None:
                width = tree_masks.shape[-1]
                b.tree_mask = tree_masks.to(device)[:, : b.max_q]
                b.tree_start = torch.tensor(seq_lens, device=device) - width
            return b
        if not b.dense and b.max_q >= PER_REQUEST_MIN_Q and tree_masks is None:
            b.per_request, b.query_pos = True, q_pos_t
            return b
        kv_pos = torch.arange(b.max_kv, device=device)
        allowed = (kv_pos[None, None, :] <= q_pos_t[:, :, None]).unsqueeze(1)
        if tree_masks is not None:  # the tree region: the last W keys of each request
            width = tree_masks.shape[-1]
            cols = torch.tensor(seq_lens, device=device)[:, None] - width + torch.arange(width, device=device)
            index = cols[:, None, None, :].expand(num, 1, b.max_q, width)
            allowed.scatter_(3, index, tree_masks.to(device)[:, None, : b.max_q])
        b.mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
        if b.dense and tree_masks is None and num >= 2 * CHUNK:
            b.chunk_rows, b.chunks = b.split_by_length()
        return b

    def split_by_length(self):
        """Chunks of CHUNK requests in context-length order: (rows per chunk, sub-batches). The
        tables and masks are permuted once; each chunk holds slices of them."""
        order = sorted(range(len(self.seq_lens)), key=self.seq_lens.__getitem__)
        index = torch.tensor(order, device=self.block_tables.device)
        tables, masks = self.block_tables.index_select(0, index), self.mask.index_select(0, index)
        rows, subs = [], []
        for at in range(0, len(order), CHUNK):
            picked = order[at : at + CHUNK]
            seq_lens = [self.seq_lens[i] for i in picked]
            sub = AttnBatch(
                self.positions,
                self.slot_mapping,
                tables[at : at + CHUNK],
                [self.query_lens[i] for i in picked],
                seq_lens,
                self.block_size,
                self.kernel,
                max_q=self.max_q,
                max_kv=max(seq_lens),
                dense=True,
            )
            sub.mask = masks[at : at + CHUNK, ..., : sub.max_kv]
            sub.chunk = (at, picked)
            rows.append(index[at : at + CHUNK])
            subs.append(sub)
        return rows, subs


def _cumsum(lens, device):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def store_kv(k_cache, v_cache, k, v, slot_mapping, all_stored: bool = False):
    """Write new K/V ([T, kv_heads, head_dim]) into caches ([num_blocks, block_size, kv_heads, head_dim])."""
    if all_stored:
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)
        return
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k[keep])
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v[keep])


def paged_attention(q, k_cache, v_cache, batch: AttnBatch, scale: float):
    """q [T, heads, dim] -> [T, heads, dim], reading keys/values through the block table."""
    if batch.kernel == "triton":  # imported here: triton is optional
        from alcheck.models.triton_attention import triton_paged_attention

        return triton_paged_attention(q, k_cache, v_cache, batch, scale)
    if batch.kernel == "flash-attn":
        return flash_attn_varlen_func(
            q,
            k_cache,
            v_cache,
            batch.cu_q,
            batch.cu_k,
            batch.max_q,
            batch.max_kv,
            softmax_scale=scale,
            causal=True,
            block_table=batch.block_tables,
        )
    if batch.chunks:
        return _attend_chunked(q, k_cache, v_cache, batch, scale)
    keys, values = gather_kv(k_cache, v_cache, batch)
    return attend(q, keys, values, batch, scale)


def _attend_chunked(q, k_cache, v_cache, batch: AttnBatch, scale: float):
    """paged_attention of a dense batch, chunk by chunk (AttnBatch.split_by_length)."""
    heads, dim = q.shape[1], q.shape[2]
    by_request = q.view(-1, batch.max_q, heads, dim)
    out = torch.empty_like(by_request)
    for rows, sub in zip(batch.chunk_rows, batch.chunks):
        keys, values = gather_kv(k_cache, v_cache, sub)
        part = attend(by_request.index_select(0, rows).view(-1, heads, dim), keys, values, sub, scale)
        out.index_copy_(0, rows, part.view(-1, batch.max_q, heads, dim))
    return out.view(-1, heads, dim)


def gather_kv(k_cache, v_cache, batch: AttnBatch):
    """Each request's blocks as [B, kv_heads, max_kv, dim] keys and values (entries past a
    request's length are masked by attend)."""
    if batch.kv_reuse is not None:
        return _gather_reused(k_cache, v_cache, batch)
    keys, values = _gather_blocks(k_cache, v_cache, batch, -(-batch.max_kv // batch.block_size))
    return keys[:, : batch.max_kv].transpose(1, 2), values[:, : batch.max_kv].transpose(1, 2)


def _gather_blocks(k_cache, v_cache, batch: AttnBatch, num_blocks: int):
    """The first num_blocks blocks of each request: [B, num_blocks * block_size, kv_heads, dim]."""
    num = batch.block_tables.shape[0]
    tables = batch.block_tables[:, :num_blocks].reshape(-1).long()
    # index_select is several times faster than advanced indexing here on CPU.
    keys = k_cache.index_select(0, tables).view(num, -1, *k_cache.shape[2:])
    values = v_cache.index_select(0, tables).view(num, -1, *v_cache.shape[2:])
    return keys, values


def _gather_reused(k_cache, v_cache, batch: AttnBatch):
    """gather_kv for a chain's draft step, one query per request at its last position: the step
    before gathered the same blocks (one block more than it needed), and since then only each
    request's own new row changed (the runner reuses only when every write stays in its writer's
    blocks), so that row is copied in from the cache instead of gathering everything again. The
    keys and values are the same numbers a fresh gather gives."""
    at, picked = batch.chunk if batch.chunk is not None else (0, None)
    key = (k_cache.data_ptr(), at)
    held = batch.kv_reuse.get(key)
    if held is None or held[0] != picked or held[1].shape[1] < batch.max_kv:
        blocks = min(-(-batch.max_kv // batch.block_size) + 1, batch.block_tables.shape[1])
        keys, values = _gather_blocks(k_cache, v_cache, batch, blocks)
        batch.kv_reuse[key] = (picked, keys, values)
    else:
        _, keys, values = held
        last = torch.tensor([n - 1 for n in batch.seq_lens], device=keys.device)
        # one token per request: request b's new row is slot_mapping[b] (a chunk's: its requests')
        slots = (
            batch.slot_mapping
            if picked is None
            else batch.slot_mapping[torch.tensor(picked, device=keys.device)]
        )
        index = torch.arange(len(batch.seq_lens), device=keys.device)
        keys[index, last] = k_cache.view(-1, *k_cache.shape[2:]).index_select(0, slots)
        values[index, last] = v_cache.view(-1, *v_cache.shape[2:]).index_select(0, slots)
    return keys[:, : batch.max_kv].transpose(1, 2), values[:, : batch.max_kv].transpose(1, 2)


def attend(q, keys, values, batch: AttnBatch, scale: float):
    """SDPA of q [T, heads, dim] over gathered keys/values under the batch's additive mask."""
    if batch.per_request:
        return _attend_per_request(q, keys, values, batch, scale)
    num = keys.shape[0]
    heads, dim = q.shape[1], q.shape[2]
    kv_heads, max_q = keys.shape[1], batch.max_q
    group = heads // kv_heads
    if batch.dense:  # every request feeds max_q tokens (decode, verify): no padding to scatter
        padded = q
    else:
        padded = q.new_zeros(num * max_q, heads, dim)
        padded[batch.q_index] = q
    # GQA without expanding K/V: the `group` query heads sharing a KV head become extra query rows
    padded = (
        padded.view(num, max_q, kv_heads, group, dim)
        .permute(0, 2, 3, 1, 4)
        .reshape(num, kv_heads, group * max_q, dim)
    )
    key = (group, q.dtype)
    if key not in batch.group_masks:
        # the additive mask in the query's dtype, as SDPA's fused CUDA kernels expect (fp16/bf16 runs)
        batch.group_masks[key] = batch.mask.to(q.dtype).repeat(1, 1, group, 1)
    mask = batch.group_masks[key]
    out = F.scaled_dot_product_attention(padded, keys, values, attn_mask=mask, scale=scale)
    out = out.view(num, kv_heads, group, max_q, dim).permute(0, 3, 1, 2, 4)
    out = out.reshape(num * max_q, heads, dim)
    return out if batch.dense else out[batch.q_index]


def _attend_per_request(q, keys, values, batch: AttnBatch, scale: float):
    """attend, one SDPA per request over its own seq_len keys and query_len rows (the same mask
    values: key position <= query position)."""
    heads, dim = q.shape[1], q.shape[2]
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    outs, at = [], 0
    for r, (n, length) in enumerate(zip(batch.query_lens, batch.seq_lens)):
        rows = q[at : at + n].view(1, n, kv_heads, group, dim).permute(0, 2, 3, 1, 4)
        allowed = torch.arange(length, device=q.device)[None, :] <= batch.query_pos[r, :n, None]
        mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
        mask.masked_fill_(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(
            rows.reshape(1, kv_heads, group * n, dim),
            keys[r : r + 1, :, :length],
            values[r : r + 1, :, :length],
            attn_mask=mask.repeat(group, 1)[None, None],
            scale=scale,
        )
        outs.append(out.view(kv_heads, group, n, dim).permute(2, 0, 1, 3))
        at += n
    return torch.cat(outs).reshape(-1, heads, dim)


def pick_attention(
    device: torch.device,
    block_size: int,
    dtype: torch.dtype = torch.float16,
    static: bool = False,
    tree: bool = False,
) -> str:
    """The attention kernel of a batch. static: the static runner's batches; tree: a tree batch.

    - flash-attn on CUDA when importable, for fp16/bf16 (it has no float32 kernels) and
      block_size % 256 == 0 (its paged kernels need that), for the eager runner's causal batches;
    - triton's paged kernel (models/triton_attention.py) for the static runner on CUDA when triton
      is importable (chains and trees: it reads the pool in place and applies the tree mask itself);
    - else torch SDPA over gathered blocks: the reference, always on the CPU, and the eager runner's
      default on CUDA (its numerics were checked on a GPU; the triton kernel so far only under
      triton's CPU interpreter, so it runs in the eager runner only when forced).
    ALCHECK_ATTENTION=torch|triton|flash-attn forces a kernel (flash-attn only where it has a form).
    torch's flex_attention with a paged block mask lost to the gather path on the CPU in 10 of 12
    shapes (bench/bench_attention.py, results/bench-attention.md; gpu-check runs it on a GPU)."""
    forced = os.environ.get(FORCE_ENV)
    if forced:
        if forced not in KERNELS:
            raise AlcheckError(
                f"{FORCE_ENV}={forced!r} names no attention kernel: use one of {', '.join(KERNELS)}"
            )
        if not (forced == "flash-attn" and (static or tree)):
            return forced
    if (
        not (static or tree)
        and device.type == "cuda"
        and flash_attn_varlen_func is not None
        and block_size % 256 == 0
        and dtype in (torch.float16, torch.bfloat16)
    ):
        return "flash-attn"
    if static and device.type == "cuda" and triton_available():
        return "triton"
    return "torch"


@functools.cache
def triton_available() -> bool:
    """Whether triton is importable, without importing it (alcheck runs without it)."""
    return importlib.util.find_spec("triton") is not None


def bind_kv_cache(attention_layers, num_blocks: int, block_size: int, dtype, device) -> torch.Tensor:
    """One tensor [2, layers, num_blocks, block_size, kv_heads, head_dim]; each layer gets a view."""
    first = attention_layers[0]
    cache = torch.zeros(
        2,
        len(attention_layers),
        num_blocks,
        block_size,
        first.num_kv_heads,
        first.head_dim,
        dtype=dtype,
        device=device,
    )
    for i, layer in enumerate(attention_layers):
        layer.k_cache, layer.v_cache = cache[0, i], cache[1, i]
    return cache
