"""Llama building blocks with HF parameter names, attending through the paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

from alcheck.models import ops
from alcheck.models.attention import AttnBatch, paged_attention, store_kv
from alcheck.models.config import ModelConfig, rope_inv_freq


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        if torch.is_grad_enabled():  # training (the demo heads): the out-of-place reference form
            return ops.rms_norm(x, self.weight, self.eps)
        return ops.rms_norm_(x, self.weight, self.eps)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float, scaling: dict | None):
        super().__init__()
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta, scaling), persistent=False)

    def cos_sin(self, batch: AttnBatch, dtype):
        # cos/sin depend only on the positions: computed once per forward, shared by all layers
        key = id(self)
        if key not in batch.rope_cache:
            freqs = batch.positions.float()[:, None] * self.inv_freq[None, :]
            emb = torch.cat([freqs, freqs], dim=-1)
            batch.rope_cache[key] = (emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None])
        return batch.rope_cache[key]

    def forward(self, batch: AttnBatch, q, k):
        rope = ops.rope if torch.is_grad_enabled() else ops.rope_
        return rope(q, k, *self.cos_sin(batch, q.dtype))


# fused projections (one matmul instead of several) and the checkpoint tensors they stack
STACKED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


def stack_checkpoint(state: dict) -> dict:
    """HF tensor names -> ours: q/k/v and gate/up weights (and biases) concatenated into one."""
    out = dict(state)
    for fused, parts in STACKED_PROJECTIONS.items():
        for name in list(out):
            prefix, found, kind = name.rpartition(parts[0] + ".")
            if not found or kind not in ("weight", "bias") or (prefix and not prefix.endswith(".")):
                continue
            keys = [f"{prefix}{part}.{kind}" for part in parts]
            tensors = [out.get(key) for key in keys]
            if all(t is not None for t in tensors) and len({t.shape[1:] for t in tensors}) == 1:
                out[f"{prefix}{fused}.{kind}"] = torch.cat(tensors)
                for key in keys:
                    del out[key]
    return out


def checkpoint_names(name: str) -> list[str]:
    """The checkpoint tensor names behind one of our parameter names."""
    for fused, parts in STACKED_PROJECTIONS.items():
        if f"{fused}." in name:
            return [name.replace(fused, part) for part in parts]
    return [name]


def _output_projection(in_features: int, out_features: int, bias: bool, tp):
    """o_proj / down_proj: a plain Linear, or row-parallel (one all-reduce) under tensor parallelism."""
    if tp is None:
        return nn.Linear(in_features, out_features, bias=bias)
    from alcheck.tp.linear import RowParallelLinear

    return RowParallelLinear(in_features, out_features, bias, tp)


class Attention(nn.Module):
    """With tp (alcheck.tp.group.TPGroup): this rank's heads only (q/k/v column-parallel, o_proj
    row-parallel), so num_kv_heads, and the KV cache bound to the layer, are the rank's own."""

    def __init__(self, cfg: ModelConfig, rotary: Rotary, in_features: int | None = None, tp=None):
        super().__init__()
        inp = in_features or cfg.hidden_size
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        if tp is not None:  # alcheck.tp.checks made both divisible by the TP size
            self.num_heads, self.num_kv_heads = self.num_heads // tp.size, self.num_kv_heads // tp.size
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(
            inp, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias or cfg.qkv_bias
        )
        self.o_proj = _output_projection(self.q_size, cfg.hidden_size, cfg.attention_bias, tp)
        self.rotary = rotary
        self.scale = self.head_dim**-0.5
        self.k_cache = self.v_cache = None  # bound by the runner

    def forward(self, x, batch: AttnBatch):
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(t, self.num_heads, self.head_dim)
        k = k.reshape(t, self.num_kv_heads, self.head_dim)
        v = v.reshape(t, self.num_kv_heads, self.head_dim)
        if (
            batch.fused
        ):  # half precision on CUDA, static runner (every slot valid): one kernel (models/ops.py)
            q = ops.fused(
                ops.rope_store,
                q,
                k,
                v,
                *self.rotary.cos_sin(batch, q.dtype),
                self.k_cache,
                self.v_cache,
                batch.slot_mapping,
            )
        else:
            q, k = self.rotary(batch, q, k)
            store_kv(self.k_cache, self.v_cache, k, v, batch.slot_mapping, batch.all_stored)
        out = paged_attention(q, self.k_cache, self.v_cache, batch, self.scale)
        return self.o_proj(out.reshape(t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, tp=None):
        super().__init__()
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        if tp is not None:  # gate/up column-parallel, down row-parallel; an uneven split is fine here
            start, stop = tp.part(i)
            i = stop - start
        self.gate_up_proj = nn.Linear(h, 2 * i, bias=b)
        self.down_proj = _output_projection(i, h, b, tp)

    def forward(self, x):
        silu_mul = ops.silu_mul if torch.is_grad_enabled() else ops.silu_mul_
        return self.down_proj(silu_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    """Pre-norm Llama layer. EAGLE-1's single layer has no input_layernorm (input_norm=False)."""

    def __init__(self, cfg: ModelConfig, rotary: Rotary, input_norm: bool = True, tp=None):
        super().__init__()
        if input_norm:
            self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, rotary, tp=tp)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, tp)
        self.input_norm = input_norm

    def forward(self, x, batch: AttnBatch):
        if batch.fused:  # half precision on CUDA, static runner: the same math in fewer kernels
            return self._fused_forward(x, batch)
        h = self.input_layernorm(x) if self.input_norm else x
        if torch.is_grad_enabled():
            x = x + self.self_attn(h, batch)
            return x + self.mlp(self.post_attention_layernorm(x))
        # inference: the residual adds land in the sublayers' fresh outputs (a + x == x + a bitwise)
        x = self.self_attn(h, batch).add_(x)
        return self.mlp(self.post_attention_layernorm(x)).add_(x)

    def _fused_forward(self, x, batch: AttnBatch):
        """forward's operations in forward's order, the elementwise ones fused (models/ops.py)."""
        norm, post, mlp = (
            self.input_layernorm if self.input_norm else None,
            self.post_attention_layernorm,
            self.mlp,
        )
        h = ops.fused(ops.rms_norm, x, norm.weight, norm.eps) if norm is not None else x
        x, h = ops.fused(ops.add_rms_norm, x, self.self_attn(h, batch), post.weight, post.eps)
        return x + mlp.down_proj(ops.fused(ops.silu_mul, mlp.gate_up_proj(h)))
