"""Model shapes read from a checkpoint's config.json, as transformers reads it (its LlamaConfig
class resolves old and new layouts and contradictory RoPE keys), then checked against what
alcheck's runner implements. Every problem is a ConfigError naming the key."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from alcheck.options import is_count

if TYPE_CHECKING:
    from alcheck.errors import AlcheckError

LLAMA_ARCHITECTURES = {"LlamaForCausalLM", "LlamaModel"}


# config.json model types an EAGLE head's layer may carry: EAGLE builds its one layer Llama-style from
# any of them (the EAGLE repo's cnets1.py; q/k/v bias only with "qkv_bias", as for Qwen2 heads)
HEAD_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def check_head_family(raw: dict, file, what: str = "draft") -> list[str]:
    """An EAGLE head's config (a Llama-style layer), or a one-line error. Returns notes on keys
    read but ignored (auto_map_notes). Targets go through the target table (models/targets.py)."""
    from alcheck.errors import AlcheckError

    archs = set(raw.get("architectures") or [])
    if raw.get("model_type") not in HEAD_MODEL_TYPES and not archs & LLAMA_ARCHITECTURES:
        kind = raw.get("model_type") or ",".join(sorted(archs)) or "unknown"
        raise AlcheckError(
            f"{what}: {file} describes a {kind!r} model, not an EAGLE head's Llama-style layer "
            f"(model_type one of {', '.join(HEAD_MODEL_TYPES)}): pass an EAGLE-1 or EAGLE-3 head"
        )
    return auto_map_notes(raw, file, what)


# auto_map keys that name only a config class: the config's keys are read as JSON either way
CONFIG_ONLY_AUTO_MAP = ("", "AutoConfig")


def auto_map_notes(raw: dict, file, what: str, format_defines_model: str = "") -> list[str]:
    """auto_map names custom code, which alcheck never runs. One that names only a config class
    (speculators' converter writes {"": "config.Eagle3SpeculatorConfig"}) changes nothing alcheck
    loads: ignored, with a note for run.json. One that names model code means the checkpoint's
    computation is defined by that code: refused, unless the format itself defines the model
    (format_defines_model, e.g. a speculators eagle3 config)."""
    from alcheck.errors import AlcheckError

    auto_map = raw.get("auto_map")
    if not auto_map:
        return []
    if not isinstance(auto_map, dict):
        raise AlcheckError(
            f"{what}: {file} has an auto_map that is not a JSON object ({auto_map!r}): fix config.json"
        )
    code = {key: value for key, value in auto_map.items() if key not in CONFIG_ONLY_AUTO_MAP}
    if code and not format_defines_model:
        named = ", ".join(f"{key} -> {value}" for key, value in code.items())
        raise AlcheckError(
            f"{what}: {file} asks for custom model code in auto_map ({named}), which alcheck never runs "
            "and may compute something other than the architecture it names: use a standard checkpoint"
        )
    named = ", ".join(f"{key or '(config)'} -> {value}" for key, value in auto_map.items())
    reading = format_defines_model or f"a {raw.get('model_type') or 'llama'} config"
    return [
        f"{file}: auto_map ({named}) ignored: alcheck runs no custom code; the config is read as {reading}"
    ]


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
    bias: bool | None = (
        None  # EAGLE-1 head: bias on fc; None = config.json has no "bias" key (the file decides)
    )
    eos_token_ids: list[int] = field(default_factory=list)
    model_type: str = "llama"
    notes: list[str] = field(default_factory=list)  # config keys read but ignored (auto_map), for run.json

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        """config.json read as transformers reads it (its LlamaConfig), then checked for what
        alcheck's runner implements. Raises ConfigError naming the key."""
        hf = hf_llama_config(raw)
        theta, scaling = resolved_rope(hf)
        cfg = cls(
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_hidden_layers=hf.num_hidden_layers,
            num_attention_heads=hf.num_attention_heads,
            num_key_value_heads=hf.num_key_value_heads or hf.num_attention_heads,
            vocab_size=hf.vocab_size,
            head_dim=getattr(hf, "head_dim", None) or 0,
            rms_norm_eps=hf.rms_norm_eps,
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=hf.max_position_embeddings,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            attention_bias=bool(hf.attention_bias),
            qkv_bias=bool(raw.get("qkv_bias", False)),
            mlp_bias=bool(getattr(hf, "mlp_bias", False)),
            bias=None if raw.get("bias") is None else bool(raw["bias"]),
            eos_token_ids=config_eos_ids(raw),
            model_type=raw.get("model_type", "llama"),
        )
        check_runner_support(cfg, hf)
        return cfg


class ConfigError(ValueError):
    """A config.json value alcheck cannot run: `key` names it, the message says why."""

    def __init__(self, key: str, problem: str, fix: str = "fix config.json"):
        super().__init__(problem)
        self.key, self.fix = key, fix

    def alcheck_error(self, what: str, file) -> AlcheckError:
        """The one-line error: '<what> <file>: <problem>: <fix>'."""
        from alcheck.errors import AlcheckError

        return AlcheckError(f"{what} {file}: {self}: {self.fix}")


def read_model_config(raw: dict, file, what: str) -> ModelConfig:
    """ModelConfig.from_dict with a one-line AlcheckError naming the file and the key."""
    try:
        return ModelConfig.from_dict(raw)
    except ConfigError as exc:
        raise exc.alcheck_error(what, file) from None


# keys transformers would fill with a default (a 4096-wide model) when absent: required here
REQUIRED_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# hidden_act values that are the SiLU alcheck's MLP computes (transformers' ACT2FN: swish = silu)
SILU_NAMES = ("silu", "swish")
ROPE_TYPES = ("default", "llama3")


def hf_llama_config(raw: dict):
    """transformers' LlamaConfig for raw (a copy: transformers edits the dict it reads), or
    ConfigError with transformers' own reason for refusing it."""
    import copy
    import logging

    for key in REQUIRED_KEYS:
        if key not in raw:
            raise ConfigError(key, f"lacks {key!r}", "pass a complete config.json")
    for key in ("dtype", "torch_dtype"):
        value = raw.get(key)
        if value is not None and not _is_dtype_name(value):
            raise ConfigError(key, f'{key} {value!r} is not a torch dtype (e.g. "bfloat16")')
    from transformers import LlamaConfig

    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # deprecation notes (torch_dtype, rope_scaling) are not the user's problem
    try:
        return LlamaConfig.from_dict(copy.deepcopy(raw))
    except Exception as exc:  # noqa: BLE001 - transformers' validators raise several types
        raise ConfigError(_named_key(exc, raw), f"transformers rejects it ({_last_line(exc)})") from None
    finally:
        quiet.setLevel(level)


def _is_dtype_name(value) -> bool:
    import torch

    return isinstance(value, str) and isinstance(
        getattr(torch, value.removeprefix("torch."), None), torch.dtype
    )


def _last_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).strip().strip("\"'").splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _named_key(exc: Exception, raw: dict) -> str:
    """The config key transformers' error names, else the RoPE keys or '?'."""
    import re

    text = str(exc)
    found = re.search(r"field '(\w+)'", text) or re.search(r"Field '(\w+)'", text)
    if found:
        return found.group(1)
    if "rope" in text.lower():
        return "rope_parameters" if "rope_parameters" in raw else "rope_scaling"
    return next((key for key in raw if f"'{key}'" in text or f" {key} " in text), "?")


def resolved_rope(hf) -> tuple[float, dict | None]:
    """(theta, llama3 scaling dict or None) as transformers resolved them: transformers 5 keeps both
    in rope_parameters, transformers 4 in rope_theta and rope_scaling."""
    params = getattr(hf, "rope_parameters", None)
    if isinstance(params, dict) and params:
        theta = params.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
        scaling = dict(params)
    else:
        theta = getattr(hf, "rope_theta", 10000.0)
        scaling = dict(getattr(hf, "rope_scaling", None) or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ConfigError(
            "rope_scaling",
            f"RoPE type {kind!r}: alcheck implements default and llama3 RoPE only",
            "use a checkpoint with default or llama3 RoPE",
        )
    if (
        isinstance(theta, bool)
        or not isinstance(theta, (int, float))
        or not math.isfinite(theta)
        or theta <= 0
    ):
        raise ConfigError(
            "rope_theta", f"rope_theta {theta!r} must be a finite number > 0 (Llama uses 10000 or 500000)"
        )
    if kind == "default":
        return float(theta), None
    for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        value = scaling.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ConfigError("rope_scaling", f"llama3 RoPE {key} {value!r} must be a finite number > 0")
    if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise ConfigError("rope_scaling", "llama3 RoPE high_freq_factor must exceed low_freq_factor")
    scaling["rope_type"] = "llama3"
    return float(theta), scaling


def check_runner_support(cfg: ModelConfig, hf) -> None:
    """Values transformers accepts but that alcheck's Llama layers cannot compute."""
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "head_dim",
        "max_position_embeddings",
    ):
        value = getattr(cfg, key)
        if not is_count(value):
            raise ConfigError(key, f"{key} {value!r} must be a positive integer")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ConfigError(
            "num_key_value_heads",
            f"num_attention_heads {cfg.num_attention_heads} is not a multiple of "
            f"num_key_value_heads {cfg.num_key_value_heads}",
        )
    eps = cfg.rms_norm_eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ConfigError(
            "rms_norm_eps", f"rms_norm_eps {eps!r} must be a finite number > 0 (Llama uses 1e-5 or 1e-6)"
        )
    act = getattr(hf, "hidden_act", "silu")
    if act not in SILU_NAMES:
        raise ConfigError(
            "hidden_act",
            f"hidden_act {act!r}: alcheck's runner implements Llama's SiLU MLP only",
            "use a Llama-architecture checkpoint (hidden_act silu)",
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
