"""The block pool: owns every KV block id, the FIFO free queue and the null block.

Plain Python, no torch. A block id indexes the `num_blocks` axis of every KV tensor (target and
draft layers alike); the pool only tracks which ids are free.

The null block: a block table is a zero-initialised tensor row, so an entry the manager never set
reads as block 0. Reserving block 0 (never handing it out) means such a stray read or write lands
in a block no request owns instead of in another request's KV. `reserve_null_block=False`
makes block 0 an ordinary block, which reproduces the historical EAGLE bug (vLLM PR #16370):
draft positions past the allocated blocks silently hit whoever owns block 0.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterable

NULL_BLOCK_ID = 0


def check_count(name: str, value: int) -> int:
    """value as a plain int >= 0 (bools and non-integers refused), else ValueError naming it."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


class BlockPool:
    """Block ids 0..num_blocks-1 and a FIFO queue of the free ones.

    `allocate` pops from the front of the queue, `free` appends to the back, so a freed block
    is reused only after every block that was already free.
    """

    def __init__(self, num_blocks: int, reserve_null_block: bool = True) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int):
            raise ValueError(f"num_blocks must be an int, got {num_blocks!r}")
        min_blocks = 2 if reserve_null_block else 1
        if num_blocks < min_blocks:
            why = " (block 0 is the reserved null block)" if reserve_null_block else ""
            raise ValueError(f"num_blocks must be >= {min_blocks}{why}, got {num_blocks}")
        self.num_blocks = num_blocks
        self.reserve_null_block = reserve_null_block
        self.null_block_id: int | None = NULL_BLOCK_ID if reserve_null_block else None
        first = 1 if reserve_null_block else 0
        self._free_queue: deque[int] = deque(range(first, num_blocks))
        self._is_free = [False] * num_blocks
        for block_id in self._free_queue:
            self._is_free[block_id] = True

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.num_blocks - (1 if self.reserve_null_block else 0)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_queue)

    def free_block_ids(self) -> list[int]:
        """The free queue front to back (the order `allocate` hands blocks out)."""
        return list(self._free_queue)

    def allocate(self, n: int) -> list[int] | None:
        """Take `n` blocks from the front of the free queue; None (and no change) if short."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"number of blocks to allocate must be an int >= 0, got {n!r}")
        if n > len(self._free_queue):
            return None
        block_ids = [self._free_queue.popleft() for _ in range(n)]
        for block_id in block_ids:
            self._is_free[block_id] = False
        return block_ids

    def free(self, block_ids: Iterable[int]) -> None:
        """Append blocks to the back of the free queue, in the given order.

        All-or-nothing: the null block, an unknown id, a block that is already free or an id
        listed twice raises ValueError before anything is returned to the queue.
        """
        block_ids = [self._check_id(block_id) for block_id in block_ids]
        seen: set[int] = set()
        for block_id in block_ids:
            if block_id == self.null_block_id:
                raise ValueError(f"cannot free the null block {block_id}: it is never allocated")
            if self._is_free[block_id] or block_id in seen:
                raise ValueError(f"double free of block {block_id}")
            seen.add(block_id)
        for block_id in block_ids:
            self._is_free[block_id] = True
            self._free_queue.append(block_id)

    def _check_id(self, block_id: int) -> int:
        block_id = check_count("block id", block_id)
        if block_id >= self.num_blocks:
            raise ValueError(f"block id {block_id} out of range 0..{self.num_blocks - 1}")
        return block_id
