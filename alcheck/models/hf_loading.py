"""Build a target from transformers' own modeling code and load it by alcheck's rules.

- The config is config.json read as plain JSON into the table's transformers config class, and
  the model is that class's `*ForCausalLM`, built on the meta device: no auto mapping, no
  `trust_remote_code`, nothing from the checkpoint folder runs.
- Config and weights are compared by tensor names before any data is read (a projection bias
  present or absent, a q/k norm missing, an expert count off): one line naming both files.
- Weights stream strictly into the module (models/strict_load.py), MoE experts into their slice
  of transformers' stacked [E, ...] parameters; RoPE buffers are computed by the model's own
  rotary class from the config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import open_checkpoint
from alcheck.models.hf_attention import register
from alcheck.models.hf_target import HFTarget
from alcheck.models.strict_load import Extra, Slot, load_strict

# MiMo's multi-token-prediction layers ride in the target's checkpoint: --method mtp loads them
MTP_LAYERS = Extra("model.mtp_layers.*", "MTP layers: loaded by --method mtp (models/mimo_mtp.py)")
TIED_LM_HEAD = Extra("lm_head.weight", "tie_word_embeddings: the embedding doubles as the LM head")
ROTARY_BUFFERS = Extra("*rotary_emb.inv_freq", "RoPE frequencies: recomputed from config.json")


@dataclass(frozen=True)
class ExpertLayout:
    """transformers stacks a MoE block's experts as gate_up_proj [E, 2I, H] (gate rows first) and
    down_proj [E, H, I]; checkpoints hold one [I, H] / [H, I] tensor per expert and projection,
    named `<block>.experts.<e>.<gate|up|down>.weight`."""

    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"


def transformers_config(kind, raw: dict, directory: Path, what: str):
    """config.json as the table entry's transformers config class."""
    import transformers

    try:
        return getattr(transformers, kind.config_class).from_dict(dict(raw))
    except Exception as exc:  # noqa: BLE001 - any validation error of the config class
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise AlcheckError(
            f"{what}: {directory / 'config.json'} is not a usable {kind.model_type} config "
            f"({first}): fix config.json"
        ) from None


def attention_window(config) -> int | None:
    """The sliding window any layer applies, as transformers decides it: layer_types when the
    config has them (Qwen2/Qwen3: use_sliding_window with max_window_layers), else every layer
    (Mistral, Qwen3-MoE: sliding_window, which they clear when use_sliding_window is false)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    return int(window)


def build_transformers(kind, raw: dict, directory: Path, what: str = "target") -> HFTarget:
    """The target on the meta device: transformers' class for the table entry, attention routed
    to alcheck's paged KV. No memory is allocated; load_transformers fills it."""
    import transformers

    config = transformers_config(kind, raw, directory, what)
    config._attn_implementation = register()
    if kind.experts is not None:
        config._experts_implementation = "eager"  # transformers' plain per-expert loop: exact, any device
    with torch.device("meta"):
        return HFTarget(getattr(transformers, kind.model_class)(config))


def load_transformers(
    kind, directory: Path, raw: dict, dtype=torch.float32, device="cpu", what="target", tp=None
) -> HFTarget:
    """The target table's loader for architectures run through transformers' modeling code."""
    if tp is not None:
        raise AlcheckError(
            f"--tensor-parallel-size: the {what} at {directory} is a {kind.model_type!r} model, which "
            "runs through transformers' modeling code and is not split across ranks; tensor "
            "parallelism runs Llama targets only: drop --tensor-parallel-size"
        )
    model = build_transformers(kind, raw, directory, what)
    config = model.config
    checkpoint = open_checkpoint(directory, what)
    slots = plan(model, kind.experts)
    extras = [ROTARY_BUFFERS] + ([TIED_LM_HEAD] if _tied(model) else [])
    if raw.get("num_nextn_predict_layers"):
        extras.append(MTP_LAYERS)
    check_names(slots, checkpoint.names(), extras, kind, config, directory, checkpoint.source, what)
    load_strict(model, checkpoint, dtype=dtype, device=device, what=what, extras=extras, slots=slots)
    rotary = type(model.model.rotary_emb)(config=config)  # its buffers were created on the meta device
    model.model.rotary_emb = rotary.to(device)
    return model.eval()


def _tied(model: HFTarget) -> bool:
    return model.lm_head.weight is model.model.embed_tokens.weight


def plan(model: torch.nn.Module, experts: ExpertLayout | None) -> dict[str, Slot]:
    """Checkpoint tensor name -> where it goes: parameters by their own name, stacked experts
    one slot per expert and projection."""
    slots = {}
    for name, param in model.named_parameters():
        block, _, leaf = name.rpartition(".experts.")
        if experts is None or not block or param.dim() != 3:
            slots[name] = Slot(name, 0, tuple(param.shape))
            continue
        prefix = f"{block}.experts."
        for e in range(param.shape[0]):
            if leaf == "gate_up_proj":
                rows = param.shape[1] // 2
                for start, proj in ((0, experts.gate), (rows, experts.up)):
                    slots[f"{prefix}{e}.{proj}.weight"] = Slot(name, start, (rows, param.shape[2]), True, e)
            else:  # down_proj
                slots[f"{prefix}{e}.{experts.down}.weight"] = Slot(name, 0, tuple(param.shape[1:]), False, e)
    return slots


def check_names(
    slots: dict,
    names: list[str],
    extras: list[Extra],
    kind,
    config,
    directory: Path,
    weights: Path,
    what: str,
) -> None:
    """Config and weights must describe the same model: compared by tensor names, before reading."""
    import fnmatch

    present = {n for n in names if not any(fnmatch.fnmatchcase(n, e.pattern) for e in extras)}
    missing = sorted(n for n in slots if n not in present)
    unexpected = sorted(n for n in present if n not in slots)
    if not missing and not unexpected:
        return
    name, absent = (missing[0], True) if missing else (unexpected[0], False)
    config_file = directory / "config.json"
    fix = "pass the config.json that came with these weights"
    says = _what_config_says(name, kind, config, absent)
    has = "lacks" if absent else "holds"
    more = len(missing) + len(unexpected) - 1
    tail = f" (and {more} more tensors)" if more else ""
    raise AlcheckError(
        f"{what}: {config_file} {says} but {weights} {has} {name}{tail}: "
        f"config.json and weights disagree: {fix}"
    )


def _what_config_says(name: str, kind, config, expected: bool) -> str:
    """The config's side of a name mismatch, in words."""
    model_type = kind.model_type
    if name.endswith(".bias"):
        setting = (
            f"attention_bias={config.attention_bias}"
            if hasattr(config, "attention_bias")
            else f"model_type {model_type!r}"
        )
        return f"({setting}) {'puts' if expected else 'puts no'} bias on {name.rsplit('.', 2)[-2]}"
    if re.search(r"\.(q_norm|k_norm)\.", name):
        has = "has" if expected else "has no"
        return f"(model_type {model_type!r}) {has} a per-head {name.rsplit('.', 2)[-2]}"
    match = re.search(r"\.experts\.(\d+)\.", name)
    if match:
        count = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
        return f"says num_experts={count} ({'expert' if expected else 'no expert'} {match.group(1)} there)"
    needs = "needs" if expected else "has no"
    return f"(model_type {model_type!r}, {config.num_hidden_layers} layers) {needs} it"
