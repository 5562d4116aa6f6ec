"""The seam between the sweep and whatever decodes: a Backend turns prompts into per-request counts.

The sweep (alcheck.sweep) builds the prompts from the protocol and writes the rows; a backend only
answers "decode these token-id prompts at K drafts per step and say, per request, what came out
and how many drafts each verification step accepted". The built-in runner (backends.builtin) and
a running vLLM / SGLang server (backends.engine) are the two implementations; make_backend picks
one from the config, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

# on_progress(finished_requests, generated_tokens_so_far): the live display's hook
Progress = Callable[[int, int], None] | None


@dataclass(slots=True)
class RequestCounts:
    """One request's outcome in the runner's terms (alcheck.runner.request.GenerationResult's fields).

    steps: verification steps (the prefill token is not one); accepted: drafts accepted over them;
    accepted_per_pos[i]: steps that accepted more than i drafts. output_ids may be None when the
    server returns only text (then `text` is the answer the next turn sees).
    """

    prompt_tokens: int
    output_ids: list[int] | None
    steps: int
    drafted: int
    accepted: int
    accepted_per_pos: list[int]
    finish_reason: str = ""
    num_output_tokens: int | None = None  # when output_ids is None
    text: str | None = None

    @property
    def generated_tokens(self) -> int:
        return len(self.output_ids) if self.output_ids is not None else int(self.num_output_tokens or 0)


@dataclass
class BackendOutput:
    results: list  # RequestCounts or GenerationResult, one per prompt, in prompt order
    slot_violations: int | None = None  # KV writes outside a request's blocks (--audit-slots), built-in only


class Backend(Protocol):
    eos_token_ids: list[int]
    previous: dict  # on --resume, the environment run.json recorded (an engine refuses another server)

    def load(self) -> None:
        """The heavy part (weights, a server connection); prepare-time checks happen before."""

    def describe(self) -> dict:
        """What run.json records under `environment`."""

    def use_k(self, k: int) -> None:
        """Get ready to decode at K before a cell's clock starts (--engine-cmd starts K's server here)."""

    def generate(self, prompts: list[list[int]], k: int, seed: int, on_progress: Progress = None) -> BackendOutput:
        ...

    def target_only(self, prompts: list[list[int]]) -> list[list[int]]:
        """Target-only greedy outputs (--check-lossless's oracle)."""

    def close(self) -> None:
        ...


def make_backend(cfg, target_dir: Path, target_config: dict, tokenizer, previous: dict | None = None) -> "Backend":
    """The backend for this config: the built-in runner, or a client of a running engine.

    Cheap checks (the pair's configs, the devices) run here; weights and connections wait for load().
    previous: a resumed run's recorded environment (an engine refuses another server for a K it measured).
    """
    if getattr(cfg, "engine", None):
        from alcheck.backends.engine import EngineBackend

        backend = EngineBackend(cfg, target_dir, target_config, tokenizer)
        backend.previous = dict(previous or {})
        try:
            backend.check()  # a server that is down, of another kind or another K fails here, in one line
        except BaseException:
            backend.close()
            raise
        return backend
    from alcheck.backends.builtin import BuiltinBackend

    backend = BuiltinBackend.prepare(cfg, target_dir, target_config)
    backend.previous = dict(previous or {})
    return backend
