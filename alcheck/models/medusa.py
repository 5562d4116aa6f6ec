"""Medusa heads (`--method medusa`, vLLM's medusa; METHODS-NOTES section 4): N heads read the
target's final-norm hidden state h_p at the last committed position, and head i drafts token
p+2+i (the target's own lm_head gives p+1, the bonus token) with no autoregression:

    block_i(x) = x + silu(W_ij x + b_ij), applied for j = 1..L (a residual stack)
    logits_i = lm_head_i(block_i(h_p))           (times logit_scale)

Two on-disk layouts, both read here (vLLM reads both):
- vLLM's: config.json {"model_type": "medusa", num_heads, num_hidden_layers, hidden_size,
  vocab_size, ...}, tensors `blocks.{i}.layers.{j}.weight|bias` and `lm_heads.{i}.weight`;
  `original_lm_head: true` keeps one lm_head for every head (`lm_head.weight` or `lm_heads.0.weight`);
  `truncated_vocab_size` < vocab_size with a `token_map` tensor drafts from a sub-vocabulary.
- FasterDecoding's: config.json {medusa_num_heads, medusa_num_layers, base_model_name_or_path},
  tensors `{i}.{j}.linear.weight|bias` and `{i}.{L}.weight`, in medusa_lm_head.safetensors or .pt.

vLLM builds exactly K heads (num_lookahead_tokens = K): fewer than the checkpoint's leave the
rest unused, as here; more would draft from heads with no weights, so K above num_heads is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import MEDUSA_LEGACY_FILES as LEGACY_FILES

_LEGACY_LINEAR = re.compile(r"^(\d+)\.(\d+)\.linear\.(weight|bias)$")
_LEGACY_HEAD = re.compile(r"^(\d+)\.(\d+)\.weight$")


@dataclass(frozen=True)
class MedusaSpec:
    """What config.json (and the target's) say the heads are."""

    num_heads: int
    num_layers: int  # residual layers per head
    hidden_size: int
    vocab_size: int  # the target's: drafts are over its ids
    draft_vocab: int  # truncated_vocab_size: the lm_heads' rows (a token_map maps them back)
    shared_lm_head: bool  # original_lm_head: one lm_head for every head
    logit_scale: float


def is_medusa_config(raw: dict) -> bool:
    return raw.get("model_type") == "medusa" or "medusa_num_heads" in raw


def _count(raw: dict, word: str) -> int | None:
    """vLLM's MedusaConfig reads any key with "num" and "heads" (or "layers") in it."""
    for key, value in raw.items():
        if "num" in key and word in key and key != "num_attention_heads":
            return value
    return None


def medusa_spec(raw: dict, target_raw: dict, draft_dir: Path) -> MedusaSpec:
    """The heads' shape from config.json, checked against the target's; one line for what is wrong."""
    config = Path(draft_dir) / "config.json"
    heads, layers = _count(raw, "heads"), _count(raw, "layers")
    for name, value in (
        ("number of heads (num_heads)", heads),
        ("residual layers (num_hidden_layers)", layers),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise AlcheckError(
                f"--method medusa: {config} gives no usable {name} ({value!r}): pass a Medusa head "
                "folder (vLLM's config with model_type medusa, or FasterDecoding's medusa_num_heads)"
            )
    t_hidden, t_vocab = target_raw.get("hidden_size"), target_raw.get("vocab_size")
    hidden = raw.get("hidden_size", t_hidden)  # FasterDecoding's config leaves it to the base model
    if hidden != t_hidden:
        raise AlcheckError(
            f"--method medusa: {config} has hidden_size {hidden} but the target's is {t_hidden}: the heads "
            "read the target's hidden state: pass the Medusa heads trained for this target"
        )
    vocab = raw.get("vocab_size", t_vocab)  # vLLM takes the target's when the config has none
    if vocab != t_vocab:
        raise AlcheckError(
            f"--method medusa: {config} has vocab_size {vocab} but the target's is {t_vocab}: its drafts "
            "would be ids of another vocabulary: pass the Medusa heads trained for this target"
        )
    draft_vocab = raw.get("truncated_vocab_size") or vocab
    if not isinstance(draft_vocab, int) or not 0 < draft_vocab <= vocab:
        raise AlcheckError(
            f"--method medusa: {config} has truncated_vocab_size {draft_vocab!r}, not 1..{vocab}: "
            "fix config.json"
        )
    return MedusaSpec(
        num_heads=heads,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        draft_vocab=draft_vocab,
        shared_lm_head=bool(raw.get("original_lm_head", False)),
        logit_scale=float(raw.get("logit_scale", 1.0)),
    )


def check_k(k: int, num_heads: int, where) -> None:
    """K drafts need K heads: vLLM would build the missing heads with no weights."""
    if k > num_heads:
        raise AlcheckError(
            f"K={k} with --method medusa: {where} has {num_heads} head(s), one per draft position: "
            f"use K <= {num_heads}"
        )


class ResidualBlock(nn.Module):
    def __init__(self, hidden: int, layers: int, bias: bool):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden, bias=bias) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + nn.functional.silu(layer(x))
        return x


class MedusaHeads(nn.Module):
    """`head_logits(i, hidden [B, H])` -> logits [B, V] over the target's ids. No attention: no KV."""

    def __init__(self, spec: MedusaSpec, path: Path, bias: bool):
        super().__init__()
        self.spec, self.path = spec, Path(path)
        h = spec.hidden_size
        self.blocks = nn.ModuleList(ResidualBlock(h, spec.num_layers, bias) for _ in range(spec.num_heads))
        count = 1 if spec.shared_lm_head else spec.num_heads
        self.lm_heads = nn.ModuleList(nn.Linear(h, spec.draft_vocab, bias=False) for _ in range(count))
        # draft row -> target id, when the heads draft from a sub-vocabulary
        self.register_buffer("token_map", None)

    @property
    def num_heads(self) -> int:
        return self.spec.num_heads

    @property
    def attention_layers(self) -> list:
        return []

    def head_logits(self, i: int, hidden: torch.Tensor) -> torch.Tensor:
        lm_head = self.lm_heads[0 if self.spec.shared_lm_head else i]
        logits = lm_head(self.blocks[i](hidden))
        if self.spec.logit_scale != 1.0:
            logits = logits * self.spec.logit_scale
        if self.token_map is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.spec.vocab_size), float("-inf"))
        full[..., self.token_map] = logits
        return full


def _read_tensors(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """Every tensor of the head folder (small: read whole), each checked finite."""
    from alcheck.models.checkpoint_files import (
        WEIGHT_FILES,
        check_source_finite,
        load_state_dict,
        read_medusa_legacy,
    )

    if any((directory / name).is_file() for name in WEIGHT_FILES):
        return load_state_dict(directory, "draft"), directory
    legacy = read_medusa_legacy(directory)
    if legacy is not None:
        state, file = legacy
        for key, tensor in state.items():
            check_source_finite("draft", key, file, tensor)
        return state, file
    raise AlcheckError(
        f"draft: no weights in {directory} (looked for {', '.join(WEIGHT_FILES + LEGACY_FILES)}): "
        "pass a Medusa head folder"
    )


def canonical_name(name: str) -> str:
    """A checkpoint name in vLLM's layout (prefix dropped, FasterDecoding's numbers mapped)."""
    name = name.removeprefix("medusa_heads.")
    m = _LEGACY_LINEAR.match(name)
    if m:
        return f"blocks.{m[1]}.layers.{m[2]}.{m[3]}"
    m = _LEGACY_HEAD.match(name)
    if m:
        return f"lm_heads.{m[1]}.weight"
    return name


def medusa_tensor_names(names) -> bool:
    """Whether tensor names look like Medusa heads (either layout)."""
    canon = {canonical_name(n) for n in names}
    return any(n.startswith("blocks.0.layers.0.") for n in canon) and any(
        n.startswith(("lm_heads.0.", "lm_head.")) for n in canon
    )


def shared_head_names(spec: MedusaSpec, canon: dict) -> dict:
    """With original_lm_head, the one lm_head as vLLM finds it (lm_head.weight, else
    lm_heads.0.weight), under the module's name lm_heads.0; the other heads' copies are dropped as
    vLLM drops them."""
    if not spec.shared_lm_head:
        return canon
    canon = dict(canon)
    if "lm_head.weight" in canon:
        canon["lm_heads.0.weight"] = canon.pop("lm_head.weight")
    for i in range(1, spec.num_heads):
        canon.pop(f"lm_heads.{i}.weight", None)
    return canon


def _meta_heads(spec: MedusaSpec, directory: Path, names: set[str], source) -> MedusaHeads:
    """The heads on the meta device, after checking the checkpoint names cover them exactly (the
    blocks have biases when the checkpoint has them)."""
    with torch.device("meta"):
        heads = MedusaHeads(spec, directory, bias=any(n.endswith(".bias") for n in names))
    params = {name for name, _ in heads.named_parameters()}
    extra, missing = sorted(names - params - {"token_map"}), sorted(params - names)
    shape = f"{spec.num_heads} Medusa head(s) of {spec.num_layers} layer(s) (config.json)"
    if extra:
        raise AlcheckError(
            f"draft: {source} holds {extra[0]}, which is no part of {shape}: pass the config.json that "
            "came with these weights"
        )
    if missing:
        raise AlcheckError(
            f"draft: {source} has no {missing[0]} for {shape}: pass the config.json that came with "
            "these weights"
        )
    return heads


def check_medusa_names(spec: MedusaSpec, directory: Path, names) -> None:
    """Before any weight is read: the folder's tensor names are exactly these heads'."""
    canon = shared_head_names(spec, dict.fromkeys(canonical_name(n) for n in names))
    _meta_heads(spec, Path(directory), set(canon), directory)


def load_medusa(directory: Path, target_raw: dict, dtype, device) -> MedusaHeads:
    """The heads, strictly: every parameter filled once with its shape, every tensor used or named
    as unused (the heads past num_heads' lm_heads with a shared lm_head)."""
    from alcheck.models.checkpoint_files import read_config

    directory = Path(directory)
    spec = medusa_spec(read_config(directory, "draft"), target_raw, directory)
    state, source = _read_tensors(directory)
    canon: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        canon[canonical_name(name)] = tensor
    token_map = canon.pop("token_map", None)
    canon = shared_head_names(spec, canon)
    heads = _meta_heads(spec, directory, set(canon), source)
    params = dict(heads.named_parameters())
    for name, p in params.items():
        tensor = canon[name]
        if tuple(tensor.shape) != tuple(p.shape):
            raise AlcheckError(
                f"draft: tensor {name} in {source} has shape {tuple(tensor.shape)}, not {tuple(p.shape)} "
                "(hidden size and vocabulary from config.json and the target): pass the heads for this target"
            )
    heads = heads.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in heads.named_parameters():
            p.copy_(canon[name].to(dtype))
    if spec.draft_vocab < spec.vocab_size:
        if token_map is None or tuple(token_map.shape) != (spec.draft_vocab,):
            raise AlcheckError(
                f"draft: truncated_vocab_size {spec.draft_vocab} needs a token_map tensor of "
                f"{spec.draft_vocab} target ids in {source}: add it, or drop truncated_vocab_size"
            )
        heads.token_map = token_map.long().to(device)
    return heads.eval()


def config_bias(raw: dict) -> bool:
    """Whether config.json says the blocks have biases: vLLM's layout states medusa_fc_bias
    (default none); FasterDecoding's ResBlock always has them. The loader follows the tensors."""
    return bool(raw.get("medusa_fc_bias", False)) if raw.get("model_type") == "medusa" else True


def medusa_bytes(spec: MedusaSpec, dtype_bytes: int, bias: bool = True) -> int:
    from alcheck.models.sizes import meta_bytes

    return meta_bytes(lambda: MedusaHeads(spec, Path("draft"), bias=bias), dtype_bytes)
