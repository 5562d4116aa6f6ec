"""The CPU runner's prompt cache: a prompt's target prefill computed once per loaded pair.

A sweep runs the same prompts in every (K, repeat) cell, and the prefill of 80 MT-Bench prompts is
about a quarter of a CPU cell. On the CPU the runner prefills each fresh prompt in a forward of
its own (as fast there as one batched forward: the prompt rows already fill the matmuls), so a
prompt's prefill is one fixed computation, the same in every cell whatever else is in flight.
Its outputs are kept here, keyed by the prompt's tokens and the target states the proposer reads,
and a later cell copies them instead of computing them again: the KV rows into the request's
newly allocated slots, the prompt's feature rows and its last final-norm row (from which the first
token is sampled afresh, so a seeded generator draws exactly as it would have).

Exact by construction: a hit returns the very tensors the same solo forward produced, and the
per-prompt forward is what runs whether the cache is on or off. (A batched forward is not the
same computation in the last bits: attention over keys padded to the batch's longest prompt sums
in another order. So before the per-prompt prefill a prompt's first rows could differ by 1e-6
with its batch-mates; now they cannot, and a hit needs no such luck.) vLLM's prefix cache does
the same job (its blocks are shared, not copied); bench/bench_vs_vllm.py runs both sides with
theirs on.

The head's step 0 over a fresh prompt (the extend: the prompt's tokens shifted by one, the
target's first token last, with the prompt's feature rows) is kept the same way in a second cache
(Engine.extends, PagedRunner.prefill_extend): each request's extend runs in a forward of its own
on the CPU, and an entry holds its draft K/V rows and its last output row, keyed by the request's
tokens, the extend's inputs, the target states read and the head (two heads never share one). A
sampled first token other than the kept one is simply another key.

Both keys also hold the state of the weights they read (PromptCache.weights_key: each tensor's
identity, storage and version), so a weight replaced or written in place after an entry was kept
(an ablation perturbing a head on a loaded pair, a test) makes its entries miss. A write through
`.data` moves none of them: torch does not count it, for these keys as for the packed linears.

Memory: the entries stay while the pair is loaded, up to CAP_BYTES per cache; past it new prompts
are not kept (earlier ones stay: a sweep's cells repeat the same prompts).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn

CAP_BYTES = 2 << 30


@dataclass
class PromptEntry:
    kv: torch.Tensor | None  # [2, layers, n, kv_heads, head_dim]: the prompt's K/V (None: not kept)
    features: torch.Tensor | None  # [n, F]: what run_model hands the proposer (hidden or aux states)
    last: torch.Tensor  # [1, H]: the last row's output (target: final-norm hidden; extend: the head's)
    owner: object = None  # an extend's head: a hit must come from the very same module

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.kv, self.features, self.last) if t is not None)


class PromptCache:
    def __init__(self, cap_bytes: int = CAP_BYTES):
        self.cap_bytes = cap_bytes
        self.entries: dict[tuple, PromptEntry] = {}
        self.nbytes = 0
        self.hits = self.misses = 0
        self.stamped: dict[int, torch.Tensor] = {}  # every tensor a key names, so no id is reused

    def weights_key(self, module: nn.Module) -> tuple:
        """The module's weights as a key part: each parameter's and buffer's identity, storage and
        version (torch bumps a tensor's version on every in-place write made through it). A head
        that is no torch module (the tests' oracle drafters) has no weights to stamp."""
        if not isinstance(module, nn.Module):
            return ()
        tensors = list(itertools.chain(module.parameters(), module.buffers()))
        for t in tensors:
            self.stamped.setdefault(id(t), t)
        return tuple((id(t), t.data_ptr(), t._version) for t in tensors)

    def get(self, key: tuple) -> PromptEntry | None:
        entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, key: tuple, entry: PromptEntry) -> None:
        if key not in self.entries and self.nbytes + entry.nbytes <= self.cap_bytes:
            self.entries[key] = entry
            self.nbytes += entry.nbytes
