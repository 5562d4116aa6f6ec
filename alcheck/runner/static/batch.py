"""Attention metadata built on the device from tensors, in fixed shapes (no host sync, no list).

The eager runner's AttnBatch.build reads Python lists (positions, query and sequence lengths) and
sizes the gathered keys to the batch's longest context. Here every lane feeds the same number of
queries and attends over the same padded key width (`width` blocks), so shapes depend only on the
bucket: a step traces once per (batch bucket, width) and can be replayed as a CUDA graph.
Padding lanes have an all-zero block table: every slot they write is in the null block.
"""

from __future__ import annotations

import torch

from alcheck.models.attention import AttnBatch, pick_attention


def slots_of(table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """[B, n] slot of each position through each lane's block table [B, W] (as a kernel reads it)."""
    return table.gather(1, positions // block_size) * block_size + positions % block_size


def static_batch(
    table: torch.Tensor,
    positions: torch.Tensor,
    block_size: int,
    dtype,
    rope_positions: torch.Tensor | None = None,
    tree_mask: torch.Tensor | None = None,
    tree_width: int = 0,
) -> AttnBatch:
    """table [B, W] long, positions [B, n] (slot positions; RoPE positions when rope_positions is
    None) -> the AttnBatch of one forward feeding n tokens per lane. Keys: all W * block_size
    positions of each lane, those after the query's position masked. tree_mask [B, n, tree_width]
    bool: what each query sees among the lane's last tree_width keys, which end at the query's
    last position (the eager runner's tree masks over "the last keys")."""
    num, n = positions.shape
    width = table.shape[1] * block_size
    kernel = pick_attention(table.device, block_size, dtype, static=True)
    rope = positions if rope_positions is None else rope_positions
    batch = AttnBatch(
        rope.reshape(-1),
        slots_of(table, positions, block_size).reshape(-1),
        table,
        [n] * num,
        [width] * num,
        block_size,
        kernel,
        all_stored=True,
        fused=table.device.type == "cuda" and dtype in (torch.float16, torch.bfloat16),
    )
    batch.max_q, batch.max_kv, batch.dense = n, width, True
    if kernel == "triton":  # the kernel applies causality and the tree mask itself
        batch.query_pos = positions
        if tree_mask is not None:
            batch.tree_mask, batch.tree_start = tree_mask, positions[:, -1] + 1 - tree_width
        return batch
    batch.mask = additive_mask(positions, width, dtype, tree_mask, tree_width)[:, None]  # [B, 1, n, width]
    return batch


def additive_mask(
    positions: torch.Tensor, width: int, dtype, tree_mask: torch.Tensor | None, tree_width: int
) -> torch.Tensor:
    """[B, n, width] 0 / -inf, as AttnBatch.build makes it for the torch kernel."""
    num, n = positions.shape
    kv_pos = torch.arange(width, device=positions.device)
    allowed = kv_pos[None, None, :] <= positions[:, :, None]  # [B, n, width]
    if tree_mask is not None:
        first = positions[:, -1:] + 1 - tree_width  # [B, 1]: the first key of the tree region
        offset = kv_pos[None, None, :] - first[:, :, None]  # [B, 1, width]
        inside = (offset >= 0) & (offset < tree_width)
        picked = tree_mask.gather(2, offset.clamp(0, tree_width - 1).expand(num, n, width))
        allowed = torch.where(inside, picked, allowed)
    return torch.zeros(allowed.shape, dtype=dtype, device=positions.device).masked_fill_(
        ~allowed, float("-inf")
    )
