"""SlotAuditor: counts KV writes that land outside the writing request's blocks. No torch.

The runner reports each KV write (target verify, draft steps) with the slot mapping it used and
the blocks the request owns; any slot whose block is not owned is a silent corruption of another
request's KV (or of the null block). `--audit-slots` reports the total per run cell.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from alcheck.options import is_count

PADDING_SLOT = -1


@dataclass(frozen=True, slots=True)
class SlotViolation:
    request_id: Hashable
    slot: int
    block: int
    layer: str

    def __str__(self) -> str:
        where = f"slot {self.slot} (block {self.block})"
        return f"request {self.request_id!r} wrote {self.layer} KV at {where}"


class SlotAuditor:
    """Accumulates out-of-ownership KV writes: `violations` total, `by_layer`, first examples."""

    def __init__(self, block_size: int, max_examples: int = 5) -> None:
        if not is_count(block_size):
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        if max_examples < 0:
            raise ValueError(f"max_examples must be >= 0, got {max_examples}")
        self.block_size = block_size
        self.max_examples = max_examples
        self.violations = 0
        self.num_checked = 0
        self.by_layer: dict[str, int] = {}
        self.examples: list[SlotViolation] = []

    def check(
        self,
        request_id: Hashable,
        slots: Iterable[int],
        owned_blocks: Iterable[int],
        layer: str,
    ) -> int:
        """Count the slots (padding -1 skipped) whose block is not in `owned_blocks`."""
        owned = set(owned_blocks)
        bad = 0
        for slot in slots:
            slot = int(slot)
            if slot == PADDING_SLOT:
                continue
            if slot < 0:
                raise ValueError(f"slot {slot} is negative and not the padding slot -1")
            self.num_checked += 1
            block = slot // self.block_size
            if block in owned:
                continue
            bad += 1
            if len(self.examples) < self.max_examples:
                self.examples.append(SlotViolation(request_id, slot, block, layer))
        if bad:
            self.violations += bad
            self.by_layer[layer] = self.by_layer.get(layer, 0) + bad
        return bad

    @property
    def ok(self) -> bool:
        return self.violations == 0

    def summary(self) -> str:
        """One line for an error message or log."""
        if self.ok:
            return f"no slot violations in {self.num_checked} KV writes"
        layers = ", ".join(f"{layer}: {n}" for layer, n in sorted(self.by_layer.items()))
        first = "; ".join(str(e) for e in self.examples)
        return f"{self.violations} KV writes outside the request's blocks ({layers}); first: {first}"

    def reset(self) -> None:
        self.violations = 0
        self.num_checked = 0
        self.by_layer = {}
        self.examples = []
