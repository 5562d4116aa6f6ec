"""Pure config checks run before any weight is read: does this draft fit this target, and how
long may a sequence be?

Everything here works on the parsed config.json dicts, so a wrong pair fails in seconds instead
of after the target's weights are loaded.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError

# fields a draft head must share with its target (EAGLE-1 feeds target hidden states and
# shares the target's embedding and LM head)
SHARED_FIELDS = ("hidden_size", "vocab_size")


def check_draft_config(target_raw: dict, draft_raw: dict, target_dir: Path, draft_dir: Path):
    for name in SHARED_FIELDS:
        t, d = target_raw.get(name), draft_raw.get(name)
        if t is None or d is None:
            which, path = ("target", target_dir) if t is None else ("draft", draft_dir)
            raise AlcheckError(f"{which} {Path(path) / 'config.json'} has no {name}: "
                               "point at a complete checkpoint folder")
        if t != d:
            raise AlcheckError(
                f"draft {Path(draft_dir) / 'config.json'} has {name}={d} but target "
                f"{Path(target_dir) / 'config.json'} has {t}: pass the EAGLE head trained for this target")


def context_limit(target_raw: dict, target_dir: Path) -> int:
    """The target's context: max_position_embeddings from its config.json."""
    value = target_raw.get("max_position_embeddings")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AlcheckError(
            f"target {Path(target_dir) / 'config.json'} has no usable max_position_embeddings ({value!r}): "
            "add the model's context length there")
    return value


def positions_needed(prompt_tokens: int, max_tokens: int, k: int) -> int:
    """Positions a speculative generation can touch: prompt + max_tokens + K - 1.

    The last verification step starts with at most max_tokens - 1 output tokens, so it runs the
    target at positions up to prompt + max_tokens - 2 + K (its K drafts); draft steps stay below
    that. tests/test_run_context.py checks this bound against the runner's own positions.
    """
    return prompt_tokens + max_tokens + k - 1


def check_topk_fits_vocab(topk: int, vocab: int | None, draft_dir: Path):
    """A tree node takes its topk most likely tokens from the head's distribution, over `vocab`
    tokens (the drafting method says which: the target's vocabulary, or a head's own reduced one)."""
    if isinstance(vocab, int) and topk > vocab:
        raise AlcheckError(f"--topk {topk}: the head at {draft_dir} drafts from {vocab} tokens, so a node has at "
                           f"most {vocab} children: use --topk {vocab} or less")
