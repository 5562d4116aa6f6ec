"""The refusals every model-free method (n-gram, suffix decoding) shares: the options only a head
takes. One place, so each method states its own reasons and the wording stays the same."""

from __future__ import annotations

from dataclasses import dataclass

from alcheck.errors import AlcheckError


@dataclass(frozen=True)
class ModelFreeWording:
    """How a model-free method explains itself in its refusals."""

    name: str  # the --method value
    source: str  # where its drafts come from: "n-gram drafting copies tokens from the context"
    chain: str  # why it takes no --topk: "n-gram drafting proposes one chain per step (vLLM's rule)"
    drafts: str  # what its drafts are called: "n-gram drafts"


def refuse_head_options(cfg, wording: ModelFreeWording) -> None:
    """--draft (unless an engine runs the method), --topk and --draft-sampling: one line each."""
    if cfg.draft and not getattr(cfg, "engine", None):
        raise AlcheckError(
            f"--draft {cfg.draft} with --method {wording.name}: {wording.source} and needs no "
            "checkpoint: drop --draft"
        )
    if cfg.topk != 1:
        raise AlcheckError(f"--topk {cfg.topk} with --method {wording.name}: {wording.chain}: drop --topk")
    if cfg.draft_sampling != "onehot":
        raise AlcheckError(
            f"--draft-sampling {cfg.draft_sampling} with --method {wording.name}: {wording.drafts} are "
            "copied tokens, not samples (q is one-hot, so acceptance is the onehot rule): "
            "drop --draft-sampling"
        )
