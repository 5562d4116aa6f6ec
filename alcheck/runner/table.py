"""The table of runners: the only module that spells a runner's name.

All share one constructor shape, `Runner(target, proposer, eos_token_ids, RunnerConfig, engine=None)`,
and one `generate(prompts, max_tokens, progress=None) -> list[GenerationResult]`; `slot_violations` is
the audit's count (None when not audited). `engine` (runner/engine.py) is the loaded pair's
long-lived KV pool and buffers, which a backend passes to every runner it builds. A new runner (a
graph-captured one, say) is one file and
one line here. Importing this module is cheap (no torch): the run config reads the names and traits.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerEntry:
    path: str  # "module:Class"
    paged_kv: bool  # KV in blocks with a block table: --no-kv-lookahead and --audit-slots mean something
    tensor_parallel: bool  # runs on tensor-parallel ranks
    description: str
    host_slots: bool = (
        True  # KV slots computed on the host per forward: --audit-slots and --no-kv-lookahead work
    )


RUNNERS = {
    "paged": RunnerEntry(
        "alcheck.runner.paged:PagedRunner",
        paged_kv=True,
        tensor_parallel=True,
        description="the engine: batched, paged KV with lookahead slots, preemption",
    ),
    "contiguous": RunnerEntry(
        "alcheck.runner.contiguous:ContiguousRunner",
        paged_kv=False,
        tensor_parallel=False,
        description="the plain reference runner: one request at a time, contiguous KV",
    ),
    "static": RunnerEntry(
        "alcheck.runner.static.runner:StaticRunner",
        paged_kv=True,
        tensor_parallel=True,
        description="the paged runner with a device-resident step of fixed shapes (CUDA graphs on a GPU)",
        host_slots=False,
    ),
}
RUNNER_NAMES = tuple(RUNNERS)
DEFAULT_RUNNER = "paged"


def runner_class(name: str):
    module, attr = RUNNERS[name].path.split(":")
    return getattr(importlib.import_module(module), attr)
