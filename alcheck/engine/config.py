"""Runner settings: one dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RunnerConfig:
    num_spec_tokens: int = 3  # K; 0 = target-only decoding
    block_size: int = 16
    num_blocks: int | None = None  # None: enough for every request at once
    max_batch_size: int = 128
    max_prefill_tokens: int = 16384  # prompt tokens per prefill forward
    kv_lookahead: bool = True  # False reproduces the pre-fix bug (no lookahead slots, no null block)
    temperature: float = 0.0
    seed: int = 0
    audit_slots: bool = False
    device: str = "cpu"

    def __post_init__(self):
        if self.num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens must be >= 0, got {self.num_spec_tokens}")
        if self.block_size < 1 or self.max_batch_size < 1:
            raise ValueError("block_size and max_batch_size must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")

    @property
    def num_lookahead_tokens(self) -> int:
        return self.num_spec_tokens if self.kv_lookahead else 0
