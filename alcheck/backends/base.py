"""The seam between the sweep and whatever decodes: a Backend turns prompts into per-request counts.

The cell loop (alcheck/sweep/cells.py) builds the prompts from the protocol and writes the rows; a backend
only answers "decode these token-id prompts at K drafts per step and say, per request, what came
out and how many drafts each verification step accepted". Implementations live in their own
modules and are built through backends/registry.py; this module holds the protocol and its types
only, and imports none of them (as vLLM's v1/core/sched/interface.py does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# progress(finished_requests, generated_tokens_so_far): the live display's hook
Progress = Callable[[int, int], None] | None


@dataclass(slots=True)
class RequestCounts:
    """One request's outcome: the one record every backend returns.

    steps: verification steps (the prefill token is not one), also those that proposed nothing;
    drafted_steps: the steps that proposed at least one token (None: every step, as for EAGLE);
    drafted: draft tokens proposed (steps * K for a chain); accepted: drafts accepted over them;
    accepted_per_pos[i]: steps that accepted more than i drafts. output_ids may
    be None when a server returns only text (then `text` is the answer the next turn sees, and
    num_output_tokens its length).
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
    per_step_accepted: list[int] | None = (
        None  # each verification step's accepted drafts, in order (None: totals only)
    )
    drafted_steps: int | None = None  # None: every step drafted (EAGLE); see steps_drafted
    served_by: str | None = None  # the server that answered, when requests are spread over several

    @property
    def steps_drafted(self) -> int:
        """Verification steps that proposed at least one token (questions.csv's drafted_steps)."""
        return self.steps if self.drafted_steps is None else self.drafted_steps

    @property
    def generated_tokens(self) -> int:
        return len(self.output_ids) if self.output_ids is not None else int(self.num_output_tokens or 0)


@dataclass
class BackendOutput:
    results: list[RequestCounts]  # one per prompt, in prompt order
    slot_violations: int | None = None  # KV writes outside a request's blocks (--audit-slots), built-in only


class Backend(Protocol):
    """Built by backends/registry.py: `prepare` in the run's own process, `for_worker` inside a
    --devices worker or a tensor-parallel rank (from the parent's `worker_state()`)."""

    eos_token_ids: list[int]
    devices: list[str]  # where it decodes: one per worker or rank, or one

    @classmethod
    def prepare(cls, cfg, target_dir: Path, target_raw: dict, tokenizer, previous: dict) -> Backend:
        """Called once, before anything is written: every check that needs no weights (the pair's
        configs and devices, or the server's kind, K and vocabulary). `previous`: a resumed run's
        recorded environment (an engine refuses another server for a K it measured)."""

    @classmethod
    def for_worker(cls, cfg, state: dict, device: str, tp=None, tokenizer=None) -> Backend:
        """Called in a worker process or tensor-parallel rank, from the parent's worker_state();
        tokenizer: the target's, already loaded in this process (tokenizers are not pickled)."""

    def checkpoints(self) -> dict[str, Path]:
        """The checkpoint folders this backend loads besides the target ({"draft": folder}; a
        server's are its own): a resumed run fingerprints them and refuses others."""

    def runtime(self) -> dict[str, str]:
        """What decodes, as resolved before anything loads: {"device": "cpu" or "cuda", "dtype",
        "attention"} ({} for a server, whose are its own). A resumed run refuses others."""

    def check_positions(self, positions: int) -> None:
        """Called once before anything loads, with the most positions any generation of the run
        needs: refuse (one line) what this backend cannot compute exactly there (a sliding-window
        target past its window)."""

    def worker_state(self) -> dict:
        """Plain data a worker needs to build the same backend on its device (it must pickle)."""

    def load(self) -> None:
        """Called once before the first cell: the heavy part (weights, or nothing for a server)."""

    def describe(self) -> dict:
        """What run.json records under `environment`; called after load and after each cell."""

    def use_k(self, k: int) -> None:
        """Called before each cell's clock starts: get ready to decode at K (--engine-cmd starts K's
        server)."""

    def generate(
        self, prompts: list[list[int]], k: int, seed: int, progress: Progress = None
    ) -> BackendOutput:
        """Decode every prompt at K drafts per step; `seed` seeds sampling at temperature > 0."""

    def target_only(self, prompts: list[list[int]]) -> list[list[int]]:
        """Target-only greedy outputs (--check-lossless's oracle)."""

    def close(self) -> None:
        """Called once at the end, also on error: stop servers, free what was loaded."""
