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
    draft_sampling: str = "onehot"  # temperature > 0: "onehot" greedy drafts (vLLM, EAGLE repo) or "sampled"
    seed: int = 0
    audit_slots: bool = False
    device: str = "cpu"
    gpu_memory_utilization: float = 0.9  # share of a GPU's memory for weights, activations and the KV pool

    def __post_init__(self):
        if self.num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens must be >= 0, got {self.num_spec_tokens}")
        if self.block_size < 1 or self.max_batch_size < 1:
            raise ValueError("block_size and max_batch_size must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.draft_sampling not in ("onehot", "sampled"):
            raise ValueError(f"draft_sampling must be 'onehot' or 'sampled', got {self.draft_sampling!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    @property
    def num_lookahead_tokens(self) -> int:
        return self.num_spec_tokens if self.kv_lookahead else 0
