"""Load a target (by the target table, models/targets.py) and an EAGLE-1 head from local
directories or hub ids, safely and strictly (EAGLE-3 heads: models/eagle3_loading.py; which kind a
head folder holds: methods/table.py).

- Safe: weights come from safetensors, or from `.bin` files through `torch.load(weights_only=True)`;
  a checkpoint that would need code execution to unpickle is refused. Configs are plain JSON and
  tokenizers never run remote code.
- Streaming: the modules are built on the meta device and every tensor is copied from its
  memory-mapped shard straight into its parameter, in the final dtype on the final device
  (alcheck/models/strict_load.py). Peak host memory is one shard beyond the weights themselves.
- Strict: every tensor in the files is used or on a named allow-list, every value is finite, and
  the head's `fc.bias` is whatever its file holds (a config that disagrees is an error).

For other loaders (EAGLE-3): `resolve_checkpoint`, `read_config`, `open_checkpoint` (streaming),
`load_state_dict` (everything at once, for small heads) and `load_strict` are importable here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import (  # noqa: F401 - re-exported for other loaders
    WEIGHT_FILES,
    Checkpoint,
    load_state_dict,
    open_checkpoint,
    read_config,
    read_json,
)
from alcheck.models.config import ModelConfig, check_head_family, config_eos_ids, rope_inv_freq
from alcheck.models.eagle import EagleHead
from alcheck.models.hub import resolve_checkpoint  # noqa: F401 - re-exported
from alcheck.models.llama_loading import (  # noqa: F401 - re-exported (tensor parallelism, tools, tests)
    TARGET_EXTRAS,
    TIED_LM_HEAD,
    init_rotary,
    load_target_model,
    model_config,
)
from alcheck.models.strict_load import Extra, load_strict  # noqa: F401 - re-exported
from alcheck.models.targets import find_target
from alcheck.prompts.tokenizer import load_tokenizer

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


@dataclass
class Target:
    model: torch.nn.Module  # LlamaTarget or HFTarget: the runner's target interface (models/targets.py)
    tokenizer: object
    eos_token_ids: list[int]
    path: Path
    name: str


def load_target(
    spec: str, dtype=torch.float32, device="cpu", chat_template: str | None = None, tp=None, tokenizer=None
) -> Target:
    """tp: a tensor-parallel rank (alcheck.tp.group.TPGroup) loads only its shard of the weights;
    tokenizer: the target's tokenizer when the caller has it already (loaded once per process)."""
    what = "target"
    directory = resolve_checkpoint(spec, what)
    raw = read_config(directory, what)
    model = find_target(raw, directory, what).load(directory, raw, dtype, device, what, tp)
    if tokenizer is None:
        tokenizer = load_tokenizer(directory, what, chat_template)
    return Target(model, tokenizer, eos_ids(directory, raw, tokenizer), directory, spec)


def eos_ids(directory: Path, cfg: ModelConfig | dict, tokenizer) -> list[int]:
    """All stop ids: generation_config.json's, config.json's (cfg: its ModelConfig or the raw
    dict, e.g. of an --engine target) and the tokenizer's."""
    ids = set(cfg.eos_token_ids if isinstance(cfg, ModelConfig) else config_eos_ids(cfg))
    gen = directory / "generation_config.json"
    if gen.is_file():
        value = read_json(gen, "target").get("eos_token_id")
        values = [value] if type(value) is int else ([] if value is None else value)
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise AlcheckError(
                f"target: {gen} has eos_token_id {value!r}, not a token id or a list of them: fix it"
            )
        ids.update(values)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def load_eagle(spec: str, target: Target, dtype=torch.float32, device="cpu") -> EagleHead:
    what = "draft"
    directory = resolve_checkpoint(spec, what)
    raw = read_config(directory, what)
    notes = check_head_family(raw, directory / "config.json", what)
    cfg = model_config(raw, directory, what)
    cfg.notes = notes
    tcfg = target.model.config
    for field in ("hidden_size", "vocab_size"):
        if getattr(cfg, field) != getattr(tcfg, field):
            raise AlcheckError(
                f"draft {directory / 'config.json'} has {field}={getattr(cfg, field)} but target "
                f"{target.path / 'config.json'} has {getattr(tcfg, field)}: "
                "pass the EAGLE head trained for this target"
            )
    checkpoint = open_checkpoint(directory, what)
    names = {_head_name(n) for n in checkpoint.names()}
    if "fc.weight" not in names:
        raise AlcheckError(
            f"draft: {directory} has no fc.weight, so it is not an EAGLE-1 head (plain draft models are not "
            "supported): pass an EAGLE-1 head, or an EAGLE-3 head with --method eagle3 or auto"
        )
    cfg.bias = _fc_bias(cfg.bias, "fc.bias" in names, directory / "config.json", checkpoint.source)
    with torch.device("meta"):
        head = EagleHead(cfg)
    embedding = target.model.model.embed_tokens
    extras = [
        Extra(
            "embed_tokens.weight",
            "a copy of the target's embedding: compared with it, the target's is used",
            lambda name, tensor, file: compare_embedding(*_own_rows(tensor, embedding), file, target.path),
        ),
        Extra("layers.*.self_attn.rotary_emb.inv_freq", "RoPE frequencies: recomputed from config.json"),
    ]
    load_strict(head, checkpoint, dtype=dtype, device=device, what=what, extras=extras, rename=_head_name)
    init_rotary(head, rope_inv_freq(cfg.head_dim, cfg.rope_theta, None), device)
    return head.eval()


def _own_rows(copy: torch.Tensor, embedding) -> tuple[torch.Tensor, torch.Tensor]:
    """(copy, weight) to compare; a tensor-parallel rank compares the rows it holds (a full-shape
    copy is required first, as unsplit)."""
    if not hasattr(embedding, "start"):  # an unsplit nn.Embedding
        return copy, embedding.weight
    if tuple(copy.shape) != (embedding.vocab_size, embedding.weight.shape[1]):
        return copy, torch.empty(
            embedding.vocab_size, embedding.weight.shape[1], device="meta"
        )  # reports the shape
    return copy[embedding.start : embedding.stop], embedding.weight


def _head_name(name: str) -> str:
    return name.removeprefix("model.")  # some exports prefix the head's tensors with "model."


def _fc_bias(configured: bool | None, in_file: bool, config_file: Path, weights: Path) -> bool:
    """EAGLE-1's fc bias: the file decides. Heads for Vicuna and LLaMA-2 hold fc.bias with no
    "bias" key in config.json; a config that states the opposite of the file is an error."""
    if configured is None or configured == in_file:
        return in_file
    if configured:
        raise AlcheckError(
            f'draft: {config_file} says "bias": true but {weights} has no fc.bias: '
            'set "bias": false (or drop the key) or pass the matching weights'
        )
    raise AlcheckError(
        f'draft: {config_file} says "bias": false but {weights} holds fc.bias: '
        'drop the "bias" key (the file decides) or pass the matching weights'
    )


class EmbeddingMismatchWarning(UserWarning):
    """The head's embedding copy is not the target's: the head was likely trained for another target."""


def compare_embedding(
    copy: torch.Tensor, embedding: torch.Tensor, file: Path, target_dir: Path, rows_per_chunk: int = 8192
) -> bool:
    """Warn (one line) when the head's embed_tokens copy differs from the target's embedding by more
    than rounding to the coarser of their dtypes. Returns True when they agree."""
    what = f"draft: embed_tokens.weight in {file}"
    if tuple(copy.shape) != tuple(embedding.shape):
        raise AlcheckError(
            f"{what} has shape {tuple(copy.shape)} but the target's embedding is {tuple(embedding.shape)}: "
            "pass the EAGLE head trained for this target"
        )
    eps = max(torch.finfo(copy.dtype).eps, torch.finfo(embedding.dtype).eps)
    tiny = max(torch.finfo(copy.dtype).tiny, torch.finfo(embedding.dtype).tiny)
    bad_rows, worst = 0, 0.0
    for start in range(0, copy.shape[0], rows_per_chunk):  # chunks: no full-size float32 temporaries
        a = copy[start : start + rows_per_chunk].to(embedding.device).float()
        b = embedding[start : start + rows_per_chunk].float()
        diff = (a - b).abs()
        within = diff <= eps * torch.maximum(a.abs(), b.abs()) + tiny
        bad_rows += int((~within).any(dim=1).sum())
        worst = max(worst, float(diff.max()))
    if bad_rows:
        warnings.warn_explicit(
            f"{what} differs from the target's embedding in "
            f"{target_dir} ({bad_rows} of {copy.shape[0]} rows, "
            f"max difference {worst:.3g}): alcheck uses the target's; "
            "the head was probably trained for another target",
            EmbeddingMismatchWarning,
            filename=str(file),
            lineno=0,
        )
    return not bad_rows
