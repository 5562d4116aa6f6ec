"""Load a Llama target and an EAGLE-1 head from local directories or hub ids, safely.

Weights come from safetensors, or from `.bin` files through `torch.load(weights_only=True)`:
a checkpoint that would need code execution to unpickle is refused. Configs are parsed as
plain JSON and tokenizers never run remote code.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.models.config import LLAMA_ARCHITECTURES, ModelConfig, rope_inv_freq
from alcheck.models.layers import Rotary, checkpoint_names, stack_checkpoint
from alcheck.models.eagle import EagleHead
from alcheck.models.llama import LlamaTarget

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
EAGLE1_TENSORS = [
    "fc.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
]


def resolve_checkpoint(spec: str, what: str) -> Path:
    """A local directory, or a hub id fetched into (or found in) the HF cache."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise AlcheckError(f"{what} {spec} is a file, not a checkpoint directory: pass the folder holding config.json")
    if spec.count("/") != 1 or spec.startswith((".", "/", "~")):
        raise AlcheckError(f"{what} {spec}: no such directory: pass a checkpoint folder or a hub id like org/name")
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "*.bin", "*.model", "*.jinja", "*.txt"]
        try:
            return Path(snapshot_download(spec, allow_patterns=patterns, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached yet: try the hub
            return Path(snapshot_download(spec, allow_patterns=patterns))
    except Exception as exc:  # noqa: BLE001
        raise AlcheckError(
            f"{what} {spec}: cannot fetch it from the hub ({type(exc).__name__}): "
            "download it where a hub is reachable and pass the local folder"
        ) from None


def read_config(directory: Path, what: str) -> dict:
    file = directory / "config.json"
    if not file.is_file():
        raise AlcheckError(f"{what}: {file} is missing: point at a checkpoint folder that has config.json")
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AlcheckError(f"{what}: {file} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}): re-download it") from None


def weight_files(directory: Path) -> str:
    """The weight file name(s) of a folder, for error messages."""
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    return str(directory / present[0]) if present else str(directory)


def load_state_dict(directory: Path, what: str) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder: one file or index-sharded, safetensors or .bin."""
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    if not present:
        raise AlcheckError(
            f"{what}: no weights in {directory} (looked for {', '.join(WEIGHT_FILES)}): "
            "pass a folder with safetensors or pytorch_model.bin"
        )
    name = present[0]
    if name.endswith(".index.json"):
        index = json.loads((directory / name).read_text())
        files = sorted(set(index["weight_map"].values()))
    else:
        files = [name]
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(_load_file(directory / file, what))
    return state


def _load_file(file: Path, what: str) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise AlcheckError(f"{what}: shard {file} is missing: re-download the checkpoint")
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(file))
        except Exception as exc:  # noqa: BLE001
            raise AlcheckError(f"{what}: {file} is not a readable safetensors file ({exc}): re-download it") from None
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise AlcheckError(
            f"{what}: {file} needs code execution to unpickle, which alcheck refuses: "
            "convert it to safetensors or re-save it as a plain state dict"
        ) from None
    except Exception as exc:  # noqa: BLE001
        raise AlcheckError(f"{what}: {file} cannot be read ({type(exc).__name__}): re-download it") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AlcheckError(f"{what}: {file} is not a state dict of tensors: re-save it with torch.save(model.state_dict())")
    return state


def _check_llama(raw: dict, directory: Path, what: str):
    archs = set(raw.get("architectures") or [])
    if raw.get("model_type") != "llama" and not archs & LLAMA_ARCHITECTURES:
        kind = raw.get("model_type") or ",".join(archs) or "unknown"
        raise AlcheckError(
            f"{what}: {directory / 'config.json'} describes a {kind!r} model, not a Llama-family one: "
            "alcheck supports Llama targets with EAGLE-1 heads"
        )
    if raw.get("auto_map"):
        raise AlcheckError(
            f"{what}: {directory / 'config.json'} asks for custom model code (auto_map), which alcheck never runs: "
            "use a standard Llama checkpoint"
        )


def _assign(module: torch.nn.Module, checkpoint: dict, file_hint: str, what: str):
    state = stack_checkpoint(checkpoint)
    own = module.state_dict()
    missing = [n for k in own if k not in state for n in checkpoint_names(k) if n not in checkpoint] or \
        [k for k in own if k not in state]
    if missing:
        raise AlcheckError(f"{what}: {file_hint} lacks tensors {missing[:3]}{'…' if len(missing) > 3 else ''}: not a matching checkpoint")
    for key, tensor in own.items():
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise AlcheckError(
                f"{what}: {file_hint} tensor {key} has shape {tuple(state[key].shape)}, config says {tuple(tensor.shape)}: "
                "config.json and weights disagree"
            )
    module.load_state_dict({k: state[k] for k in own}, strict=True)


def _init_rotary(module: torch.nn.Module, inv_freq: torch.Tensor):
    # non-persistent buffers are not in checkpoints and were created empty on the meta device
    for sub in module.modules():
        if isinstance(sub, Rotary):
            sub.inv_freq = inv_freq.clone()


@dataclass
class Target:
    model: LlamaTarget
    tokenizer: object
    eos_token_ids: list[int]
    path: Path
    name: str


def load_target(spec: str, dtype=torch.float32, device="cpu") -> Target:
    what = "target"
    directory = resolve_checkpoint(spec, what)
    raw = read_config(directory, what)
    _check_llama(raw, directory, what)
    cfg = ModelConfig.from_dict(raw)
    state = load_state_dict(directory, what)
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings:
        state.setdefault("lm_head.weight", state.get("model.embed_tokens.weight"))
    with torch.device("meta"):
        model = LlamaTarget(cfg)
    model = model.to_empty(device="cpu")
    _assign(model, state, weight_files(directory), what)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    _init_rotary(model, rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling))
    model = model.to(device=device, dtype=dtype).eval()
    tokenizer = load_tokenizer(directory, what)
    return Target(model, tokenizer, eos_ids(directory, cfg, tokenizer), directory, spec)


def load_tokenizer(directory: Path, what: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001
        raise AlcheckError(f"{what}: cannot load the tokenizer in {directory} ({type(exc).__name__}: {exc}): "
                           "the folder needs tokenizer.json / tokenizer_config.json".replace("\n", " ")) from None


def eos_ids(directory: Path, cfg: ModelConfig, tokenizer) -> list[int]:
    """All stop ids: generation_config.json's, config.json's and the tokenizer's."""
    ids = set(cfg.eos_token_ids)
    gen = directory / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text()).get("eos_token_id")
        ids.update([value] if isinstance(value, int) else (value or []))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def load_eagle(spec: str, target: Target, dtype=torch.float32, device="cpu") -> EagleHead:
    what = "draft"
    directory = resolve_checkpoint(spec, what)
    raw = read_config(directory, what)
    _check_llama(raw, directory, what)
    cfg = ModelConfig.from_dict(raw)
    tcfg = target.model.config
    for field in ("hidden_size", "vocab_size"):
        if getattr(cfg, field) != getattr(tcfg, field):
            raise AlcheckError(
                f"draft {directory / 'config.json'} has {field}={getattr(cfg, field)} but target "
                f"{target.path / 'config.json'} has {getattr(tcfg, field)}: pass the EAGLE head trained for this target"
            )
    state = load_state_dict(directory, what)
    if "fc.weight" not in state:
        raise AlcheckError(
            f"draft: {directory} has no fc.weight, so it is not an EAGLE-1 head "
            "(EAGLE-3 heads and plain draft models are not supported yet): pass an EAGLE-1 checkpoint"
        )
    state = {k.removeprefix("model."): v for k, v in state.items()}
    with torch.device("meta"):
        head = EagleHead(cfg)
    head = head.to_empty(device="cpu")
    _assign(head, state, weight_files(directory), what)
    _init_rotary(head, rope_inv_freq(cfg.head_dim, cfg.rope_theta, None))
    return head.to(device=device, dtype=dtype).eval()
