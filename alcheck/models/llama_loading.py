"""The native Llama target's loader: config.json -> ModelConfig, then alcheck's own LlamaTarget
(fused q/k/v and gate/up projections, flash-attn, tensor-parallel shards) streamed in strictly.
One entry of the target table (models/targets.py); models/loading.py re-exports these names."""

from __future__ import annotations

from pathlib import Path

import torch

from alcheck.models.checkpoint_files import open_checkpoint
from alcheck.models.config import ModelConfig, auto_map_notes, read_model_config, rope_inv_freq
from alcheck.models.layers import Rotary
from alcheck.models.llama import LlamaTarget
from alcheck.models.strict_load import Extra, load_strict


def model_config(raw: dict, directory: Path, what: str) -> ModelConfig:
    """config.json -> ModelConfig, read as transformers reads it, with a one-line error naming the
    key for a missing or invalid value, or one alcheck's runner does not implement."""
    return read_model_config(raw, Path(directory) / "config.json", what)


def init_rotary(module: torch.nn.Module, inv_freq: torch.Tensor, device) -> None:
    """Non-persistent RoPE buffers are not in checkpoints: computed here, in float32 on the device."""
    inv_freq = inv_freq.to(device=device, dtype=torch.float32)
    for sub in module.modules():
        if isinstance(sub, Rotary):
            sub.inv_freq = inv_freq


# Tensors a target checkpoint may hold beyond our parameters. Anything else is an error.
TARGET_EXTRAS = [
    Extra("model.layers.*.self_attn.rotary_emb.inv_freq", "RoPE frequencies: recomputed from config.json")
]
TIED_LM_HEAD = Extra("lm_head.weight", "tie_word_embeddings: the embedding doubles as the LM head")


def load_target_model(
    directory: Path, cfg: ModelConfig, dtype=torch.float32, device="cpu", what="target", tp=None
) -> LlamaTarget:
    """The target's weights, streamed from directory into a module in dtype on device. With tp
    (alcheck.tp.group.TPGroup): this rank's shard, reading only its slices of split tensors."""
    with torch.device("meta"):
        model = LlamaTarget(cfg, tp)
    extras = TARGET_EXTRAS + ([TIED_LM_HEAD] if cfg.tie_word_embeddings else [])
    checkpoint = open_checkpoint(directory, what)
    if tp is not None:
        from alcheck.tp.shard import ShardedCheckpoint, shard_plan

        with torch.device("meta"):
            checkpoint = ShardedCheckpoint(checkpoint, shard_plan(LlamaTarget(cfg), model, tp))
    load_strict(model, checkpoint, dtype=dtype, device=device, what=what, extras=extras)
    init_rotary(model, rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling), device)
    return model.eval()


def load_llama(
    directory: Path, raw: dict, dtype=torch.float32, device="cpu", what="target", tp=None
) -> LlamaTarget:
    """The target table's loader for Llama-family checkpoints."""
    cfg = model_config(raw, directory, what)
    cfg.notes = auto_map_notes(raw, Path(directory) / "config.json", what)  # for run.json
    return load_target_model(directory, cfg, dtype, device, what, tp)
