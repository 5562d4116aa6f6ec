"""Tiny draft language models for a tiny target (`--method draft_model`): the target's first
layers as a model of their own, with its embedding, final norm, lm_head and tokenizer files.

On a target whose later layers are damped (tiny.damp_target_layers) such a draft predicts what
the target predicts most of the time, but not always: the partial acceptance oracle tests need.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def make_tiny_draft_lm(out_dir: str | Path, target_dir: str | Path, num_layers: int = 1) -> Path:
    """A copy of the target folder keeping layers 0..num_layers-1 (config and tensors)."""
    from safetensors.torch import load_file, save_file

    out = Path(shutil.copytree(target_dir, out_dir))
    raw = json.loads((out / "config.json").read_text())
    total = raw["num_hidden_layers"]
    for key, value in list(raw.items()):  # per-layer lists (layer_types, ...) lose their tail too
        if isinstance(value, list) and len(value) == total:
            raw[key] = value[:num_layers]
    raw["num_hidden_layers"] = num_layers
    (out / "config.json").write_text(json.dumps(raw, indent=2, allow_nan=False))
    file = out / "model.safetensors"
    state = load_file(str(file))
    kept = {
        name: t
        for name, t in state.items()
        if not (name.startswith("model.layers.") and int(name.split(".")[2]) >= num_layers)
    }
    save_file(kept, str(file), metadata={"format": "pt"})
    return out
