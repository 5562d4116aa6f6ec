"""The layers' elementwise math, written once (models/layers.py calls it), and the same functions
fused for half precision on CUDA (issue 22): each compiled by torch.compile, so Inductor makes
one kernel of what runs eagerly as several launches (RMSNorm about 8, add + RMSNorm 9, RoPE on q
and k with the KV store about 12, SiLU·mul 2).

Only the static runner asks for the fused form (AttnBatch.fused, set for CUDA float16 / bfloat16
batches): float32 and the CPU run these functions eagerly, the reference numerics. The fused path
runs the same operations in the same order, so with the eager backend it gives the same bits
(tests/test_ops_fused.py); compiled in half precision only rounding may differ. A function whose
compilation fails runs eagerly from then on, the reason kept in FAILED (gpu-check reports it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BACKEND = "inductor"  # tests use "eager": the same graphs, run by the eager interpreter
FAILED: dict[str, str] = {}
_compiled: dict = {}


def rms_norm(x, weight, eps: float):
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def add_rms_norm(x, add, weight, eps: float):
    """(x + add, RMSNorm(x + add)): the residual stream and the next sublayer's input."""
    x = x + add
    return x, rms_norm(x, weight, eps)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_store(q, k, v, cos, sin, k_cache, v_cache, slots):
    """RoPE on q and k, then k and v written to their KV slots (every slot valid: the static runner's
    batches); returns the rotated q. Inductor updates the caches in place: measured on the CPU, a
    call costs the same with a 64x larger cache, so nothing copies the pool."""
    q, k = rope(q, k, cos, sin)
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)
    return q


def silu_mul(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


# In-place forms of the eager math for inference (no autograd: the layers call them only when grad is
# off). The same operations on the same operands, so the same bits (IEEE + and * commute); they
# write into the temporaries they create instead of allocating more. On the CPU a fresh
# prefill-sized temporary ([T, intermediate] float32, tens of MB) comes from mmap and is
# page-faulted on first touch: silu_mul_ at the demo prefill took 6 ms against 27 ms.


def rms_norm_(x, weight, eps: float):
    dtype = x.dtype
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)  # a new tensor: x is untouched
    return y.to(dtype).mul_(weight)


def _rotate_(x, cos, sin):
    return (x * cos).add_(rotate_half(x).mul_(sin))


def rope_(q, k, cos, sin):
    return _rotate_(q, cos, sin), _rotate_(k, cos, sin)


def silu_mul_(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)


def fused(fn, *args):
    """fn(*args) through torch.compile (one kernel on CUDA), or eagerly once its compilation failed."""
    name = fn.__name__
    if name not in FAILED:
        try:
            compiled = _compiled.get((name, BACKEND))
            if compiled is None:
                compiled = _compiled[name, BACKEND] = torch.compile(
                    fn, backend=BACKEND, dynamic=True, fullgraph=True
                )
            return compiled(*args)
        except Exception as exc:  # noqa: BLE001 - no compiler, no Triton: the same math, unfused
            FAILED[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return fn(*args)
