"""The target table: which loader builds a target, by config.json's model_type.

One entry per architecture. Llama runs alcheck's own model (fused projections, flash-attn,
tensor parallelism: faster); the others run transformers' own modeling code with alcheck's paged
KV registered as their attention (models/hf_target.py). An architecture not in the table exits 2
naming it and the supported list; one whose layers a full-causal paged runner cannot reproduce
(sliding-window or local/global mixes beyond the window) says why.

Windows: a layer with a sliding window W equals full causal attention while every position is
< W, so a run whose every generation needs at most W positions (prompt + max_tokens + K - 1,
models/compat.positions_needed) is exact and allowed; `check_fits_window` decides that from the
configs and prompt lengths before loading, and the attention function refuses at run time
whatever would still cross the window (models/hf_attention.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.models.config import auto_map_notes
from alcheck.models.hf_loading import (
    ExpertLayout,
    attention_window,
    build_transformers,
    load_transformers,
    transformers_config,
)
from alcheck.models.llama import LlamaTarget
from alcheck.models.llama_loading import load_llama, model_config


@dataclass(frozen=True)
class TargetKind:
    model_type: str  # config.json's model_type
    architectures: tuple[str, ...]  # config.json's architectures that mean this entry
    loader: Callable  # (kind, directory, raw, dtype, device, what, tp) -> the runner's target module
    builder: Callable  # (kind, raw, directory, what) -> the same module on the meta device (sizes)
    checker: Callable  # (kind, raw, directory, what) -> None: config.json read as the loader will, or exit 2
    implementation: str  # "alcheck" (native) or "transformers"
    config_class: str = ""  # transformers' classes, by name (never its auto mapping or remote code)
    model_class: str = ""
    experts: ExpertLayout | None = None  # MoE: how checkpoints store the experts

    def load(self, directory: Path, raw: dict, dtype, device, what: str = "target", tp=None):
        return self.loader(self, directory, raw, dtype, device, what, tp)

    def build_meta(self, raw: dict, directory: Path, what: str = "target"):
        return self.builder(self, raw, Path(directory), what)

    def check(self, raw: dict, directory: Path, what: str = "target") -> None:
        self.checker(self, raw, Path(directory), what)

    @property
    def tensor_parallel(self) -> bool:
        """Only alcheck's own model is split over ranks (its column/row-parallel layers)."""
        return self.implementation == "alcheck"


def _native(kind, directory, raw, dtype, device, what, tp):
    return load_llama(directory, raw, dtype, device, what, tp)


def _native_meta(kind, raw, directory, what):
    with torch.device("meta"):
        return LlamaTarget(model_config(raw, directory, what))


def _native_check(kind, raw, directory, what):
    model_config(raw, directory, what)


def _hf_check(kind, raw, directory, what):
    transformers_config(kind, raw, directory, what)


def _hf(model_type: str, arch: str, config_class: str, experts: ExpertLayout | None = None) -> TargetKind:
    return TargetKind(
        model_type,
        (arch,),
        load_transformers,
        build_transformers,
        _hf_check,
        "transformers",
        config_class,
        arch,
        experts,
    )


def _qwen2_and_mimo() -> TargetKind:
    # MiMo (model_type "mimo" or "qwen2", architectures ["MiMoForCausalLM"]) is a Qwen2 trunk; its
    # MTP layers are --method mtp's (models/mimo_mtp.py), allowed beside it (models/hf_loading.py)
    kind = _hf("qwen2", "Qwen2ForCausalLM", "Qwen2Config")
    return dataclasses.replace(kind, architectures=("Qwen2ForCausalLM", "MiMoForCausalLM"))


TARGETS: dict[str, TargetKind] = {
    "llama": TargetKind(
        "llama", ("LlamaForCausalLM", "LlamaModel"), _native, _native_meta, _native_check, "alcheck"
    ),
    "qwen2": _qwen2_and_mimo(),
    "qwen3": _hf("qwen3", "Qwen3ForCausalLM", "Qwen3Config"),
    "qwen3_moe": _hf(
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        ExpertLayout(gate="gate_proj", up="up_proj", down="down_proj"),
    ),
    "mistral": _hf("mistral", "MistralForCausalLM", "MistralConfig"),
}

# architectures users ask for that the table leaves out on purpose, and why
REFUSED = {
    "gemma2": "its layers alternate sliding-window and global attention",
    "gemma3": "its layers alternate sliding-window and global attention",
    "gemma3_text": "its layers alternate sliding-window and global attention",
    "gpt_oss": "its layers alternate sliding-window and global attention, with attention sinks",
    "cohere2": "its layers alternate sliding-window and global attention",
    "ministral": "its layers mix sliding-window and global attention",
}


def supported() -> str:
    native = [k for k, v in TARGETS.items() if v.implementation == "alcheck"]
    hf = [k for k, v in TARGETS.items() if v.implementation == "transformers"]
    return f"{', '.join(native)} (alcheck's own model) and {', '.join(hf)} (transformers' modeling code)"


def find_target(raw: dict, directory: Path, what: str = "target") -> TargetKind:
    """The table entry for a checkpoint's config.json, or a one-line error."""
    config = Path(directory) / "config.json"
    auto_map_notes(
        raw, config, what
    )  # auto_map naming model code: refused (one naming a config class is noted)
    kind = TARGETS.get(raw.get("model_type") or "")
    if kind is None:
        archs = set(raw.get("architectures") or [])
        kind = next((k for k in TARGETS.values() if archs & set(k.architectures)), None)
    if kind is not None:
        return kind
    name = raw.get("model_type") or ",".join(raw.get("architectures") or []) or "unknown"
    why = REFUSED.get(name)
    reason = (
        f"{why}, which alcheck's paged full-causal runner cannot reproduce exactly"
        if why
        else "which alcheck does not run"
    )
    raise AlcheckError(
        f"{what}: {config} describes a {name!r} model, {reason}: supported architectures are {supported()}"
    )


def window_of(raw: dict, directory: Path) -> int | None:
    """The sliding window some layer of this target applies (None: full causal everywhere)."""
    kind = find_target(raw, directory)
    if kind.implementation != "transformers":
        return None
    return attention_window(transformers_config(kind, raw, Path(directory), "target"))


def check_fits_window(raw: dict, directory: Path, positions: int) -> None:
    """Refuse before loading a run that needs more positions than a windowed target's window:
    past it the paged full-causal runner would not compute what the model computes."""
    window = window_of(raw, directory)
    if window is not None and positions > window:
        name = raw.get("model_type") or "this"
        raise AlcheckError(
            f"target: {Path(directory) / 'config.json'} gives "
            f"its {name!r} layers a sliding window of {window} "
            f"positions and this run needs {positions} (prompt + "
            "max_tokens + K - 1); alcheck's paged runner is exact "
            "only inside the window: lower --max-tokens or --limit "
            "the prompts to fit, or use a full-attention target "
            f"({supported()} without sliding_window)"
        )


def parameter_count(raw: dict, directory: Path) -> int:
    """The target's parameters (tied ones once), counted on the meta device from config.json: what
    a memory check before loading needs (MoE experts included, which a Llama-shaped count misses)."""
    module = find_target(raw, directory).build_meta(raw, directory)
    return sum(p.numel() for p in module.parameters())
