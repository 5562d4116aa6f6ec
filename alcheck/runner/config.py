"""Runner settings: one dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RunnerConfig:
    num_spec_tokens: int = 3  # K = draft steps = the longest draft path; 0 = target-only decoding
    topk: int = 1  # branching per expanded tree node (SGLang --speculative-eagle-topk); 1 = a chain
    num_draft_tokens: int | None = None  # T: tokens verified per step, root included; None = K+1 (the chain)
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
        check_tree_shape(self.num_spec_tokens, self.topk, self.num_draft_tokens)
        if self.is_tree and self.temperature > 0 and self.draft_sampling != "onehot":
            raise ValueError("tree drafting at temperature > 0 uses the EAGLE repo's rule (greedy top-k drafts, "
                             "accepted with p(x)): draft_sampling must be 'onehot'")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    @property
    def is_tree(self) -> bool:
        """Tree drafting (runner/tree.py); topk 1 with T = K+1 is the chain and runs the chain code."""
        return self.num_spec_tokens > 0 and self.topk > 1

    @property
    def num_verify_tokens(self) -> int:
        """Tokens the target verifies per step: the root plus K chain drafts, or T tree nodes."""
        if self.num_spec_tokens == 0:
            return 1
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.num_spec_tokens + 1

    @property
    def max_lookahead_tokens(self) -> int:
        """Slots past the verified tokens that the draft writes before the next verification.
        Chain: K (the seed-thread fix). Tree: after accepting a <= K drafts the draft re-extends
        over a + 1 positions and its K-1 expansion levels write topk scratch slots each, so the
        last draft write is at most K + (K-1)*topk positions past the verified root."""
        k = self.num_spec_tokens
        return k + (k - 1) * self.topk if self.is_tree else k

    @property
    def num_lookahead_tokens(self) -> int:
        return self.max_lookahead_tokens if self.kv_lookahead else 0


def max_tree_tokens(steps: int, topk: int) -> int:
    """The most tokens a tree of `steps` levels can verify: the root plus the candidate pool
    topk + (steps-1)*topk^2 (EAGLE-2's top-k expansion; TREE-NOTES 1.2)."""
    return 1 + topk + (steps - 1) * topk * topk


def check_tree_shape(steps: int, topk: int, num_draft_tokens: int | None):
    """ValueError for a tree the drafter cannot build (RunConfig turns these into one-line exits)."""
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    if num_draft_tokens is None:
        if topk > 1 and steps > 0:
            raise ValueError("topk > 1 needs num_draft_tokens")
        return
    if steps == 0:
        raise ValueError("num_draft_tokens needs num_spec_tokens >= 1")
    if num_draft_tokens < 2:
        raise ValueError(f"num_draft_tokens must be >= 2 (the root and one draft), got {num_draft_tokens}")
    if topk == 1 and num_draft_tokens != steps + 1:
        raise ValueError(f"topk 1 is the chain: num_draft_tokens must be K+1 = {steps + 1}, got {num_draft_tokens}")
    if num_draft_tokens > max_tree_tokens(steps, topk):
        raise ValueError(f"num_draft_tokens {num_draft_tokens} exceeds the {max_tree_tokens(steps, topk)} tokens "
                         f"a tree of {steps} steps and topk {topk} holds")
