"""Request bodies, read the same way by both dialects: typed fields, and prompt checks.

Anything wrong is a `BadRequest` (HTTP 400, in the dialect's error JSON), never a 500: a token id
outside the vocabulary, an empty prompt, prompt + max tokens beyond the context, a field of the
wrong type, or a sampling option the built-in runner does not implement.
"""

from __future__ import annotations

import math
import random


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


def get_int(body: dict, key: str, default, minimum: int | None = None, where: str = ""):
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadRequest(f"{where}{key} must be an integer, got {value!r}", key)
    if minimum is not None and value < minimum:
        raise BadRequest(f"{where}{key} must be at least {minimum}, got {value}", key)
    return value


def get_float(body: dict, key: str, default: float, where: str = "") -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{where}{key} must be a finite number, got {value!r}", key)
    return float(value)


def get_bool(body: dict, key: str, default: bool, where: str = "") -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{where}{key} must be true or false, got {value!r}", key)
    return value


def get_seed(body: dict, keys: tuple[str, ...], where: str = "") -> int:
    """The first of keys present, in 0..2^63-1; without one a fresh random seed, as the engines do."""
    for key in keys:
        seed = get_int(body, key, None, minimum=0, where=where)
        if seed is not None:
            if seed >= 2**63:
                raise BadRequest(f"{where}{key} must be below 2^63, got {seed}", key)
            return seed
    return random.SystemRandom().randrange(2**31)


def reject_unsupported(body: dict, neutral: dict, where: str = ""):
    """Options the runner does not implement are refused unless they hold their neutral value(s)."""
    for key, allowed in neutral.items():
        if key in body and body[key] is not None and body[key] not in allowed:
            raise BadRequest(
                f"{where}{key}={body[key]!r} is not supported by alcheck serve "
                f"(it runs plain greedy or temperature sampling): leave it out",
                key,
            )


def token_ids(value, key: str) -> list[int] | None:
    """A flat list of ints, or None when value is not a list (the caller tries text)."""
    if not isinstance(value, list):
        return None
    if value and isinstance(value[0], list):
        raise BadRequest(
            f"{key}: one prompt per request, got a batch of {len(value)}: send them as separate requests", key
        )
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(f"{key} must be a list of token ids (integers)", key)
    return value


def tokenize(pair, text, key: str) -> list[int]:
    if not isinstance(text, str):
        raise BadRequest(f"{key} must be a string or a list of token ids, got {type(text).__name__}", key)
    # no BOS or other special tokens: clients that need them send token ids
    return list(pair.tokenizer.encode(text, add_special_tokens=False))


def check_prompt(pair, ids: list[int], max_tokens: int, key: str, max_key: str):
    if not ids:
        raise BadRequest(f"the prompt is empty: send at least one token in {key}", key)
    vocab = pair.vocab_size
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise BadRequest(
            f"token id {bad} in {key} is out of vocabulary (the target's vocab_size is {vocab})", key
        )
    limit = pair.max_model_len
    if len(ids) + max_tokens > limit:
        raise BadRequest(
            f"this model's maximum context length is {limit} tokens, but the request needs "
            f"{len(ids) + max_tokens} ({len(ids)} in the prompt, {max_tokens} in {max_key}): "
            f"shorten the prompt or lower {max_key}",
            max_key,
        )
