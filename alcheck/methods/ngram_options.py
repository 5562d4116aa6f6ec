"""--method ngram's options: the rule names, their defaults, and the one check of them.

A leaf (it imports only the error type and the engine table, both torch-free): the run config,
serve's config and the method entries read it without loading anything.
"""

from __future__ import annotations

from alcheck.backends.engines.table import VLLM
from alcheck.errors import AlcheckError

VLLM_RULE = VLLM.name  # vLLM v1's NgramProposer: the rule is named after the engine that ships it
TRANSFORMERS_RULE = "transformers"
SPEC_BENCH_RULE = "spec-bench"
RULES = (VLLM_RULE, TRANSFORMERS_RULE, SPEC_BENCH_RULE)  # runner/proposers/ngram_rules.py implements each
DEFAULT_RULE = VLLM_RULE
# (min, max) when neither size is given: vLLM's 5/5 (vllm/config/speculative.py, 0.32),
# transformers' max_matching_ngram_size 2 (down to 1), Spec-Bench's max_ngram_size 3 (down to 1)
RULE_DEFAULTS = {VLLM_RULE: (5, 5), TRANSFORMERS_RULE: (1, 2), SPEC_BENCH_RULE: (1, 3)}
FLAGS = {
    "ngram_rule": "--ngram-rule",
    "prompt_lookup_min": "--prompt-lookup-min",
    "prompt_lookup_max": "--prompt-lookup-max",
}


def resolve_options(rule, prompt_lookup_min, prompt_lookup_max) -> tuple[str, int, int]:
    """(rule, min, max) as a run records them: the rule's defaults when neither size is given,
    the one given copied to the other (vLLM's behaviour), each checked. One-line errors."""
    rule = DEFAULT_RULE if rule is None else rule
    if rule not in RULES:
        raise AlcheckError(f"--ngram-rule {rule}: use one of {', '.join(RULES)}")
    low, high = prompt_lookup_min, prompt_lookup_max
    for flag, value in (("--prompt-lookup-min", low), ("--prompt-lookup-max", high)):  # as given
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise AlcheckError(f"{flag} {value}: must be an integer >= 1 (n-gram sizes count tokens)")
    if low is None and high is None:
        low, high = RULE_DEFAULTS[rule]
    elif low is None:
        low = high
    elif high is None:
        high = low
    if low > high:
        raise AlcheckError(
            f"--prompt-lookup-min {low} is larger than --prompt-lookup-max {high}: the match length "
            "is searched in [min, max]; lower the min or raise the max"
        )
    return rule, low, high


def refuse_ngram_options(cfg) -> None:
    """For any method but n-gram: its options given are an error, not silently ignored."""
    for name, flag in FLAGS.items():
        if getattr(cfg, name, None) is not None:
            raise AlcheckError(f"{flag} sets n-gram drafting: pass --method ngram, or drop {flag}")
