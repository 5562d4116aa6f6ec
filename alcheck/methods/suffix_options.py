"""--method suffix's options: vLLM's speculative_config names (suffix_decoding_*), its defaults and
bounds (vllm/config/speculative.py, _validate_suffix_decoding), and the one check of them.

A leaf (it imports only the error type): the run config and the method entries read it without
loading anything.
"""

from __future__ import annotations

import math

from alcheck.errors import AlcheckError

# RunConfig field (vLLM's speculative_config key) -> its default in vLLM
DEFAULTS = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_cached_requests": 10000,  # 0: no global tree of past responses
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}
INTEGERS = ("suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests")


def flag(name: str) -> str:
    """The CLI flag of a field: vLLM's key with dashes."""
    return "--" + name.replace("_", "-")


def _bad(name: str, value) -> str | None:
    """Why a value is out of vLLM's bounds, or None."""
    if name in INTEGERS:
        low = 1 if name == "suffix_decoding_max_tree_depth" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            extra = " (0 turns the global tree of past responses off)" if low == 0 else ""
            return f"must be an integer >= {low}{extra}"
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "must be a finite number"
    if name == "suffix_decoding_max_spec_factor" and value < 0:
        return "must be >= 0 (drafts are at most this many times the match length)"
    if name == "suffix_decoding_min_token_prob" and not 0 <= value <= 1:
        return "must be in [0, 1] (a probability estimated from counts)"
    return None


def resolve_options(cfg) -> None:
    """The four settings as a run records them: vLLM's default for each not given, each checked.
    In place on a RunConfig; one-line errors."""
    for name, default in DEFAULTS.items():
        value = getattr(cfg, name)
        if value is None:
            value = default
        why = _bad(name, value)
        if why:
            raise AlcheckError(f"{flag(name)} {value}: {why}")
        setattr(cfg, name, float(value) if name not in INTEGERS else value)


def options_of(cfg) -> dict:
    """The proposer's settings (PairPlan.method_options), by SuffixOptions' names."""
    return {name.removeprefix("suffix_decoding_"): getattr(cfg, name) for name in DEFAULTS}


def refuse_suffix_options(cfg) -> None:
    """For any method but suffix: its options given are an error, not silently ignored."""
    for name in DEFAULTS:
        if getattr(cfg, name, None) is not None:
            raise AlcheckError(
                f"{flag(name)} sets suffix decoding: pass --method suffix, or drop {flag(name)}"
            )
