"""Pure config checks run before any weight is read: does this draft fit this target, and how
long may a sequence be?

Everything here works on the parsed config.json dicts, so a wrong pair fails in seconds instead
of after the target's weights are loaded.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.options import is_count

# fields a draft head must share with its target (EAGLE-1 feeds target hidden states and
# shares the target's embedding and LM head)
SHARED_FIELDS = ("hidden_size", "vocab_size")


def check_target_config(target_raw: dict, target_dir: Path) -> list[str]:
    """The target's config.json: an architecture of the target table (models/targets.py), read as
    transformers reads it and checked against what its implementation computes, before any weight
    is read. Returns notes on ignored keys."""
    from alcheck.models.config import auto_map_notes
    from alcheck.models.targets import find_target

    kind = find_target(target_raw, target_dir, "target")
    kind.check(target_raw, Path(target_dir), "target")
    return auto_map_notes(target_raw, Path(target_dir) / "config.json", "target")


def check_draft_config(target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path) -> list[str]:
    """An EAGLE-1 head's config against its target's (both checked on their own first). Returns
    notes on ignored keys."""
    from alcheck.models.config import check_head_family, read_model_config

    notes = check_target_config(target_raw, target_dir)
    file = Path(draft_dir) / "config.json"
    notes += check_head_family(draft_raw, file, "draft")
    read_model_config(draft_raw, file, "draft")
    for name in SHARED_FIELDS:
        t, d = target_raw.get(name), draft_raw.get(name)
        if t is None or d is None:
            which, path = ("target", target_dir) if t is None else ("draft", draft_dir)
            raise AlcheckError(
                f"{which} {Path(path) / 'config.json'} has no {name}: point at a complete checkpoint folder"
            )
        if t != d:
            raise AlcheckError(
                f"draft {Path(draft_dir) / 'config.json'} has {name}={d} but target "
                f"{Path(target_dir) / 'config.json'} has {t}: pass the EAGLE head trained for this target"
            )
    return notes


def context_limit(target_raw: dict, target_dir: Path) -> int:
    """The target's context: max_position_embeddings from its config.json."""
    value = target_raw.get("max_position_embeddings")
    if not is_count(value):
        raise AlcheckError(
            f"target {Path(target_dir) / 'config.json'} has no usable max_position_embeddings ({value!r}): "
            "add the model's context length there"
        )
    return value


def positions_needed(prompt_tokens: int, max_tokens: int, k: int) -> int:
    """Positions a speculative generation can touch: prompt + max_tokens + K - 1.

    The last verification step starts with at most max_tokens - 1 output tokens, so it runs the
    target at positions up to prompt + max_tokens - 2 + K (its K drafts); draft steps stay below
    that. tests/test_run_context.py checks this bound against the runner's own positions.
    """
    return prompt_tokens + max_tokens + k - 1


def shorten_fix(max_tokens: int, k: int) -> str:
    """What to lower when a generation does not fit the context: the larger of the two parts
    a run chooses (a huge K is not fixed by lowering --max-tokens)."""
    return f"lower the largest K in --ks (K={k})" if k - 1 > max_tokens else "lower --max-tokens"


def check_topk_fits_vocab(topk: int, vocab: int | None, draft_dir: Path):
    """A tree node takes its topk most likely tokens from the head's distribution, over `vocab`
    tokens (the drafting method says which: the target's vocabulary, or a head's own reduced one)."""
    if isinstance(vocab, int) and topk > vocab:
        raise AlcheckError(
            f"--topk {topk}: the head at {draft_dir} drafts from {vocab} tokens, so a node has at "
            f"most {vocab} children: use --topk {vocab} or less"
        )


def kv_bytes_per_token(target_raw: dict, itemsize: int, draft_bytes: int | None = None) -> int:
    """KV cache bytes one token takes: K and V in every target layer plus the draft's
    (draft_bytes: its drafting method's count; None: one layer at the target's KV width, as EAGLE
    heads have it)."""
    from alcheck.models.config import ModelConfig

    cfg = ModelConfig.from_dict(target_raw)
    target = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * itemsize
    return target + (layer_kv_bytes(target_raw, itemsize) if draft_bytes is None else draft_bytes)


def layer_kv_bytes(raw: dict, itemsize: int) -> int:
    """K and V of one position in one attention layer of the model config.json `raw` describes."""
    heads = raw.get("num_attention_heads") or 1
    kv_heads = raw.get("num_key_value_heads") or heads
    head_dim = raw.get("head_dim") or raw.get("hidden_size", 0) // heads
    return 2 * kv_heads * head_dim * itemsize


def _draft_kv_bytes(cfg, target_raw: dict, itemsize: int) -> int | None:
    """The run's draft KV bytes per position by its drafting method (None: not known here)."""
    from alcheck.methods.table import METHOD_NAMES, get_method

    method = getattr(cfg, "method", None)
    if method not in METHOD_NAMES:
        return None
    entry = get_method(method)
    if not entry.needs_checkpoint:
        return None
    from alcheck.models.checkpoint_files import read_config
    from alcheck.models.hub import resolve_checkpoint

    draft_raw = read_config(resolve_checkpoint(cfg.draft, "draft"), "draft") if cfg.draft else None
    return entry.kv_bytes_per_token(target_raw, draft_raw, itemsize)


def check_kv_request(cfg, target_raw: dict, target_dir: Path, memory_bytes: int | None) -> None:
    """--block-size / --num-blocks, before anything is allocated: a block longer than the target's
    context never fills (and the automatic pool gives every request one), and an explicit pool
    larger than the device's memory would fail deep in torch's allocator instead of in one line.
    memory_bytes: the device's total memory (None: unknown, not checked)."""
    from alcheck.errors import AlcheckError

    context = context_limit(target_raw, target_dir)
    if cfg.block_size > context:
        raise AlcheckError(
            f"--block-size {cfg.block_size} is longer than the target's context of {context} positions "
            "(a block never fills): use a small power of two such as 16 (the default)"
        )
    if cfg.num_blocks is None or memory_bytes is None:
        return
    itemsize = 4 if cfg.dtype == "float32" or (cfg.dtype == "auto" and cfg.device == "cpu") else 2
    per_token = kv_bytes_per_token(target_raw, itemsize, _draft_kv_bytes(cfg, target_raw, itemsize))
    need = cfg.num_blocks * cfg.block_size * per_token
    if need > memory_bytes:
        raise AlcheckError(
            f"--num-blocks {cfg.num_blocks} x --block-size {cfg.block_size} is a KV cache of "
            f"{need / 2**30:,.1f} GiB, more than the device's {memory_bytes / 2**30:,.1f} GiB: lower "
            "--num-blocks, or leave it out to size the cache automatically"
        )
