"""`--method auto|eagle|eagle3`: which kind of draft head a checkpoint folder holds.

Read from config.json and the tensor NAMES only (safetensors headers, shard indexes, or a
memory-mapped weights_only .bin), so a 1 GB head is not loaded twice:
- speculators format: `speculators_model_type` says it;
- EAGLE-3 (EAGLE repo / SpecForge): `midlayer.*` or `d2t` tensors, a `hidden_norm`, a
  `draft_vocab_size` in config.json, or an `*Eagle3*` architecture;
- EAGLE-1: `fc.weight` with `layers.0.*` and none of the above.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.models.loading import load_state_dict, read_config, resolve_checkpoint

METHOD_NAMES = {"eagle": "an EAGLE-1 head", "eagle3": "an EAGLE-3 head"}


def tensor_names(directory: Path) -> list[str]:
    """Every tensor name of a checkpoint folder, without reading the weights when avoidable."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        file = directory / index
        if file.is_file():
            try:
                return sorted(json.loads(file.read_text())["weight_map"])
            except Exception:  # noqa: BLE001 - the loader reports a broken index in one line
                break
    single = directory / "model.safetensors"
    if single.is_file():
        try:
            from safetensors import safe_open

            with safe_open(str(single), framework="pt") as f:
                return sorted(f.keys())
        except Exception:  # noqa: BLE001
            pass
    binary = directory / "pytorch_model.bin"
    if binary.is_file():
        try:
            return sorted(torch.load(binary, map_location="cpu", weights_only=True, mmap=True))
        except Exception:  # noqa: BLE001 - not a zip checkpoint: the loader below decides
            pass
    return sorted(load_state_dict(directory, "draft"))  # one-line errors for unreadable folders


def detect(directory: Path) -> tuple[str, str]:
    """(method, the evidence in words) for the head in directory."""
    raw = read_config(directory, "draft")
    if "speculators_model_type" in raw:
        kind = raw["speculators_model_type"]
        if kind == "eagle3":
            return "eagle3", "speculators_model_type 'eagle3' in config.json"
        raise AlcheckError(f"draft {directory}: speculators_model_type {kind!r}: alcheck runs EAGLE-1 heads "
                           "in the EAGLE repo format and EAGLE-3 heads in either format")
    names = {n.removeprefix("model.") for n in tensor_names(directory)}
    clues = []
    if any(n.startswith("midlayer.") for n in names):
        clues.append("midlayer.* tensors")
    if "d2t" in names:
        clues.append("a d2t tensor")
    if any(n.endswith("hidden_norm.weight") for n in names):
        clues.append("a hidden_norm")
    if "draft_vocab_size" in raw:
        clues.append("draft_vocab_size in config.json")
    if any("eagle3" in str(a).lower() for a in raw.get("architectures") or []):
        clues.append(f"architecture {raw['architectures'][0]}")
    if clues:
        return "eagle3", ", ".join(clues)
    if "fc.weight" in names and any(n.startswith("layers.0.") for n in names):
        return "eagle", "fc.weight and layers.0.* without EAGLE-3 tensors"
    raise AlcheckError(f"draft {directory}: neither an EAGLE-1 nor an EAGLE-3 head (no fc.weight with layers.0.* or "
                       "midlayer.*): pass an EAGLE head checkpoint")


def resolve_method(method: str, draft: str) -> str:
    """--method auto -> the detected kind; an explicit --method must agree with the files."""
    directory = resolve_checkpoint(draft, "draft")
    found, evidence = detect(directory)
    if method not in ("auto", found):
        raise AlcheckError(f"--method {method}: {draft} is {METHOD_NAMES[found]} ({evidence}): "
                           f"pass --method {found} or --method auto")
    return found
