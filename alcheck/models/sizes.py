"""Parameter bytes of modules, counted without allocating: built on the meta device.

What a GPU must hold before its KV pool (runner/kv_budget.check_weights_fit): the target, or a
tensor-parallel rank's shard of it, plus the head (its drafting method counts it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


def module_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters in their own dtype (tied ones once)."""
    seen, total = set(), 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def meta_bytes(module_factory, dtype_bytes: int) -> int:
    """Bytes of module_factory()'s parameters at `dtype_bytes` each, built on the meta device."""
    with torch.device("meta"):
        module = module_factory()
    seen, numel = set(), 0
    for p in module.parameters():  # tied weights appear once
        if id(p) not in seen:
            seen.add(id(p))
            numel += p.numel()
    return numel * dtype_bytes


def target_weight_bytes(
    target_raw: dict, dtype_bytes: int, tensor_parallel_size: int = 1, target_dir: Path = Path("target")
) -> int:
    """The target's bytes as its target-table entry builds it (MoE experts included), or with
    tensor parallelism rank 0's shard of alcheck's own model (it holds the largest parts)."""
    from alcheck.models.config import ModelConfig
    from alcheck.models.llama import LlamaTarget
    from alcheck.models.targets import parameter_count
    from alcheck.tp.group import TPGroup

    if tensor_parallel_size == 1:
        return parameter_count(target_raw, target_dir) * dtype_bytes
    tp = TPGroup(0, tensor_parallel_size, torch.device("meta"))
    return meta_bytes(lambda: LlamaTarget(ModelConfig.from_dict(target_raw), tp), dtype_bytes)
