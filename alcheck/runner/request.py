"""Per-request state and per-request acceptance counters (no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Request:
    request_id: int
    token_ids: list[int]  # prompt + committed output
    num_prompt_tokens: int
    max_tokens: int
    num_computed_tokens: int = 0  # positions whose target KV is final
    draft_tokens: list[int] = field(default_factory=list)
    draft_probs: object = None  # [K, vocab] tensor when sampling with temperature
    draft_parents: list[int] = field(default_factory=list)  # trees: parent node of each draft (0 = root)
    draft_depths: list[int] = field(
        default_factory=list
    )  # trees: depth of each draft (1 = a child of the root)
    steps: int = 0
    drafted: int = 0  # draft tokens verified, over all steps
    drafted_steps: int = 0  # steps that verified at least one draft token (vLLM's num_drafts)
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [i] = steps with >= i+1 accepted
    per_step_accepted: list[int] = field(default_factory=list)  # each step's a, in order (traces.csv)
    per_step_drafted: list[int] = field(default_factory=list)  # each step's drafts (0: a plain step)
    preemptions: int = 0
    finish_reason: str | None = None

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def commit(self, new_tokens: list[int], eos_ids: frozenset[int]) -> int:
        """Append emitted tokens, stopping at EOS (kept) or max_tokens. Returns how many were kept."""
        kept = 0
        for token in new_tokens:
            self.token_ids.append(token)
            kept += 1
            if token in eos_ids:
                self.finish_reason = "eos"
                break
            if self.num_output_tokens >= self.max_tokens:
                self.finish_reason = "length"
                break
        return kept

    def record_step(self, num_accepted: int, num_drafted: int):
        # counted before truncation at EOS / max_tokens: the step emitted 1 + num_accepted.
        # num_drafted: the drafts it verified (K for a head; 0..K for a model-free proposer,
        # where 0 makes it a plain decoding step)
        self.steps += 1
        self.drafted += num_drafted
        self.drafted_steps += num_drafted > 0
        self.accepted += num_accepted
        self.per_step_accepted.append(num_accepted)  # a preemption recomputes KV, never steps: kept
        self.per_step_drafted.append(num_drafted)
        for i in range(num_accepted):
            self.accepted_per_pos[i] += 1

    def result(self) -> GenerationResult:
        """What the runner returns for this request."""
        return GenerationResult(
            self.request_id,
            self.num_prompt_tokens,
            self.output_ids,
            self.steps,
            self.drafted,
            self.accepted,
            list(self.accepted_per_pos),
            self.finish_reason,
            self.preemptions,
            list(self.per_step_accepted),
            self.drafted_steps,
            list(self.per_step_drafted),
        )


@dataclass(slots=True)
class GenerationResult:
    request_id: int
    prompt_tokens: int
    output_ids: list[int]
    steps: int
    drafted: int
    accepted: int
    accepted_per_pos: list[int]
    finish_reason: str
    preemptions: int
    per_step_accepted: list[int] | None = None  # each verification step's accepted drafts, in step order
    drafted_steps: int | None = None  # steps that verified >= 1 draft (a head drafts every step: = steps)
    per_step_drafted: list[int] | None = None  # each step's drafts verified, in step order (0: plain)

    @property
    def acceptance_length(self) -> float:
        return (self.steps + self.accepted) / self.steps if self.steps else float("nan")
