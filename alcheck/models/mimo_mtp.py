"""MiMo's multi-token-prediction layers (`--method mtp`, METHODS-NOTES section 4): the target
checkpoint carries `model.mtp_layers.{i}.*` beside its Qwen2 trunk, and each layer drafts from
the trunk's last-layer output (before the final norm) and the next token's embedding:

    e = token_layernorm(embed(x_{p+1}))      (zero at position 0, as vLLM does)
    h = hidden_layernorm(h_p)
    out = final_layernorm(decoder_layer(input_proj(cat[h, e])))
    logits = target lm_head(out)

A layer's decoder tensors sit at its own level (`model.mtp_layers.0.self_attn.q_proj.weight`, no
`mtp_block`), so a layer here IS transformers' Qwen2DecoderLayer plus the four extra modules, and
its parameter names are the checkpoint's. Its attention writes its own paged KV (the runner binds
it to the request's block table), with the registered paged attention (models/hf_attention.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from alcheck.errors import AlcheckError

ARCHITECTURE = "MiMoForCausalLM"
MTP_PREFIX = "model.mtp_layers."


def mtp_layer_count(raw: dict) -> int:
    return int(raw.get("num_nextn_predict_layers") or 0)


def draft_layer(step: int, num_layers: int) -> int:
    """The MTP layer draft step `step` (0-based) runs. vLLM 0.32's drafting loop never passes a
    spec_step_idx above 0 to MiMo's MTP model (its forward asserts 0), so every step reuses layer
    0 and the other layers are loaded but never run."""
    return 0


def check_mimo_target(raw: dict, directory: Path, names: set[str]) -> None:
    """A MiMo-format target with MTP layers, or one line naming what is missing."""
    config = Path(directory) / "config.json"
    count = mtp_layer_count(raw)
    archs = raw.get("architectures") or []
    if count < 1 or not any(n.startswith(MTP_PREFIX) for n in names):
        has = f"num_nextn_predict_layers={count}" if count else "no num_nextn_predict_layers"
        raise AlcheckError(
            f"--method mtp: target {config} has no MTP layers ({has}, no {MTP_PREFIX}* tensors): "
            f"pass a {ARCHITECTURE} checkpoint that ships its MTP layers, or another --method"
        )
    if ARCHITECTURE not in archs:
        raise AlcheckError(
            f"--method mtp: target {config} names architectures {archs}: alcheck runs MiMo's MTP "
            f"layers ({ARCHITECTURE}); DeepSeek-style MTP is not built in: pass a MiMo checkpoint"
        )
    missing = [i for i in range(count) if not any(n.startswith(f"{MTP_PREFIX}{i}.") for n in names)]
    if missing:
        raise AlcheckError(
            f"--method mtp: target {config} says num_nextn_predict_layers={count} but its weights hold "
            f"no {MTP_PREFIX}{missing[0]}.*: pass the config.json that came with these weights"
        )


def qwen2_config(raw: dict, directory: Path):
    """config.json as transformers' Qwen2Config (MiMo's trunk and MTP layers are Qwen2's)."""
    import transformers

    from alcheck.models.hf_attention import register

    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "auto_map")}
    try:
        config = transformers.Qwen2Config(**fields)
    except Exception as exc:  # noqa: BLE001 - any validation error of the config class
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise AlcheckError(
            f"target: {Path(directory) / 'config.json'} is not a usable MiMo config ({first}): "
            "fix config.json"
        ) from None
    config._attn_implementation = register()
    return config


def _decoder_layer_class():
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm

    class MTPLayer(Qwen2DecoderLayer):
        """One MTP layer: the decoder layer's modules plus MiMo's norms and input projection."""

        def __init__(self, config):
            super().__init__(config, layer_idx=0)  # full attention (layer_types[0]); no trunk index
            h, eps = config.hidden_size, config.rms_norm_eps
            self.token_layernorm = Qwen2RMSNorm(h, eps=eps)
            self.hidden_layernorm = Qwen2RMSNorm(h, eps=eps)
            self.input_proj = nn.Linear(2 * h, h, bias=False)
            self.final_layernorm = Qwen2RMSNorm(h, eps=eps)

    return MTPLayer


class MiMoMTPHead(nn.Module):
    """`forward(embeds, hidden, batch, layer)` -> the layer's final-norm output [T, H] (fed back as
    the next step's hidden, and to the target's lm_head for logits)."""

    def __init__(self, config, num_layers: int, path: Path):
        super().__init__()
        from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

        self.config = config
        self.path = Path(path)
        self.model = nn.Module()
        layer = _decoder_layer_class()
        self.model.mtp_layers = nn.ModuleList(layer(config) for _ in range(num_layers))
        self.rotary_emb = Qwen2RotaryEmbedding(config=config)
        for attn in self.attention_layers:  # what bind_kv_cache reads, and where it binds the caches
            attn.num_kv_heads = config.num_key_value_heads
            attn.k_cache = attn.v_cache = None

    @property
    def num_layers(self) -> int:
        return len(self.model.mtp_layers)

    @property
    def attention_layers(self) -> list:
        return [layer.self_attn for layer in self.model.mtp_layers]

    def forward(self, embeds, hidden, batch, layer: int = 0):
        mtp = self.model.mtp_layers[layer]
        positions = batch.positions
        embeds = torch.where(positions[:, None] == 0, torch.zeros_like(embeds), embeds)
        x = mtp.input_proj(torch.cat([mtp.hidden_layernorm(hidden), mtp.token_layernorm(embeds)], dim=-1))
        x = x[None]  # [1, T, H]: every request's rows in one flat row, as the trunk runs
        rope = self.rotary_emb(x, positions[None])
        out = mtp(x, attention_mask=None, position_ids=None, position_embeddings=rope, alcheck_batch=batch)
        out = out[0] if isinstance(out, tuple) else out
        return mtp.final_layernorm(out[0])


def build_mtp_head(raw: dict, directory: Path) -> MiMoMTPHead:
    with torch.device("meta"):
        return MiMoMTPHead(qwen2_config(raw, directory), mtp_layer_count(raw), directory)


def load_mtp_head(directory: Path, dtype, device) -> MiMoMTPHead:
    """The MTP layers, strictly, from the target's own checkpoint (the trunk's tensors are the
    target's and are skipped here)."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    from alcheck.models.checkpoint_files import open_checkpoint, read_config
    from alcheck.models.strict_load import Extra, load_strict

    directory = Path(directory)
    raw = read_config(directory, "target")
    head = build_mtp_head(raw, directory)
    trunk = "the target's trunk: loaded with the target"
    trunk_names = ("model.layers.*", "model.embed_tokens.*", "model.norm.*", "lm_head.*")
    extras = [Extra(p, trunk) for p in trunk_names]
    extras.append(Extra("*rotary_emb.inv_freq", "RoPE frequencies: recomputed from config.json"))
    load_strict(
        head,
        open_checkpoint(directory, "target"),
        dtype=dtype,
        device=device,
        what="target MTP layers",
        extras=extras,
    )
    head.rotary_emb = Qwen2RotaryEmbedding(config=head.config).to(device)
    return head.eval()


def mtp_head_bytes(raw: dict, directory: Path, dtype_bytes: int) -> int:
    return sum(p.numel() for p in build_mtp_head(raw, directory).parameters()) * dtype_bytes
