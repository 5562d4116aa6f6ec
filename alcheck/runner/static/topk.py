"""An exact, sync-free top-k: the eager runner's stable_topk (runner/tree.py: largest first, exact
ties to the lower index) without its host sync.

stable_topk asks the host whether the k-th and (k+1)-th values tie. Here every entry gets a unique
int64 key instead: the float32 value's bits mapped to an integer of the same order (after adding
0.0, so that -0.0 becomes +0.0 and equal values have equal bits), times 2^32, plus the reversed
index. torch.topk over unique keys has one answer: by value, then by lower index.
"""

from __future__ import annotations

import torch

INDEX_BITS = 32


def order_keys(x: torch.Tensor) -> torch.Tensor:
    """int64 keys ordered as the float32 values of x, ties broken to the lower index."""
    bits = (x.float() + 0.0).view(torch.int32).long()
    ordered = torch.where(
        bits >= 0, bits, -(bits & 0x7FFFFFFF)
    )  # negative floats: larger magnitude, smaller key
    index = torch.arange(x.shape[-1], device=x.device)
    return ordered * (1 << INDEX_BITS) + (x.shape[-1] - 1 - index)


def exact_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the k largest along the last dim, largest first, ties to the lower index."""
    _, indices = torch.topk(order_keys(x), k, dim=-1)
    return x.gather(-1, indices), indices
