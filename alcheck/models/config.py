"""Model shapes read from a checkpoint's config.json (old and new transformers layouts)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LLAMA_ARCHITECTURES = {"LlamaForCausalLM", "LlamaModel"}


@dataclass(slots=True)
class ModelConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qkv_bias: bool = False  # bias on q/k/v only (the EAGLE repo's key; its Qwen2 heads set it)
    mlp_bias: bool = False
    bias: bool | None = None  # EAGLE-1 head: bias on fc; None = config.json has no "bias" key (the file decides)
    eos_token_ids: list[int] = field(default_factory=list)
    model_type: str = "llama"

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, raw: dict) -> "ModelConfig":
        # transformers 5 nests rope_theta and the scaling dict under rope_parameters
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        theta = raw.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = rope if rope.get("rope_type", rope.get("type", "default")) != "default" else None
        return cls(
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            vocab_size=raw["vocab_size"],
            head_dim=raw.get("head_dim") or 0,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=raw.get("max_position_embeddings", 8192),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=bool(raw.get("attention_bias", False)),
            qkv_bias=bool(raw.get("qkv_bias", False)),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            bias=None if raw.get("bias") is None else bool(raw["bias"]),
            eos_token_ids=config_eos_ids(raw),
            model_type=raw.get("model_type", "llama"),
        )


def config_eos_ids(raw: dict) -> list[int]:
    """config.json's eos_token_id (an id, a list of them, or absent) as a list."""
    eos = raw.get("eos_token_id")
    return [eos] if isinstance(eos, int) else list(eos or [])


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None):
    """Inverse RoPE frequencies, with Llama-3.1's frequency-dependent scaling when configured."""
    import torch

    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope scaling {kind!r} is not supported (only llama3)")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)
