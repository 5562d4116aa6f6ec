"""Load the target (this rank's shard) and the draft head (whole, replicated) on one rank.

The runner, scheduler and KV bookkeeping then run unchanged on every rank with the same inputs
and the same generator seed: the target's embed() and compute_logits() are collectives that
every rank reaches in the same order, and the gathered logits are identical on every rank, so
greedy and sampled choices agree and the ranks never diverge.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from alcheck.models.checkpoint_files import open_checkpoint
from alcheck.models.hub import resolve_checkpoint
from alcheck.models.loading import Target, load_eagle, load_target
from alcheck.tp.group import TPGroup


def load_pair(tp: TPGroup, target_spec: str, draft_spec: str | None, method: str = "eagle",
              dtype=torch.float32, chat_template: str | None = None) -> tuple[Target, torch.nn.Module | None]:
    """(Target whose model is this rank's shard, draft head on tp.device or None)."""
    device = tp.device
    target = load_target(target_spec, dtype, device, chat_template=chat_template, tp=tp)
    if draft_spec is None:
        return target, None
    if method == "eagle3":
        from alcheck.models.eagle3_loading import load_eagle3

        return target, load_eagle3(draft_spec, _full_embedding_view(target, tp, draft_spec), dtype, device)
    return target, load_eagle(draft_spec, target, dtype, device)


def _full_embedding_view(target: Target, tp: TPGroup, draft_spec: str):
    """What load_eagle3 reads of the target: its path, and its full embedding, which it compares
    with a head that ships its own copy. Only then is the split embedding gathered (every rank
    decides the same from the same file, so all reach the collective)."""
    directory = resolve_checkpoint(draft_spec, "draft")
    ships_embedding = any(n.removeprefix("model.") == "embed_tokens.weight"
                          for n in open_checkpoint(directory, "draft").names())
    embedding = target.model.model.embed_tokens
    weight = None
    if ships_embedding:
        weight = tp.all_gather_last(embedding.weight.t().contiguous(), embedding.vocab_size).t()
    inner = SimpleNamespace(model=SimpleNamespace(embed_tokens=SimpleNamespace(weight=weight)), config=target.model.config)
    return SimpleNamespace(path=target.path, model=inner, name=target.name)
