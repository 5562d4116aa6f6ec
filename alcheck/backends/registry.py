"""The table of backends, and the one place a run's backend is chosen and built.

Entries are "module:Class" strings loaded on first use, so a run against a server never imports
the built-in runner (or torch). Worker processes and tensor-parallel ranks build theirs here too,
by name, from the parent's worker_state().
"""

from __future__ import annotations

import importlib
from pathlib import Path

BACKENDS = {
    "builtin": "alcheck.backends.builtin:BuiltinBackend",  # alcheck's own runner on the pair's checkpoints
    "engine": "alcheck.backends.engine_client:EngineBackend",  # a running vLLM or SGLang server, over HTTP
    "engines": "alcheck.backends.engine_fleet:EngineFleet",  # several alike servers, one per node
}


def backend_name(cfg) -> str:
    """--engine vllm|sglang measures a server (several --endpoint: the requests spread over them);
    otherwise the built-in runner decodes."""
    if not cfg.engine:
        return "builtin"
    return "engines" if len(cfg.endpoints) > 1 else "engine"


def backend_class(name: str):
    module, attr = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def make_backend(cfg, target_dir: Path, target_raw: dict, tokenizer, previous: dict | None = None):
    """The run's backend, checked but not loaded (see Backend.prepare)."""
    return backend_class(backend_name(cfg)).prepare(
        cfg, target_dir, target_raw, tokenizer, dict(previous or {})
    )


def worker_backend(name: str, cfg, state: dict, device: str, tp=None, tokenizer=None):
    """The same backend inside a worker process or a tensor-parallel rank."""
    return backend_class(name).for_worker(cfg, state, device, tp, tokenizer)
