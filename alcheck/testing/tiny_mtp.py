"""Tiny MiMo-format targets for `--method mtp`: a tiny Qwen2 saved by transformers, its config
turned into MiMo's (architectures ["MiMoForCausalLM"], num_nextn_predict_layers) and its
safetensors given `model.mtp_layers.{i}.*`: the decoder layer's tensors at the layer's own level
plus token_layernorm, hidden_layernorm, input_proj and final_layernorm (vLLM's mimo_mtp.py
reads exactly these names). model_type stays "qwen2", as vLLM's CPU build serves it.

MTP layer 0 copies the trunk's layer 0 and final norm, and its input_proj passes the token
embedding through with a little of the trunk's state mixed in; the trunk's later layers are
damped. So the layer predicts what the target predicts often but not always, as the oracle
tests need. Layers past 0 are random (vLLM never runs them; models/mimo_mtp.draft_layer).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

DECODER_PARTS = ("self_attn.", "mlp.", "input_layernorm.", "post_attention_layernorm.")


def mimo_config(raw: dict, num_mtp_layers: int) -> dict:
    return {**raw, "architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": num_mtp_layers}


def mtp_layer_state(state: dict, i: int, hidden: int, g: torch.Generator, copy: bool, mix: float) -> dict:
    """Layer i's tensors: a copy of trunk layer 0 (copy) or random, plus MiMo's four extras."""
    out = {}
    for name, t in state.items():
        leaf = name.removeprefix("model.layers.0.")
        if leaf != name and leaf.startswith(DECODER_PARTS):
            value = t.clone() if copy else torch.randn(t.shape, generator=g) * float(t.float().std() + 0.1)
            out[f"model.mtp_layers.{i}.{leaf}"] = value
    proj = torch.cat([torch.randn(hidden, hidden, generator=g) * mix / hidden**0.5, torch.eye(hidden)], dim=1)
    if not copy:
        proj = torch.randn(hidden, 2 * hidden, generator=g) / hidden**0.5
    norm = state["model.norm.weight"]
    out[f"model.mtp_layers.{i}.token_layernorm.weight"] = torch.ones(hidden)
    out[f"model.mtp_layers.{i}.hidden_layernorm.weight"] = torch.ones(hidden)
    out[f"model.mtp_layers.{i}.input_proj.weight"] = proj
    out[f"model.mtp_layers.{i}.final_layernorm.weight"] = norm.clone() if copy else torch.ones(hidden)
    return out


def add_mtp_layers(target_dir: str | Path, num_mtp_layers: int, seed: int = 0, mix: float = 0.03) -> Path:
    """Turn a saved Qwen2 target into a MiMo-format one with num_mtp_layers MTP layers, in place."""
    from safetensors.torch import load_file, save_file

    folder = Path(target_dir)
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps(mimo_config(raw, num_mtp_layers), indent=2, allow_nan=False)
    )
    file = folder / "model.safetensors"
    state = load_file(str(file))
    g = torch.Generator().manual_seed(seed + 7)
    for i in range(num_mtp_layers):
        state.update(mtp_layer_state(state, i, raw["hidden_size"], g, copy=i == 0, mix=mix))
    save_file({k: v.contiguous() for k, v in state.items()}, str(file), metadata={"format": "pt"})
    return folder


def make_tiny_mimo_target(
    out_dir: str | Path, num_mtp_layers: int = 1, *, num_layers: int = 2, seed: int = 0, damp: float = 0.1
) -> Path:
    """A tiny MiMo-format target: a random Qwen2 trunk (layers >= 1 damped) with MTP layers."""
    from alcheck.testing.tiny import damp_target_layers
    from alcheck.testing.tiny_arch import make_tiny_arch_target

    folder = make_tiny_arch_target(out_dir, "qwen2", num_layers=num_layers, seed=seed)
    damp_target_layers(folder, 1, damp)
    return add_mtp_layers(folder, num_mtp_layers, seed)
