"""Float32 linears on an x86 CPU through oneDNN, each weight reordered once into its blocked layout.

torch's F.linear on the CPU calls MKL's sgemm, which repacks the weight on every call: at the
few rows of a decode step (a handful of requests, K+1 positions each) that repacking is most of
the matmul, and the demo's step is mostly matmuls. oneDNN's linear over a weight reordered once at
load skips it. Measured on 2 cores: on an AVX-512 EPYC, 2-5x faster at 2-16 rows and ~20% at
2,000; on an AVX2 EPYC, about 10% less over a whole cell's matmuls (faster from 4 rows up,
slower at one row of a narrow layer). docs/benchmarks/cpu-speed.md has the numbers.

Its results are also row-invariant: a row's output does not depend on which other rows share the
call (checked bitwise by tests/test_cpu_linear.py), which MKL does not promise. They differ from
MKL's in the last bits, as any two GEMM libraries do; every oracle compares like with like.

The reordered copy is kept beside the weight (tied and shared weights stay plain tensors), so
packing is skipped past a memory cap. A weight written after packing (its version counter moved),
replaced by another Parameter, or moved to new storage (`module.to`) is used as it is now: forward
falls back to F.linear rather than read a stale copy. A write through `.data` is invisible to torch's
counters, here as everywhere.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn import functional as F

# the reordered copies one model may add, in bytes (its linears' float32 weights); past it, MKL
PACK_CAP_BYTES = 4 << 30
# ALCHECK_CPU_LINEAR=mkl turns packing off (a benchmark's A/B, or a CPU whose oneDNN misbehaves)
ENV_SWITCH = "ALCHECK_CPU_LINEAR"


class PackedLinear(nn.Linear):
    """An nn.Linear (same parameters, same state_dict) with a oneDNN-reordered weight for
    no-grad float32 CPU calls; anything else (autograd, another device or dtype) is F.linear."""

    packed: torch.Tensor | None = None
    packed_version: int = -1
    # (the Parameter packed, its storage then): a replaced Parameter is not the packed one, and
    # module.to swaps a Parameter's storage in place. A tuple: a Parameter attribute would register
    packed_from: tuple = (None, 0)

    def forward(self, x):
        packed, weight = self.packed, self.weight
        if (
            packed is not None
            and not torch.is_grad_enabled()
            and x.dtype == torch.float32
            and x.device.type == "cpu"
            and weight._version == self.packed_version
            and weight is self.packed_from[0]
            and weight.data_ptr() == self.packed_from[1]
        ):
            return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def available() -> bool:
    """oneDNN's linear ops exist in this torch build (x86 and most aarch64 CPU builds)."""
    if os.environ.get(ENV_SWITCH, "").lower() == "mkl":
        return False
    ops = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(ops, "_reorder_linear_weight")
        and hasattr(ops, "_linear_pointwise")
    )


def _candidates(model: nn.Module) -> list[nn.Linear]:
    return [
        m
        for m in model.modules()
        if type(m) in (nn.Linear, PackedLinear)
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
        and m.weight.dim() == 2
    ]


def pack_linears(*models: nn.Module, cap_bytes: int = PACK_CAP_BYTES) -> int:
    """Reorder every plain float32 CPU nn.Linear of `models` for oneDNN; returns how many. Nothing
    is packed when oneDNN is missing, switched off, or the copies would pass cap_bytes; a weight
    seen twice (tied, or shared by two models) is packed once."""
    if not available():
        return 0
    linears = list({id(m): m for model in models if model is not None for m in _candidates(model)}.values())
    if sum(m.weight.numel() * 4 for m in linears) > cap_bytes:
        return 0
    packed_by_weight: dict[int, torch.Tensor] = {}
    for m in linears:
        w = m.weight.detach()
        key = id(m.weight)
        if key not in packed_by_weight:
            packed_by_weight[key] = torch.ops.mkldnn._reorder_linear_weight(w, None)
        m.__class__ = PackedLinear  # same parameters and buffers: only forward changes
        m.packed, m.packed_version = packed_by_weight[key], m.weight._version
        m.packed_from = (m.weight, m.weight.data_ptr())
    return len(linears)
