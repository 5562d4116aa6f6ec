"""The draft context: what a proposer may ask of whatever runs it.

The paged runner, the contiguous reference runner and the KV budget's warm-up each implement it;
a proposer (runner/proposers/) sees nothing else of them. Every draft write goes through
`attn_batch`, so it lands in the request's own KV slots (and is audited with --audit-slots).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only
    import torch

    from alcheck.models.attention import AttnBatch


class DraftContext(Protocol):
    device: torch.device
    target: object  # the target model: embed(ids) -> embeddings, compute_logits(hidden) -> logits

    def attn_batch(
        self,
        reqs: list,
        starts: list[int],
        lens: list[int],
        layer: str,
        rope_positions: list[int] | None = None,
        tree_masks: torch.Tensor | None = None,
    ) -> AttnBatch:
        """Metadata for one forward of `layer` ("target" or "draft"): request b feeds lens[b]
        tokens at slot positions starts[b]..; trees also pass RoPE positions and masks
        [B, n, earlier scratch + n] over each request's last keys."""
        ...

    def draft_sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A chain's draft token per row, and its distribution when drafts are sampled (else None)."""
        ...
