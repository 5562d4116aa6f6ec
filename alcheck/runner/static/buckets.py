"""Padded shapes: which batch bucket and KV width a step runs at, and its persistent buffers.

A step's shapes depend only on (batch bucket, width bucket), so each pair traces once and, on a
GPU, is captured once as a CUDA graph. Batch buckets are 1, 2, 4, 8, then every multiple of 16 up
to the largest batch (that batch itself last), as nano-vllm captures them: padding costs at most 15
lanes past 8. RunnerConfig.batch_buckets forces others; a running batch larger than the largest
bucket runs in chunks of it. Widths (blocks per lane in the block table, so keys
gathered per lane) are 1, 2, 4, 8, then multiples of 8: a lane reads at most 7 blocks past its
context, and a growing context changes graphs every 8 blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def batch_buckets(max_batch_size: int, forced: tuple[int, ...] = ()) -> tuple[int, ...]:
    if forced:
        return tuple(sorted(set(forced)))
    sizes = [n for n in (1, 2, 4, 8, *range(16, max_batch_size, 16)) if n < max_batch_size]
    return (*sizes, max_batch_size)


def bucket_for(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket holding n lanes (n <= the largest bucket: callers chunk first)."""
    return next(b for b in buckets if b >= n)


def width_for(blocks: int) -> int:
    """Blocks per lane in the padded block table."""
    if blocks <= 8:
        return 1 << max(0, blocks - 1).bit_length()
    return -(-blocks // 8) * 8


@dataclass
class StepBuffers:
    """One (K, bucket, width)'s persistent tensors: the step's input on the device (its address is
    what a CUDA graph reads) and a pinned host copy to fill it from without a blocking copy."""

    meta: torch.Tensor  # [bucket, columns] int64 on the device
    host: torch.Tensor  # the same shape on the host (pinned on CUDA)
    uniforms: torch.Tensor | None = None  # [bucket, K+1] float32 on the device: temperature > 0 draws

    @classmethod
    def make(cls, rows: int, columns: int, device: torch.device, draws: int = 0) -> StepBuffers:
        pinned = device.type == "cuda"
        return cls(
            torch.zeros(rows, columns, dtype=torch.long, device=device),
            torch.zeros(rows, columns, dtype=torch.long, pin_memory=pinned),
            torch.zeros(rows, draws, dtype=torch.float32, device=device) if draws else None,
        )

    def load(self, rows: list[list[int]]) -> torch.Tensor:
        """Write the lanes' rows (padding rows stay zero: null block, token 0) and send them over."""
        self.host.zero_()
        self.host[: len(rows)] = torch.tensor(rows, dtype=torch.long)
        self.meta.copy_(self.host, non_blocking=True)
        return self.meta
