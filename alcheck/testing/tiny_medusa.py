"""Tiny Medusa heads for a tiny target (`--method medusa`), in vLLM's layout or FasterDecoding's.

The heads are constructed from the target's bigram map (medusa_state), not random, so their
drafts are accepted often but not always, as the oracle tests need.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


@torch.no_grad()
def medusa_state(target_dir: str | Path, num_heads: int, num_layers: int = 1, seed: int = 0) -> dict:
    """vLLM-layout tensors (blocks.{i}.layers.{j}.weight|bias, lm_heads.{i}.weight), constructed.

    f(v) = the target's greedy token after [v] alone; h(v) its final-norm state there. Head i
    drafts f^(i+2)(x_p) from h_p: its lm_head row u is the sum of h(v) over every v with
    f^(i+2)(v) = u, so h_p scores highest on the row x_p belongs to (random 64-d states are
    nearly orthogonal). On a target whose every layer is damped, h_p and f depend mostly on x_p
    alone, so the drafts are right often and wrong when the context moves the target. The
    blocks get small random weights and biases (their path is exercised, barely moving h)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    single = torch.arange(vocab)[:, None]
    h = model.model(single).last_hidden_state[:, 0]  # [V, H]
    f = model.lm_head(h).argmax(-1)  # [V]
    g = torch.Generator().manual_seed(seed + 11)
    state, reach = {}, f.clone()
    for i in range(num_heads):
        reach = f[reach]  # f^(i+2)
        lm = torch.zeros(vocab, hidden).index_add_(0, reach, h)
        state[f"lm_heads.{i}.weight"] = lm
        for j in range(num_layers):
            state[f"blocks.{i}.layers.{j}.weight"] = torch.randn(hidden, hidden, generator=g) * 1e-3
            state[f"blocks.{i}.layers.{j}.bias"] = torch.randn(hidden, generator=g) * 1e-3
    return state


def make_medusa_target(out_dir: str | Path, seed: int = 0, damp: float = 0.004, **kwargs) -> Path:
    """A tiny Llama target whose every layer is damped (near-bigram): what the heads above fit."""
    from alcheck.testing.tiny import damp_target_layers, make_tiny_target

    return damp_target_layers(make_tiny_target(out_dir, seed=seed, **kwargs), 0, damp)


def legacy_names(state: dict, num_layers: int) -> dict:
    """FasterDecoding's names: {i}.{j}.linear.* for the blocks, {i}.{L}.weight for the lm_head."""
    out = {}
    for name, t in state.items():
        parts = name.split(".")
        if parts[0] == "blocks":
            out[f"{parts[1]}.{parts[3]}.linear.{parts[4]}"] = t
        else:
            out[f"{parts[1]}.{num_layers}.weight"] = t
    return out


def make_tiny_medusa(
    out_dir: str | Path,
    target_dir: str | Path,
    num_heads: int = 3,
    num_layers: int = 1,
    *,
    legacy: bool = False,
    seed: int = 0,
) -> Path:
    """A Medusa head folder for the target: vLLM's layout (config.json model_type medusa,
    model.safetensors) or, with legacy, FasterDecoding's (its config and medusa_lm_head.safetensors)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = json.loads((Path(target_dir) / "config.json").read_text())
    state = medusa_state(target_dir, num_heads, num_layers, seed)
    if not legacy:
        config = {
            "architectures": ["MedusaModel"],
            "model_type": "medusa",
            "hidden_size": raw["hidden_size"],
            "vocab_size": raw["vocab_size"],
            "num_heads": num_heads,
            "num_hidden_layers": num_layers,
            "medusa_fc_bias": True,  # vLLM builds biases only when told (its default is none)
        }
        file = "model.safetensors"
    else:
        config = {
            "medusa_num_heads": num_heads,
            "medusa_num_layers": num_layers,
            "base_model_name_or_path": str(target_dir),
        }
        state, file = legacy_names(state, num_layers), "medusa_lm_head.safetensors"
    (out / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False))
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / file), metadata={"format": "pt"})
    return out
