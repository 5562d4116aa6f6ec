"""Paged attention as one Triton kernel, with an optional tree mask (issue 22).

For lane b, query row j and head h: softmax(scale * q.k) over the keys at positions p <= pos[b, j],
read through the lane's block table. With a tree mask, the keys at tree_start[b] .. tree_start[b] +
tree_width - 1 are seen as the mask says instead (static_batch's and AttnBatch.build's rule).

One program per (tile of query rows, KV head, lane). A tile's rows are (query, group member) pairs,
so the query heads sharing a KV head (GQA) share each key load. Keys come in tiles of BLOCK_N
positions, each addressed through its own block-table entry, so BLOCK_N need not be the block
size; an online softmax runs over the tiles. Nothing waits for the host: the grid comes from
shapes, and the key loop stops at the tile's last visible position, read on the device (a CUDA
graph replays it with whatever positions the lanes hold).

Imported only when the kernel runs: `import alcheck` works without triton. Under
TRITON_INTERPRET=1 (set before this module is imported) it runs on CPU tensors, as the tests do.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from alcheck.errors import AlcheckError

LOG2E = 1.4426950408889634


@triton.jit
def _paged_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    table_ptr,
    pos_ptr,
    tree_ptr,
    tree_start_ptr,
    qk_scale,
    num_q,
    group,
    head_dim,
    num_keys,
    tree_width,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_tb,
    stride_tw,
    stride_pb,
    stride_pq,
    stride_mb,
    stride_mq,
    stride_mk,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_TREE: tl.constexpr,
    IEEE: tl.constexpr,
):
    tile, kvh, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # row = j * group + g
    row_ok = rows < num_q * group
    j = rows // group
    head = kvh * group + rows % group
    d = tl.arange(0, BLOCK_D)
    d_ok = d < head_dim  # head_dim padded to a power of two
    q_rows = (b * num_q + j).to(tl.int64)
    q = tl.load(
        q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    qpos = tl.load(pos_ptr + b * stride_pb + j * stride_pq, mask=row_ok, other=-1)  # padding rows see nothing

    # the last key any row of the tile may see: its last position, or the end of the tree region
    hi = tl.max(qpos) + 1
    if HAS_TREE:
        tree_start = tl.load(tree_start_ptr + b)
        hi = tl.maximum(hi, tree_start + tree_width)
    hi = tl.minimum(hi, num_keys)

    m = tl.full([BLOCK_M], -1.0e30, tl.float32)  # finite: a fully masked tile gives p = 0, not NaN
    den = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, hi, BLOCK_N):
        p = start + tl.arange(0, BLOCK_N)
        key_ok = p < num_keys
        block = tl.load(table_ptr + b * stride_tb + (p // BLOCK_SIZE) * stride_tw, mask=key_ok, other=0).to(
            tl.int64
        )
        tok = p % BLOCK_SIZE
        k_off = block * stride_kb + tok * stride_kt + kvh * stride_kh
        kt = tl.load(k_ptr + k_off[None, :] + d[:, None], mask=key_ok[None, :] & d_ok[:, None], other=0.0)
        if IEEE:
            s = tl.dot(q, kt, input_precision="ieee")
        else:
            s = tl.dot(q, kt)
        s = s * qk_scale
        allowed = p[None, :] <= qpos[:, None]
        if HAS_TREE:  # inside the region, the tree mask replaces causality
            off = p - tree_start
            inside = (off >= 0) & (off < tree_width)
            seen = tl.load(
                tree_ptr + b * stride_mb + j[:, None] * stride_mq + off[None, :] * stride_mk,
                mask=row_ok[:, None] & inside[None, :],
                other=0,
            )
            allowed = tl.where(inside[None, :], seen != 0, allowed)
        s = tl.where(allowed & key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        prob = tl.exp2(s - m_new[:, None])
        den = den * alpha + tl.sum(prob, 1)
        v_off = block * stride_vb + tok * stride_vt + kvh * stride_vh
        v = tl.load(v_ptr + v_off[:, None] + d[None, :], mask=key_ok[:, None] & d_ok[None, :], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(prob.to(v.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(prob.to(v.dtype), v)
        m = m_new
    out = acc / tl.where(den > 0, den, 1.0)[:, None]
    tl.store(
        o_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=row_ok[:, None] & d_ok[None, :],
    )


def _pow2(n: int, low: int = 16) -> int:
    return max(low, 1 << max(0, n - 1).bit_length())


def triton_paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch, scale: float
) -> torch.Tensor:
    """q [T, heads, dim] -> [T, heads, dim], as paged_attention with kernel "torch" computes it.
    batch (an AttnBatch) carries query_pos [B, max_q], and for trees tree_mask [B, max_q, width]
    bool with tree_start [B]; the block table's width bounds the keys."""
    table = batch.block_tables
    num, blocks = table.shape
    heads, dim = q.shape[1], q.shape[2]
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    max_q = batch.max_q
    if batch.dense:  # every lane feeds max_q queries (decode, verify, the static runner)
        padded = q
    else:
        padded = q.new_zeros(num * max_q, heads, dim)
        padded[batch.q_index] = q
    if padded.stride(2) != 1:  # the kernel reads head_dim contiguously (the caches' layout too)
        padded = padded.contiguous()
    out = torch.empty_like(padded)
    tree = batch.tree_mask is not None
    mask = batch.tree_mask.view(torch.uint8) if tree else batch.query_pos  # a dummy pointer when unused
    rows = max_q * group
    block_m = min(64, _pow2(rows))
    block_d = _pow2(dim)
    # keys are addressed one by one through the table, so a tile need not match a KV block: any
    # --block-size works (tl.arange needs a power of two), and large blocks do not grow the tiles
    block_n = 64 if block_d <= 128 else 32
    grid = (math.ceil(rows / block_m), kv_heads, num)
    try:
        _paged_attention_kernel[grid](
            padded,
            k_cache,
            v_cache,
            out,
            table,
            batch.query_pos,
            mask,
            batch.tree_start if tree else batch.query_pos,
            scale * LOG2E,
            max_q,
            group,
            dim,
            blocks * batch.block_size,
            mask.shape[-1] if tree else 0,
            padded.stride(0),
            padded.stride(1),
            out.stride(0),
            out.stride(1),
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            v_cache.stride(0),
            v_cache.stride(1),
            v_cache.stride(2),
            table.stride(0),
            table.stride(1),
            batch.query_pos.stride(0),
            batch.query_pos.stride(1),
            mask.stride(0),
            mask.stride(1),
            mask.stride(-1),
            BLOCK_SIZE=batch.block_size,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_D=block_d,
            HAS_TREE=tree,
            IEEE=q.dtype == torch.float32,
        )
    except Exception as exc:  # noqa: BLE001 - a compile or launch failure on this machine: name the way around it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise AlcheckError(
            f"the Triton paged-attention kernel failed here ({type(exc).__name__}: {first}): set "
            "ALCHECK_ATTENTION=torch to run the reference attention, and report it"
        ) from exc
    return out if batch.dense else out[batch.q_index]
