"""KVCacheManager: the block bookkeeping the runner sees. Plain Python, no torch.

One block table per request, shared by the target layers and the EAGLE draft layers (each has
its own KV tensors, indexed by the same slots): slot = block_table[pos // block_size] *
block_size + pos % block_size.

Lookahead (EAGLE-NOTES section 4): a verification step with K drafts runs the target on 1 + K
tokens at positions n-1 .. n-1+K, then the draft re-runs the a + 1 committed positions and
proposes K-1 more, writing draft KV up to position n-1+a+K-1. So one step calls
`allocate_slots(request, num_new_tokens=1 + K, num_lookahead_tokens=K)`; with lookahead 0 the
draft writes past the allocated blocks into whatever block-table entry 0 points at.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Protocol

from alcheck.kv.block_pool import NULL_BLOCK_ID, BlockPool, check_count
from alcheck.options import is_count


class RequestLike(Protocol):
    request_id: Hashable
    num_computed_tokens: int  # positions whose KV is final


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Hands blocks to requests and takes them back.

    - `allocate_slots` only ever grows a request's blocks. Rolling back rejected draft tokens
      needs no call here: the runner lowers `num_computed_tokens`, the blocks stay with the
      request, and the next step overwrites the stale slots in place.
    - Preemption or finish: `free(request)`; a preempted request is re-admitted from
      `num_computed_tokens = 0`.
    - `num_preallocate_tokens` > 0 reproduces vLLM 0.8.4's preallocation (removed in 0.8.5):
      whenever new blocks are needed, also take
      `max(0, cdiv(num_preallocate_tokens, block_size) - num_lookahead_tokens // block_size)`
      extra blocks, capped by the free blocks. Off by default.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        reserve_null_block: bool = True,
        num_preallocate_tokens: int = 0,
    ) -> None:
        if not is_count(block_size):
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        num_preallocate_tokens = check_count("num_preallocate_tokens", num_preallocate_tokens)
        self.block_pool = BlockPool(num_blocks, reserve_null_block=reserve_null_block)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_preallocate_tokens = num_preallocate_tokens
        self.num_preallocate_blocks = cdiv(num_preallocate_tokens, block_size)
        self._req_to_blocks: dict[Hashable, list[int]] = {}
        self._block_to_req: dict[int, Hashable] = {}

    # -- queries ---------------------------------------------------------------------------

    @property
    def null_block_id(self) -> int | None:
        return self.block_pool.null_block_id

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.block_pool.num_usable_blocks

    @property
    def usage(self) -> float:
        """Fraction of the usable blocks (null block excluded) held by requests."""
        return 1.0 - self.num_free_blocks / self.num_usable_blocks

    def request_ids(self) -> list[Hashable]:
        """Requests holding blocks, in admission order."""
        return list(self._req_to_blocks)

    def block_ids(self, request_id: Hashable) -> list[int]:
        """The request's blocks in position order (a copy; [] for an unknown request)."""
        return list(self._req_to_blocks.get(request_id, ()))

    def owner(self, block_id: int) -> Hashable | None:
        """The request holding `block_id`, or None when it is free (or the null block)."""
        return self._block_to_req.get(block_id)

    def num_blocks_needed(self, num_tokens: int) -> int:
        return cdiv(check_count("num_tokens", num_tokens), self.block_size)

    def block_table(self, request_id: Hashable, width: int | None = None) -> list[int]:
        """The request's block-table row, padded to `width` with block 0.

        The padding mirrors the runner's zero-initialised block-table tensor: an entry never
        set reads as block 0 (the null block when it is reserved).
        """
        row = self.block_ids(request_id)
        if width is None:
            return row
        width = check_count("width", width)
        if width < len(row):
            raise ValueError(f"block table width {width} < {len(row)} blocks held by {request_id!r}")
        return row + [NULL_BLOCK_ID] * (width - len(row))

    def slot_mapping(self, request_id: Hashable, positions: Iterable[int]) -> list[int]:
        """Slots for token positions; -1 (padding) stays -1.

        Strict: a position past the request's blocks raises ValueError instead of reading an
        unset block-table entry (which is how the lookahead bug corrupted block 0).
        """
        row = self._req_to_blocks.get(request_id, [])
        slots = []
        for pos in positions:
            if pos == -1:
                slots.append(-1)
                continue
            pos = check_count("position", pos)
            index = pos // self.block_size
            if index >= len(row):
                raise ValueError(
                    f"position {pos} of request {request_id!r} needs block index {index} but it "
                    f"holds {len(row)} blocks: allocate lookahead slots before writing draft KV"
                )
            slots.append(row[index] * self.block_size + pos % self.block_size)
        return slots

    # -- allocation ------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: RequestLike,
        num_new_tokens: int,
        num_lookahead_tokens: int = 0,
    ) -> list[int] | None:
        """Make the request hold blocks for its computed + new + lookahead tokens.

        required = cdiv(num_computed_tokens + num_new_tokens + num_lookahead_tokens, block_size).
        Returns the newly allocated block ids ([] when the held blocks suffice), or None when
        the pool has fewer free blocks than needed, in which case nothing changes.
        """
        num_new_tokens = check_count("num_new_tokens", num_new_tokens)
        num_lookahead_tokens = check_count("num_lookahead_tokens", num_lookahead_tokens)
        num_computed = check_count("num_computed_tokens", request.num_computed_tokens)
        request_id = request.request_id
        held = self._req_to_blocks.get(request_id, [])

        total_tokens = num_computed + num_new_tokens + num_lookahead_tokens
        num_new_blocks = cdiv(total_tokens, self.block_size) - len(held)
        if num_new_blocks <= 0:
            return []
        num_free = self.block_pool.num_free_blocks
        if num_new_blocks > num_free:
            return None
        # vLLM 0.8.4: preallocation shrinks by whole lookahead blocks (floor, while the
        # preallocation itself is a ceil), and is only taken when blocks are short anyway
        num_extra = max(0, self.num_preallocate_blocks - num_lookahead_tokens // self.block_size)
        new_blocks = self.block_pool.allocate(min(num_new_blocks + num_extra, num_free))
        assert new_blocks is not None  # checked against num_free above
        self._req_to_blocks.setdefault(request_id, []).extend(new_blocks)
        for block_id in new_blocks:
            self._block_to_req[block_id] = request_id
        return new_blocks

    def free(self, request: RequestLike) -> None:
        """Return all of the request's blocks to the pool, last-allocated first.

        Same order as vLLM: the request's tail blocks enter the FIFO free queue first, so
        they are the first of its blocks to be handed out again and its head blocks the
        last. Unknown request: no-op.
        """
        block_ids = self._req_to_blocks.pop(request.request_id, [])
        for block_id in block_ids:
            del self._block_to_req[block_id]
        self.block_pool.free(reversed(block_ids))
