"""One long-lived engine per loaded pair: what outlives a generate() call.

A runner is cheap to build (settings, a seeded generator, a KV manager in plain Python); what is
not is the device memory behind it: the KV pool, on a GPU the warm-up that sizes it from free
memory, and the static runner's per-bucket buffers and CUDA graphs. The backend builds one Engine
when it loads the pair and hands it to every runner it makes (each cell, each turn, the
target-only passes), so those costs are paid once per process instead of once per call.

Results do not change: each generate() still makes a fresh KVCacheManager over exactly the number
of blocks a fresh runner would have chosen, and re-seeds its generator. The pool tensor may hold
more blocks than that (an earlier call needed them); the manager never hands them out. Blocks
are not zeroed between calls: a request reads only positions written during its own call, and
the masked rest contribute exact zeros, as blocks reused within one call always have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from alcheck.runner.prompt_cache import PromptCache


@dataclass
class MemoryBudget:
    """A GPU measurement (runner/kv_budget.py), kept for reuse while no larger warm-up is needed."""

    free_bytes: int  # free device memory with no pool held, after the warm-up
    total_bytes: int
    activation_peak_bytes: int
    utilization: float
    shape: object  # kv_budget.WarmShape: the largest forwards the warm-up ran

    @property
    def pool_bytes(self) -> int:
        """Bytes every pool together may hold (vLLM's arithmetic; kv_budget.pool_blocks)."""
        return max(
            0,
            int(self.utilization * self.total_bytes)
            - (self.total_bytes - self.free_bytes)
            - self.activation_peak_bytes,
        )


@dataclass
class Engine:
    """The KV pools (one tensor per layer group: "target", "draft"), the GPU memory budget that
    sized them, and long-lived state a runner keeps here (static buffers, graphs: `state`)."""

    pools: dict[str, torch.Tensor] = field(default_factory=dict)
    budget: MemoryBudget | None = None
    state: dict = field(default_factory=dict)
    prompts: PromptCache = field(default_factory=PromptCache)  # the CPU runner's prefills, kept
    extends: PromptCache = field(default_factory=PromptCache)  # and its heads' step 0 over them
    warm_ups: int = 0  # GPU warm-ups run (tests and gpu-check count them)
    allocations: int = 0  # pool tensors allocated

    def bind(self, name: str, layers: list, num_blocks: int, block_size: int, dtype, device) -> torch.Tensor:
        """A pool of at least num_blocks blocks for `layers`, its views bound to each layer:
        [2, layers, capacity, block_size, kv_heads, head_dim]. Reused when it is large enough;
        a pool that must grow grows by at least a quarter, so a sweep's slowly growing calls
        (larger K, longer later turns) reallocate a few times, not every time."""
        first = layers[0]
        shape = (2, len(layers), num_blocks, block_size, first.num_kv_heads, first.head_dim)
        pool = self.pools.get(name)
        if pool is None or not _fits(pool, shape, dtype, device):
            grown = (
                num_blocks
                if pool is None or not _fits(pool, shape[:2] + (0,) + shape[3:], dtype, device)
                else max(num_blocks, pool.shape[2] + pool.shape[2] // 4)
            )
            self.pools.pop(name, None)
            del pool
            capacity = self._capacity(shape, grown, dtype)
            pool = torch.zeros(shape[:2] + (capacity,) + shape[3:], dtype=dtype, device=device)
            self.pools[name] = pool
            self.allocations += 1
        for i, layer in enumerate(layers):
            layer.k_cache, layer.v_cache = pool[0, i], pool[1, i]
        return pool

    def release(self) -> None:
        """Let every pool go (before a GPU warm-up measures free memory)."""
        self.pools.clear()

    def _capacity(self, shape: tuple, wanted: int, dtype) -> int:
        """Blocks to allocate: `wanted`, within what a budgeted device leaves beside the other
        pools; when even shape[2] does not fit beside them, they are let go (rebuilt when next
        needed), since the budget was measured for one call's pools."""
        if self.budget is None:
            return wanted
        per_block = _numel(shape) // shape[2] * torch.empty((), dtype=dtype).element_size()
        held = sum(p.numel() * p.element_size() for p in self.pools.values())
        room = (self.budget.pool_bytes - held) // per_block
        if room < shape[2]:
            self.pools.clear()
            room = self.budget.pool_bytes // per_block
        return max(shape[2], min(wanted, room))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _fits(pool: torch.Tensor, shape: tuple, dtype, device) -> bool:
    return (
        pool.dtype == dtype
        and pool.device == torch.device(device)
        and pool.shape[:2] == shape[:2]
        and pool.shape[3:] == shape[3:]
        and pool.shape[2] >= shape[2]
    )
