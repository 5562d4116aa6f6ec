"""Runner settings: one dataclass, validated on construction, and the validators every settings
object uses (the run config, serve's config, the KV budget): a tree shape and a memory share are
each checked in one place, with one message.

Torch-free: the run config imports it before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.errors import AlcheckError
from alcheck.options import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_DRAFT_SAMPLING,
    DRAFT_SAMPLING,
    ONEHOT,
    is_count,
    is_tree,
)


class SettingError(AlcheckError, ValueError):
    """A runner setting that cannot work: one line for the CLI (exit 2), a ValueError for code."""


def check_utilization(utilization) -> float:
    """--gpu-memory-utilization: vLLM's meaning, the share of the GPU's memory this run may use."""
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
        raise SettingError(
            f"--gpu-memory-utilization {utilization}: must be in (0, 1], "
            "the share of the GPU's memory this run may use (e.g. 0.9)"
        )
    return float(utilization)


@dataclass(slots=True)
class RunnerConfig:
    num_spec_tokens: int = 3  # K = draft steps = the longest draft path; 0 = target-only decoding
    topk: int = 1  # branching per expanded tree node (SGLang --speculative-eagle-topk); 1 = a chain
    num_draft_tokens: int | None = None  # T: tokens verified per step, root included; None = K+1 (the chain)
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None  # None: enough for every request at once
    max_batch_size: int = 128
    max_prefill_tokens: int = 16384  # prompt tokens per prefill forward
    kv_lookahead: bool = True  # False reproduces the pre-fix bug (no lookahead slots, no null block)
    temperature: float = 0.0
    draft_sampling: str = DEFAULT_DRAFT_SAMPLING  # temperature > 0: onehot (vLLM, EAGLE repo) or sampled
    seed: int = 0
    audit_slots: bool = False
    # CPU: keep each prompt's prefill for later calls on the same engine (runner/prompt_cache.py)
    prompt_cache: bool = True
    device: str = "cpu"
    gpu_memory_utilization: float = 0.9  # share of a GPU's memory for weights, activations and the KV pool
    batch_buckets: tuple[
        int, ...
    ] = ()  # the static runner's padded batch sizes; () = powers of two up to max_batch_size

    def __post_init__(self):
        if self.num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens must be >= 0, got {self.num_spec_tokens}")
        if self.block_size < 1 or self.max_batch_size < 1:
            raise ValueError("block_size and max_batch_size must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.draft_sampling not in DRAFT_SAMPLING:
            raise ValueError(f"draft_sampling must be one of {DRAFT_SAMPLING}, got {self.draft_sampling!r}")
        if self.num_spec_tokens:
            check_tree_shape(
                [self.num_spec_tokens],
                self.topk,
                self.num_draft_tokens,
                self.temperature,
                self.draft_sampling,
            )
        elif self.num_draft_tokens is not None:
            raise SettingError("--num-draft-tokens needs K >= 1 draft steps")
        check_utilization(self.gpu_memory_utilization)
        if not all(is_count(b) for b in self.batch_buckets):
            raise ValueError(f"batch_buckets must be integers >= 1, got {self.batch_buckets}")

    @property
    def is_tree(self) -> bool:
        """Tree drafting (runner/tree.py); topk 1 with T = K+1 is the chain and runs the chain code."""
        return self.num_spec_tokens > 0 and is_tree(self.topk)

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


def check_tree_shape(
    ks: list[int],
    topk,
    num_draft_tokens,
    temperature: float = 0.0,
    draft_sampling: str = DEFAULT_DRAFT_SAMPLING,
) -> None:
    """--topk / --num-draft-tokens against every K (K = draft steps = the longest path): the one
    check of a drafting shape, for `alcheck run`, `alcheck serve` and the runners themselves."""
    t = num_draft_tokens
    if not is_count(topk):
        raise SettingError(f"--topk {topk}: must be an integer >= 1 (1 = chain drafting)")
    if t is None:
        if topk > 1:
            raise SettingError(
                f"--topk {topk} needs --num-draft-tokens T (tokens verified per step, root included, "
                "as SGLang's --speculative-num-draft-tokens): pass e.g. --num-draft-tokens 16"
            )
        return
    if not is_count(t, 2):
        raise SettingError(f"--num-draft-tokens {t}: must be >= 2 (the root plus at least one draft)")
    if topk == 1:
        bad = [k for k in ks if t != k + 1]
        if bad:
            raise SettingError(
                f"--topk 1 is the chain, which verifies K+1 tokens: --num-draft-tokens {t} does not "
                f"fit K={','.join(map(str, bad))}: leave --num-draft-tokens out, or raise --topk"
            )
        return
    bad = [f"K={k} holds {max_tree_tokens(k, topk)}" for k in ks if t > max_tree_tokens(k, topk)]
    if bad:
        raise SettingError(
            f"--num-draft-tokens {t} is more than a tree of --topk {topk} can hold ({'; '.join(bad)}, "
            f"1 + k + (K-1)*k^2): lower --num-draft-tokens, or raise --topk or the K values"
        )
    if temperature > 0 and draft_sampling != ONEHOT:
        raise SettingError(
            "tree drafting at --temperature > 0 uses the EAGLE repo's rule (greedy top-k drafts, "
            "accepted with the target's p(x)): use --draft-sampling onehot"
        )
