"""Load an EAGLE-3 head, strictly, from either published format (EAGLE3-NOTES section 1).

- EAGLE repo / SpecForge format: config.json (LlamaForCausalLM-style, `draft_vocab_size`) +
  pytorch_model.bin or model.safetensors with `fc`, `midlayer.*`, `norm`, `lm_head`, `d2t`, `t2d`.
- speculators format: config.json with `speculators_model_type: "eagle3"` and the draft layer's
  Llama config under `transformer_layer_config`, + model.safetensors with `layers.0.*`.

Strict: every tensor in the file is used or on ALLOWED_EXTRA (named below), every shape agrees
with the config, d2t maps each draft id to a distinct target id, and the head fits the target
(hidden size, vocabulary, auxiliary layers < the target's layer count). Anything else is a
one-line AlcheckError (exit 2).

Auxiliary layer ids (our convention: id i = the residual stream entering target layer i):
- top-level `eagle_aux_hidden_state_layer_ids` (speculators, vLLM): already in our convention;
- `eagle_config.eagle_aux_hidden_state_layer_ids` (SpecForge writes it, SGLang reads it): "output
  of layer i", so +1 here. SpecForge's own default [1, L//2-1, L-4] reads as our (2, L//2, L-3).
  vLLM reads this nested list without the +1, i.e. one layer earlier than SpecForge trained.
- neither: the default (2, L//2, L-3), which must give three distinct layers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.methods.table import method_for_speculators_type, speculators_types
from alcheck.models.config import ConfigError, ModelConfig, auto_map_notes, rope_inv_freq
from alcheck.models.eagle3 import Eagle3Config, Eagle3Head, default_aux_layers
from alcheck.models.layers import Rotary, stack_checkpoint
from alcheck.models.loading import load_state_dict, read_config, resolve_checkpoint

NUM_AUX = 3  # EAGLE-3 fuses three target layers
EAGLE_ARCHITECTURES = {"LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"}
# in the file but not weights of our module: training-only or duplicated from the target
ALLOWED_EXTRA = {
    "t2d": "target-to-draft mask, used only in training (checked against d2t)",
    "embed_tokens.weight": "a copy of the target's embedding (checked against it)",
}
# speculators-only options that change the layer; alcheck implements none of them
UNSUPPORTED_FLAGS = ("norm_before_fc", "fc_norm", "norm_output")


def is_speculators_config(raw: dict) -> bool:
    return "speculators_model_type" in raw


def _fail(where, problem, fix):
    raise AlcheckError(f"draft {where}: {problem}: {fix}")


# -- config ----------------------------------------------------------------------------------


def _layer_config(raw: dict, where: Path) -> ModelConfig:
    try:
        cfg = ModelConfig.from_dict(raw)
    except ConfigError as exc:
        _fail(where, f"the draft layer's config: {exc}", exc.fix)
    if cfg.num_hidden_layers != 1:
        _fail(
            where,
            f"num_hidden_layers={cfg.num_hidden_layers}",
            "alcheck runs single-layer EAGLE-3 heads only",
        )
    if cfg.rope_scaling:
        _fail(
            where,
            f"rope scaling {cfg.rope_scaling} in the draft layer",
            "alcheck's EAGLE-3 layer uses plain RoPE",
        )
    return cfg


def _aux_spec(raw: dict, nested: dict | None, where: Path):
    """(ids in our convention or None, where they came from)."""
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    inner = (nested or {}).get("eagle_aux_hidden_state_layer_ids")
    for name, ids in (
        ("eagle_aux_hidden_state_layer_ids", top),
        ("eagle_config.eagle_aux_hidden_state_layer_ids", inner),
    ):
        if ids is not None and (
            not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        ):
            _fail(where, f"{name} is {ids!r}, not a list of integers", "fix config.json")
    converted = [i + 1 for i in inner] if inner is not None else None  # output of layer i = input of i+1
    if top is not None and converted is not None and sorted(top) != sorted(converted):
        _fail(
            where,
            f"eagle_aux_hidden_state_layer_ids={top} (layer inputs) and eagle_config's {inner} "
            f"(layer outputs, = inputs {converted}) disagree",
            "keep one of them",
        )
    if top is not None:
        return top, "eagle_aux_hidden_state_layer_ids"
    if converted is not None:
        return converted, f"eagle_config.eagle_aux_hidden_state_layer_ids {inner} (+1: layer outputs)"
    return None, "default"


def parse_config(raw: dict, where: Path) -> tuple[Eagle3Config, list[int] | None, str]:
    """(config with aux ids still unresolved, explicit aux ids or None, their source). The
    config's notes list keys read but ignored (an auto_map naming speculators' config class)."""
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else None
    if is_speculators_config(raw):
        kind = raw.get("speculators_model_type")
        # the type is its method entry's (methods/eagle3.py); EAGLE-3's is the only entry with one
        if method_for_speculators_type(kind) is None:
            _fail(
                where,
                f"speculators_model_type {kind!r}",
                f"alcheck runs speculators heads of type {', '.join(speculators_types())} only",
            )
        layer_raw = raw.get("transformer_layer_config")
        if not isinstance(layer_raw, dict):
            _fail(
                where,
                "a speculators config without transformer_layer_config",
                "re-export it with speculators",
            )
        if layer_raw.get("model_type", "llama") != "llama":
            _fail(
                where,
                f"draft layer type {layer_raw.get('model_type')!r}",
                "alcheck runs Llama-style EAGLE-3 layers only",
            )
        for flag in UNSUPPORTED_FLAGS:
            if raw.get(flag):
                _fail(where, f"{flag}=true", "alcheck implements the plain EAGLE-3 layer only")
        notes = auto_map_notes(raw, where, "draft", format_defines_model="a speculators eagle3 head")
        layer = _layer_config(layer_raw, where)
        # speculators always writes this key and defaults it to false; vLLM assumes true when absent
        norm_before_residual = bool(raw.get("norm_before_residual", False))
        fc_bias = False
    else:
        archs = set(raw.get("architectures") or [])
        if raw.get("model_type") != "llama" and not archs & EAGLE_ARCHITECTURES:
            _fail(
                where,
                f"config.json describes {raw.get('model_type') or ','.join(archs) or 'an unknown model'!r}",
                "pass an EAGLE-3 head (EAGLE repo or speculators format)",
            )
        notes = auto_map_notes(raw, where, "draft")
        layer = _layer_config(raw, where)
        if nested is not None and nested.get("use_aux_hidden_state") is False:
            _fail(
                where,
                "eagle_config.use_aux_hidden_state=false (a last-layer EAGLE head)",
                "alcheck runs EAGLE-3 heads with aux states",
            )
        norm_before_residual = bool(raw.get("norm_before_residual", False))
        fc_bias = raw.get("bias")  # None: the file decides
    draft_vocab = raw.get("draft_vocab_size") or layer.vocab_size
    target_hidden = raw.get("target_hidden_size") or layer.hidden_size
    ids, source = _aux_spec(raw, nested, where)
    cfg = Eagle3Config(
        layer, int(draft_vocab), int(target_hidden), (), norm_before_residual, fc_bias, tuple(notes)
    )
    return cfg, ids, source


def resolve_aux_layers(
    ids: list[int] | None, source: str, num_target_layers: int, where: Path
) -> tuple[int, ...]:
    """Three distinct ids in 0..L-1, ascending (the order the target captures them in).

    Checked in vLLM's sources (EAGLE3-NOTES marked it uncertain): models built on its
    EagleModelMixin record id 0 before the first layer and id i+1 after layer i, so they also
    accept id L (the last layer's pre-norm output); older llama.py captured only before layers
    0..L-1. alcheck refuses id L, as the classic loop does (issue 11)."""
    n = num_target_layers
    if ids is None:
        ids = list(default_aux_layers(n))
        if len(set(ids)) != NUM_AUX or min(ids) < 0:
            _fail(
                where,
                f"the config names no auxiliary layers and the default (2, L//2, L-3) = {tuple(ids)} for a "
                f"{n}-layer target is not three distinct layers",
                "add eagle_aux_hidden_state_layer_ids (inputs of three target layers) to its config.json",
            )
    if len(ids) != NUM_AUX or len(set(ids)) != NUM_AUX:
        _fail(
            where,
            f"{source} = {ids} is not three distinct layers",
            "EAGLE-3 heads fuse exactly three target layers",
        )
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        _fail(
            where,
            f"auxiliary layer {bad[0]} from {source} is outside the target's layers 0..{n - 1}",
            "pass the EAGLE-3 head trained for this target",
        )
    return tuple(sorted(ids))


# -- tensors ---------------------------------------------------------------------------------


def normalize_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """EAGLE repo `midlayer.*` and vLLM-style `model.*` names -> speculators/our `layers.0.*`."""
    out = {}
    for name, tensor in state.items():
        key = name.removeprefix("model.")
        if key.startswith("midlayer."):
            key = "layers.0." + key[len("midlayer.") :]
        out[key] = tensor
    return out


def expected_shapes(cfg: Eagle3Config, has_fc_bias: bool) -> dict[str, tuple[int, ...]]:
    lc, h = cfg.layer, cfg.hidden_size
    q, kv, inter = (
        lc.num_attention_heads * lc.head_dim,
        lc.num_key_value_heads * lc.head_dim,
        lc.intermediate_size,
    )
    p = "layers.0."
    shapes = {
        "fc.weight": (h, NUM_AUX * cfg.target_hidden_size),
        p + "self_attn.q_proj.weight": (q, 2 * h),
        p + "self_attn.k_proj.weight": (kv, 2 * h),
        p + "self_attn.v_proj.weight": (kv, 2 * h),
        p + "self_attn.o_proj.weight": (h, q),
        p + "mlp.gate_proj.weight": (inter, h),
        p + "mlp.up_proj.weight": (inter, h),
        p + "mlp.down_proj.weight": (h, inter),
        p + "input_layernorm.weight": (h,),
        p + "hidden_norm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
    }
    if has_fc_bias:
        shapes["fc.bias"] = (h,)
    if lc.attention_bias:
        shapes.update(
            {
                p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.bias": (kv,),
                p + "self_attn.o_proj.bias": (h,),
            }
        )
    if lc.mlp_bias:
        shapes.update(
            {
                p + "mlp.gate_proj.bias": (inter,),
                p + "mlp.up_proj.bias": (inter,),
                p + "mlp.down_proj.bias": (h,),
            }
        )
    return shapes


def _check_tensors(state: dict, shapes: dict, where: Path):
    for name in state:
        if name not in shapes and name not in ALLOWED_EXTRA and name != "d2t":
            hint = (
                "alcheck runs single-layer EAGLE-3 heads"
                if name.startswith("layers.")
                else "not part of an EAGLE-3 head"
            )
            _fail(where, f"unexpected tensor {name!r} ({hint})", "pass a plain EAGLE-3 checkpoint")
    missing = [name for name in shapes if name not in state]
    if missing:
        _fail(
            where,
            f"lacks tensors {missing[:3]}{'…' if len(missing) > 3 else ''}",
            "not a complete EAGLE-3 checkpoint",
        )
    for name, shape in shapes.items():
        if tuple(state[name].shape) != shape:
            _fail(
                where,
                f"tensor {name} has shape {tuple(state[name].shape)}, config.json says {shape}",
                "config.json and weights disagree",
            )
        if not torch.isfinite(state[name]).all():
            _fail(where, f"tensor {name} holds NaN or inf", "re-download or re-export the head")


def draft_to_target_ids(state: dict, cfg: Eagle3Config, where: Path) -> torch.Tensor:
    """Absolute target ids arange + d2t, checked: right length, in the target vocabulary, distinct."""
    vd, v = cfg.draft_vocab_size, cfg.vocab_size
    d2t = state.get("d2t")
    if d2t is None:
        if vd != v:
            _fail(
                where,
                f"draft_vocab_size={vd} differs from vocab_size={v} but the file has no d2t",
                "export the head with its d2t mapping",
            )
        return torch.arange(vd)
    if d2t.is_floating_point() or d2t.is_complex() or d2t.dtype == torch.bool:
        _fail(where, f"d2t has dtype {d2t.dtype}, not an integer type", "re-export the head")
    if d2t.dim() != 1 or d2t.numel() != vd:
        _fail(
            where,
            f"d2t has shape {tuple(d2t.shape)}, draft_vocab_size is {vd}",
            "d2t needs one offset per draft token",
        )
    ids = torch.arange(vd) + d2t.long()
    if ids.min() < 0 or ids.max() >= v:
        bad = int(torch.nonzero((ids < 0) | (ids >= v))[0])
        _fail(
            where,
            f"d2t maps draft id {bad} to target id {int(ids[bad])}, outside the vocabulary of {v}",
            "pass the head trained for this target",
        )
    if torch.unique(ids).numel() != vd:
        _fail(where, "d2t maps two draft ids to the same target id", "re-export the head")
    t2d = state.get("t2d")
    if t2d is not None:
        if t2d.dim() != 1 or t2d.numel() != v:
            _fail(where, f"t2d has shape {tuple(t2d.shape)}, vocab_size is {v}", "re-export the head")
        mask = t2d.bool()
        if int(mask.sum()) != vd or not bool(mask[ids].all()):
            _fail(where, "t2d and d2t name different draft vocabularies", "re-export the head")
    return ids


def _embedding(state: dict, target_embed: torch.Tensor, where: Path) -> torch.Tensor | None:
    """The head's own embedding when it ships one that is not the target's (vLLM keeps such a one)."""
    own = state.get("embed_tokens.weight")
    if own is None:
        return None
    if tuple(own.shape) != tuple(target_embed.shape):
        _fail(
            where,
            f"embed_tokens.weight has shape {tuple(own.shape)}, the target's embedding "
            f"{tuple(target_embed.shape)}",
            "pass the head trained for this target",
        )
    ref = target_embed.detach().float().cpu()
    if torch.allclose(own.float(), ref, rtol=1e-2, atol=1e-3):  # equal up to fp16/bf16 rounding
        return None
    print(
        f"warning: draft {where}: embed_tokens.weight differs from the target's embedding; "
        "using the head's own, as vLLM does",
        file=sys.stderr,
    )
    return own


# -- entry point -----------------------------------------------------------------------------


def check_config(target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> Eagle3Config:
    """Config-only checks (before any weight is read): the target's config on its own, then the
    head fits the target's hidden size, vocabulary and layer count. Returns the config with its
    auxiliary layers resolved (cfg.notes: the head's config keys read but ignored)."""
    from alcheck.models.compat import check_target_config

    where, target_where = Path(draft_dir) / "config.json", Path(target_dir) / "config.json"
    check_target_config(target_raw, target_dir)  # the target's own problems are not blamed on the head
    cfg, ids, source = parse_config(draft_raw, where)
    for name in ("hidden_size", "vocab_size", "num_hidden_layers"):
        if not isinstance(target_raw.get(name), int):
            raise AlcheckError(f"target {target_where} has no {name}: point at a complete checkpoint folder")
    if cfg.target_hidden_size != target_raw["hidden_size"]:
        _fail(
            where,
            f"expects target hidden size {cfg.target_hidden_size} but {target_where} has "
            f"{target_raw['hidden_size']}",
            "pass the EAGLE-3 head trained for this target",
        )
    if cfg.vocab_size != target_raw["vocab_size"]:
        _fail(
            where,
            f"has vocab_size={cfg.vocab_size} but {target_where} has {target_raw['vocab_size']}",
            "pass the EAGLE-3 head trained for this target",
        )
    if cfg.draft_vocab_size > cfg.vocab_size:
        _fail(
            where,
            f"draft_vocab_size={cfg.draft_vocab_size} exceeds vocab_size={cfg.vocab_size}",
            "fix config.json",
        )
    cfg.aux_layer_ids = resolve_aux_layers(ids, source, target_raw["num_hidden_layers"], where)
    return cfg


def load_eagle3(spec: str, target, dtype=torch.float32, device="cpu") -> Eagle3Head:
    """target: alcheck.models.loading.Target (its config and embedding are checked against)."""
    what = "draft"
    directory = resolve_checkpoint(spec, what)
    where = directory / "config.json"
    cfg = check_config(
        read_config(target.path, "target"), read_config(directory, what), target.path, directory
    )
    state = normalize_names(load_state_dict(directory, what))
    if cfg.fc_bias is None:
        cfg.fc_bias = "fc.bias" in state
    elif bool(cfg.fc_bias) != ("fc.bias" in state):
        _fail(
            where,
            f"config says bias={cfg.fc_bias} but the weights "
            f"{'have' if 'fc.bias' in state else 'lack'} fc.bias",
            "make config.json and the weights agree",
        )
    cfg.fc_bias = bool(cfg.fc_bias)
    shapes = expected_shapes(cfg, cfg.fc_bias)
    _check_tensors(state, shapes, where)
    mapping = draft_to_target_ids(state, cfg, where)
    own_embed = _embedding(state, target.model.model.embed_tokens.weight, where)
    with torch.device("meta"):
        head = Eagle3Head(cfg)
    head = head.to_empty(device="cpu")
    head.load_state_dict(stack_checkpoint({k: state[k] for k in shapes}), strict=True)
    head.draft_to_target = mapping
    for sub in head.modules():
        if isinstance(sub, Rotary):  # non-persistent buffers were created empty on the meta device
            sub.inv_freq = rope_inv_freq(cfg.layer.head_dim, cfg.layer.rope_theta, None)
    if own_embed is not None:
        head.embed_tokens = torch.nn.Embedding.from_pretrained(own_embed.float(), freeze=True)
    return head.to(device=device, dtype=dtype).eval()
