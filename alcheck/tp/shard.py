"""Which slice of each checkpoint tensor a rank loads, and a Checkpoint view that reads only it.

The plan compares two meta-device builds of the same model: the unsplit one (every tensor's
full shape, which strict loading still checks) and this rank's shard. A tensor whose shapes
differ in one dimension is split along it, and the rank takes rows alcheck.tp.group.split_range
gives it there (heads divide evenly; the MLP's intermediate size and the vocabulary may not).
Tensors whose shapes agree (norms, the row-parallel biases) are read whole on every rank.

From safetensors a rank reads only its slice (safe_open's get_slice); a `.bin` file is
memory-mapped whole and narrowed, which is correct but touches more pages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import Checkpoint
from alcheck.models.strict_load import plan_slots
from alcheck.tp.group import TPGroup, split_range


@dataclass(frozen=True)
class Part:
    """Rows [start, stop) along `dim` of a tensor whose full shape is `full_shape`."""

    full_shape: tuple[int, ...]
    dim: int
    start: int
    stop: int


def shard_plan(full: nn.Module, local: nn.Module, tp: TPGroup) -> dict[str, Part]:
    """Checkpoint name -> this rank's Part, for every split tensor (replicated ones are absent)."""
    full_slots, local_slots = plan_slots(full), plan_slots(local)
    if full_slots.keys() != local_slots.keys():
        raise ValueError("the sharded module's parameters do not match the unsplit module's")
    plan = {}
    for name, whole in full_slots.items():
        mine = local_slots[name].shape
        dims = [d for d, (a, b) in enumerate(zip(whole.shape, mine)) if a != b]
        if not dims:
            continue
        if len(dims) > 1:
            raise ValueError(f"{name}: split along more than one dimension")
        dim = dims[0]
        start, stop = split_range(whole.shape[dim], tp.rank, tp.size)
        if stop - start != mine[dim]:
            raise ValueError(
                f"{name}: rank {tp.rank}'s part has {mine[dim]} rows, the split gives {stop - start}"
            )
        plan[name] = Part(whole.shape, dim, start, stop)
    return plan


class _PartReader:
    """A shard reader that hands out this rank's slice of split tensors, after checking the full shape."""

    def __init__(self, reader, plan: dict[str, Part], rename: Callable[[str], str], what: str, file: Path):
        self.reader, self.plan, self.rename, self.what, self.file = reader, plan, rename, what, file

    def names(self) -> list[str]:
        return self.reader.names()

    def get(self, name: str) -> torch.Tensor:
        part = self.plan.get(self.rename(name))
        if part is None:
            return self.reader.get(name)
        shape, tensor = self.reader.get_part(name, part.dim, part.start, part.stop)
        if shape != part.full_shape:
            raise AlcheckError(
                f"{self.what}: tensor {name} in {self.file} has shape "
                f"{shape}, config.json says {part.full_shape}: "
                "config.json and weights disagree"
            )
        return tensor


@dataclass
class ShardedCheckpoint:
    """A Checkpoint whose readers return one rank's slices; strict_load.load_strict takes it as is."""

    checkpoint: Checkpoint
    plan: dict[str, Part]
    rename: Callable[[str], str] = lambda name: name

    @property
    def source(self) -> Path:
        return self.checkpoint.source

    @property
    def what(self) -> str:
        return self.checkpoint.what

    def names(self) -> list[str]:
        return self.checkpoint.names()

    def shards(self) -> Iterator[tuple[Path, _PartReader]]:
        for file, reader in self.checkpoint.shards():
            yield file, _PartReader(reader, self.plan, self.rename, self.what, file)
