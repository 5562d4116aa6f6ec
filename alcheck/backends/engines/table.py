"""The table of inference engines alcheck measures (`run --engine`) and imitates (`serve --dialect`):
their names and what differs between them, as entry data, so no other module compares an engine's
name. Facts and their sources: shared/ENGINES.md (per-request metrics 1.5 and 2.1, counters 1.1).

Torch-free and import-free beyond the error type: the run config and `alcheck --help` read it.
The client dialect and the served routes of an engine load on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from alcheck.errors import AlcheckError


@dataclass(frozen=True)
class EngineEntry:
    name: str  # what --engine and --dialect take
    title: str  # how the engine spells itself in prose
    what: str  # the server, in words (messages name it)
    client: str  # "module:attribute" of the client's dialect class (backends/engines/)
    routes: str  # "module:attribute" of `alcheck serve`'s router factory for this dialect (serve/)
    trees: bool  # whether it drafts trees (EAGLE-2 --topk > 1)
    no_trees: str  # why not, when it does not (messages quote it)
    per_position_counters: bool  # /metrics has per-position accepted counters (a per-K fallback)
    optional_per_request_metrics: bool  # a server flag leaves per-request counts out of answers
    silent_without_steps: bool  # a request that ran no verification step carries no spec counts
    counts_tail_past_eos: bool | None  # drafts accepted past EOS counted in its totals (None: unknown)
    # its step count leaves out steps that drafted nothing (vLLM's num_drafts; n-gram skips steps)
    steps_are_drafted_only: bool
    no_metrics_fix: str  # how to start a server whose answers carry speculative counts
    per_step_fix: str  # how to get per-step accepted counts ("" when no flag gives them)


VLLM = EngineEntry(
    name="vllm",
    title="vLLM",
    what="a vLLM OpenAI-compatible server (vllm serve)",
    client="alcheck.backends.engines.vllm:VllmDialect",
    routes="alcheck.serve.dialect_vllm:make_router",
    trees=False,
    no_trees="vLLM has no tree drafting (removed in 0.21)",
    per_position_counters=True,
    optional_per_request_metrics=True,
    silent_without_steps=False,
    counts_tail_past_eos=True,
    steps_are_drafted_only=True,
    no_metrics_fix=(
        "start vLLM (>= 0.29) with --per-request-spec-decode-metrics summary (or detailed, which adds "
        "per-step traces) and a --speculative-config, or an older vLLM with a --speculative-config "
        "(alcheck then differences its /metrics counters)"
    ),
    per_step_fix="vLLM gives them with --per-request-spec-decode-metrics detailed",
)
SGLANG = EngineEntry(
    name="sglang",
    title="SGLang",
    what="an SGLang server (sglang.launch_server)",
    client="alcheck.backends.engines.sglang:SglangDialect",
    routes="alcheck.serve.dialect_sglang:make_router",
    trees=True,
    no_trees="",
    per_position_counters=False,
    optional_per_request_metrics=False,
    silent_without_steps=True,  # 0.5.23 leaves the keys out of meta_info
    counts_tail_past_eos=None,
    steps_are_drafted_only=False,  # its NGRAM always drafts (zero-padded): every step is counted
    no_metrics_fix=(
        "start SGLang with a speculative algorithm (--speculative-algorithm EAGLE or EAGLE3 "
        "and --speculative-draft-model-path), version 0.5.15 or later for per-request histograms"
    ),
    per_step_fix="",
)

ENGINES = {entry.name: entry for entry in (VLLM, SGLANG)}
ENGINE_NAMES = tuple(ENGINES)  # what --engine and --dialect take, in this order
TREE_ENGINES = tuple(entry.name for entry in ENGINES.values() if entry.trees)


def get_engine(name: str, flag: str = "--engine") -> EngineEntry:
    if name not in ENGINES:
        raise AlcheckError(f"{flag} {name}: use one of {', '.join(ENGINE_NAMES)}")
    return ENGINES[name]


def engine_named(name) -> EngineEntry | None:
    """The entry a recorded engine field names (run.json's, another tool's), or None: none or
    an engine alcheck lacks."""
    return ENGINES.get(name) if isinstance(name, str) else None


def _load(target: str):
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def client_dialect(name: str):
    """The client's dialect class for an engine (backends/engines/vllm.py, sglang.py)."""
    return _load(get_engine(name).client)


def served_routes(name: str):
    """`alcheck serve`'s router factory for a dialect (serve/dialect_vllm.py, dialect_sglang.py)."""
    return _load(get_engine(name, "--dialect").routes)
