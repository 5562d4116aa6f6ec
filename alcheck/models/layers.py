"""Llama building blocks with HF parameter names, attending through the paged KV cache."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from alcheck.models.attention import AttnBatch, paged_attention, store_kv
from alcheck.models.config import ModelConfig, rope_inv_freq


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float, scaling: dict | None):
        super().__init__()
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta, scaling), persistent=False)

    def forward(self, positions, q, k):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos().to(q.dtype)[:, None], emb.sin().to(q.dtype)[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: Rotary, in_features: int | None = None):
        super().__init__()
        inp = in_features or cfg.hidden_size
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(inp, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(inp, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(inp, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.rotary = rotary
        self.scale = self.head_dim**-0.5
        self.k_cache = self.v_cache = None  # bound by the runner

    def forward(self, x, batch: AttnBatch):
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(batch.positions, q, k)
        store_kv(self.k_cache, self.v_cache, k, v, batch.slot_mapping)
        out = paged_attention(q, self.k_cache, self.v_cache, batch, self.scale)
        return self.o_proj(out.reshape(t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(h, i, bias=b)
        self.up_proj = nn.Linear(h, i, bias=b)
        self.down_proj = nn.Linear(i, h, bias=b)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm Llama layer. EAGLE-1's single layer has no input_layernorm (input_norm=False)."""

    def __init__(self, cfg: ModelConfig, rotary: Rotary, input_norm: bool = True):
        super().__init__()
        if input_norm:
            self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, rotary)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.input_norm = input_norm

    def forward(self, x, batch: AttnBatch):
        h = self.input_layernorm(x) if self.input_norm else x
        x = x + self.self_attn(h, batch)
        return x + self.mlp(self.post_attention_layernorm(x))
