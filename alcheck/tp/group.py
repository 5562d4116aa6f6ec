"""One tensor-parallel group: this process's rank, the world size, the backend and the device,
plus the two collectives the model needs (an all-reduce and an all-gather along the last dim)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
TIMEOUT = timedelta(minutes=30)  # a collective that waits this long means a rank is gone


def split_range(total: int, rank: int, size: int) -> tuple[int, int]:
    """[start, stop) of rank's part when `total` rows are split over `size` ranks, in rank order;
    parts differ by at most one row (the first `total % size` ranks take one more)."""
    base, extra = divmod(total, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass
class TPGroup:
    """What the model's parallel layers need: who we are and how to talk to the other ranks."""

    rank: int
    size: int
    device: torch.device
    backend: str = "gloo"
    group: object = field(default=None, repr=False)  # None: the default (world) process group
    send: object = field(
        default=None, repr=False
    )  # rank 0 under run_ranks(on_message=...): payload -> the parent

    def part(self, total: int) -> tuple[int, int]:
        return split_range(total, self.rank, self.size)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place (the row-parallel projections' partial products)."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor, total: int) -> torch.Tensor:
        """Concatenate each rank's part of the last dimension (rank order) into `total` columns.
        Parts may differ by one column: each is padded to the largest for the collective."""
        if self.size == 1:
            return x
        widest = split_range(total, 0, self.size)[1]
        local = x.contiguous()
        if local.shape[-1] < widest:
            local = torch.nn.functional.pad(local, (0, widest - local.shape[-1]))
        parts = [torch.empty_like(local) for _ in range(self.size)]
        dist.all_gather(parts, local, group=self.group)
        widths = [
            stop - start for start, stop in (split_range(total, r, self.size) for r in range(self.size))
        ]
        return torch.cat([p[..., :w] for p, w in zip(parts, widths)], dim=-1)

    def all_min(self, value: int) -> int:
        """The smallest of every rank's value (each rank sizes its KV pool from its own free memory)."""
        if self.size == 1:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t.item())

    def record(self) -> dict:
        """What a run records about its tensor parallelism (run.json's environment)."""
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else self.size
        return {"tensor_parallel_size": self.size, "world_size": world, "backend": self.backend}

    def barrier(self):
        if self.size > 1:
            dist.barrier(group=self.group)


def under_torchrun() -> bool:
    """torchrun (or any launcher that sets the env:// variables) started this process as one rank."""
    return all(name in os.environ for name in TORCHRUN_ENV)


def init_group(rank: int, size: int, device: torch.device, init_method: str = "env://") -> TPGroup:
    """Join the process group (gloo on CPU, NCCL on CUDA) as `rank` of `size`."""
    device = torch.device(device)
    backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL and kernels that follow the current device use ours
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=size, timeout=TIMEOUT, **kwargs
    )
    return TPGroup(rank, size, device, backend)


def teardown_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
