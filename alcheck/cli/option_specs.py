"""The click options that more than one command declares (run and ablate, serve, import, compare,
gate): each declared once here, its values and default from alcheck/options.py, so the commands
spell, default and explain it alike.

To give two commands one option: add its entry to SPECS, then decorate each command with
`shared_option("name")`, overriding only what truly differs there (`default=`, `help=`).
"""

from __future__ import annotations

import click

from alcheck.options import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_DRAFT_SAMPLING,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    DEVICES,
    DRAFT_SAMPLING,
    DTYPES,
    METHODS,
)

# name -> (its declarations, click.option's keywords)
SPECS: dict[str, tuple[tuple[str, ...], dict]] = {
    "method": (
        ("--method",),
        dict(
            default="auto",
            show_default=True,
            type=click.Choice(METHODS),
            help=f"{', '.join(m for m in METHODS if m != 'auto')}, or auto (detected from the files).",
        ),
    ),
    "prompt_lookup_min": (
        ("--prompt-lookup-min",),
        dict(
            type=int,
            help="--method ngram: the shortest n-gram matched (default 5 for the vllm rule, else 1).",
        ),
    ),
    "prompt_lookup_max": (
        ("--prompt-lookup-max",),
        dict(
            type=int,
            help="--method ngram: the longest n-gram matched (default 5 vllm, 2 transformers, 3 spec-bench).",
        ),
    ),
    "device": (
        ("--device",),
        dict(default="auto", show_default=True, help=f"{', '.join(DEVICES)} or cuda:N (one GPU by index)."),
    ),
    "dtype": (
        ("--dtype",),
        dict(
            default="auto",
            show_default=True,
            type=click.Choice(DTYPES),
            help=f"{', '.join(DTYPES)}; auto: float32 on CPU, the checkpoint's dtype on CUDA.",
        ),
    ),
    "topk": (
        ("--topk",),
        dict(
            default=1,
            show_default=True,
            type=int,
            help="Tree drafting: branching per expanded node (SGLang's --speculative-eagle-topk); 1 = chain.",
        ),
    ),
    "num_draft_tokens": (
        ("--num-draft-tokens",),
        dict(
            type=int,
            help="Tree drafting: tokens verified per step, root included; required with --topk > 1.",
        ),
    ),
    "draft_sampling": (
        ("--draft-sampling",),
        dict(
            default=DEFAULT_DRAFT_SAMPLING,
            show_default=True,
            type=click.Choice(DRAFT_SAMPLING),
            help="At temperature > 0: onehot (greedy drafts, as vLLM) or sampled (drafts from q, "
            "min(1, p/q)).",
        ),
    ),
    "block_size": (
        ("--block-size",),
        dict(default=DEFAULT_BLOCK_SIZE, show_default=True, type=int, help="KV block size in tokens."),
    ),
    "num_blocks": (
        ("--num-blocks",),
        dict(
            type=int,
            help="KV blocks (default: enough for the batch, within --gpu-memory-utilization on a GPU).",
        ),
    ),
    "no_kv_lookahead": (
        ("--no-kv-lookahead",),
        dict(is_flag=True, help="Reproduce the pre-fix bug: no lookahead KV slots."),
    ),
    "timeout": (  # a number of seconds; each command names its own flag
        (),
        dict(default=DEFAULT_TIMEOUT_S, show_default=True, type=float),
    ),
    "tolerance": (
        ("--tolerance",),
        dict(default=DEFAULT_TOLERANCE, show_default=True, type=float),
    ),
}


def shared_option(name: str, *decls: str, **changes):
    """click.option for SPECS[name]; `decls` replace its flag names, `changes` its keywords."""
    spec_decls, keywords = SPECS[name]
    return click.option(*(decls or spec_decls), **{**keywords, **changes})
