"""Strict, streaming placement of checkpoint tensors into a module built on the meta device.

Every parameter is allocated once, in its final dtype on its final device, and each checkpoint
tensor is copied straight into it as its shard is read: q/k/v and gate/up land in their rows of
the fused weight. No state dict, fused copy or float32 module ever exists, so peak host memory
is one shard's pages (plus the weights themselves when the device is the CPU).

Strict means: every checkpoint tensor fills a parameter or matches the caller's allow-list,
every parameter is filled exactly once with the shape config.json implies, and every value is
finite after the cast to the model's dtype. Anything else is a one-line AlcheckError naming the
file and the tensor.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import Checkpoint, check_source_finite, finite_flag
from alcheck.models.layers import checkpoint_names


@dataclass(frozen=True)
class Slot:
    """Where one checkpoint tensor goes: rows [start, start + shape[0]) of parameter `param`
    (of its slice `expert` first, when the parameter stacks MoE experts [E, ...])."""

    param: str
    start: int
    shape: tuple[int, ...]
    fused: bool = False
    expert: int | None = None


@dataclass
class Extra:
    """A checkpoint tensor with no parameter that is still allowed: why, and what to do with it."""

    pattern: str  # fnmatch pattern over checkpoint names
    reason: str
    handle: Callable[[str, torch.Tensor, Path], None] | None = None  # None: ignored, never read


def plan_slots(module: nn.Module) -> dict[str, Slot]:
    """Checkpoint tensor name -> slot, for every parameter of the module (tied ones once)."""
    slots = {}
    for name, param in module.named_parameters():
        parts = checkpoint_names(name)
        if parts == [name]:
            slots[name] = Slot(name, 0, tuple(param.shape))
            continue
        sizes = _part_rows(module.get_submodule(name.rsplit(".", 2)[0]), param, len(parts))
        start = 0
        for part, rows in zip(parts, sizes):
            slots[part] = Slot(name, start, (rows, *param.shape[1:]), fused=True)
            start += rows
    return slots


def _part_rows(owner: nn.Module, param: torch.Tensor, num_parts: int) -> list[int]:
    if hasattr(owner, "q_size"):  # attention: q, k, v
        return [owner.q_size, owner.kv_size, owner.kv_size]
    return [param.shape[0] // num_parts] * num_parts  # mlp: gate, up


def allocate(module: nn.Module, dtype: torch.dtype, device) -> None:
    """Replace each meta parameter by an uninitialised one in dtype on device; tied ones stay tied."""
    fresh: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}  # id(old) -> (old kept alive, new)
    for sub in module.modules():
        for key, param in sub._parameters.items():
            if param is None:
                continue
            if id(param) not in fresh:
                fresh[id(param)] = (
                    param,
                    nn.Parameter(torch.empty(param.shape, dtype=dtype, device=device), requires_grad=False),
                )
            sub._parameters[key] = fresh[id(param)][1]


def weight_bytes(module: nn.Module, dtype: torch.dtype) -> int:
    return sum(p.numel() for p in module.parameters()) * dtype.itemsize


def check_fits(need: int, device, what: str, dtype: torch.dtype) -> None:
    """Refuse before allocating when the weights cannot fit in the device's free memory."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except (RuntimeError, AssertionError, ValueError) as exc:
            raise AlcheckError(
                f"{what}: cannot use {device} ({str(exc).splitlines()[0]}): pass a device that exists"
            ) from None
        where = f"{device} has {free / 2**30:.2f} GiB free"
    elif device.type == "cpu":
        free = _available_ram()
        where = f"the host has {free / 2**30:.2f} GiB available" if free is not None else ""
    else:
        return
    if free is not None and need > free:
        name = str(dtype).removeprefix("torch.")
        raise AlcheckError(
            f"{what}: the weights need {need / 2**30:.2f} GiB in {name} but {where}: "
            "use a smaller --dtype or a device with more memory"
        )


def _available_ram() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass
class _Pending:
    """A placed tensor whose finiteness flag has not been read back yet (one sync per shard)."""

    name: str
    file: Path
    flag: torch.Tensor
    source: torch.Tensor  # the file's tensor (a memory-map view), to explain a failure
    dtype: torch.dtype


class StrictLoader:
    """Streams a Checkpoint into a module, strictly. `load_strict` is the one-call form."""

    def __init__(
        self,
        module: nn.Module,
        what: str,
        extras=(),
        rename: Callable[[str], str] | None = None,
        slots: dict[str, Slot] | None = None,
    ):
        self.module, self.what, self.extras = module, what, list(extras)
        self.rename = rename or (lambda name: name)
        self.slots = plan_slots(module) if slots is None else slots
        self.filled: set[str] = set()
        self.pending: list[_Pending] = []
        self.params: dict[str, nn.Parameter] = {}

    def extra(self, name: str) -> Extra | None:
        return next((e for e in self.extras if fnmatch.fnmatchcase(name, e.pattern)), None)

    def check_names(self, names: list[str], source: Path) -> None:
        """Before any tensor is read: every name has a place or is allowed, and none is missing."""
        renamed = [self.rename(n) for n in names]
        for original, name in zip(names, renamed):
            if name not in self.slots and self.extra(name) is None:
                self._unexpected(original, source)
        present = set(renamed)
        missing = [n for n in self.slots if n not in present]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise AlcheckError(
                f"{self.what}: {source} lacks tensors {missing[:3]}{more}: not a matching checkpoint"
            )

    def _unexpected(self, name: str, file: Path):
        allowed = ", ".join(e.pattern for e in self.extras) or "none"
        raise AlcheckError(
            f"{self.what}: unexpected tensor {name} in {file}: "
            "a model with this config.json has no such weight "
            f"(allowed extras: {allowed}): fix config.json or pass the matching checkpoint"
        )

    def stream(self, checkpoint: Checkpoint) -> None:
        """Copy every tensor into the (allocated) parameters, one shard at a time."""
        self.params = dict(self.module.named_parameters())
        for file, reader in checkpoint.shards():
            self._load_shard(file, reader)  # returns before the shard closes: no view outlives it
        missing = [n for n in self.slots if n not in self.filled]
        if missing:
            raise AlcheckError(
                f"{self.what}: {checkpoint.source} lacks tensors {missing[:3]}: "
                "its index and shards disagree: re-download the checkpoint"
            )

    def _load_shard(self, file: Path, reader) -> None:
        for original in reader.names():
            name = self.rename(original)
            slot = self.slots.get(name)
            if slot is None:
                extra = self.extra(name)
                if extra is None:
                    self._unexpected(original, file)
                if extra.handle is not None:
                    tensor = reader.get(original)
                    check_source_finite(self.what, original, file, tensor)
                    extra.handle(original, tensor, file)
                continue
            if name in self.filled:
                raise AlcheckError(
                    f"{self.what}: tensor {original} appears twice "
                    f"(again in {file}): re-download the checkpoint"
                )
            self._place(original, file, slot, reader.get(original))
            self.filled.add(name)
        self._flush()

    def _place(self, name: str, file: Path, slot: Slot, tensor: torch.Tensor) -> None:
        if tuple(tensor.shape) != slot.shape:
            raise AlcheckError(
                f"{self.what}: tensor {name} in {file} has shape {tuple(tensor.shape)}, "
                f"{file.parent / 'config.json'} "
                f"says {slot.shape}: config.json and weights disagree"
            )
        if not tensor.is_floating_point():
            raise AlcheckError(
                f"{self.what}: tensor {name} in {file} has dtype {tensor.dtype}, not a float type: "
                "not a model checkpoint"
            )
        dst = self.params[slot.param].data
        if slot.expert is not None:
            dst = dst[slot.expert]
        if slot.fused:
            dst = dst[slot.start : slot.start + slot.shape[0]]
        src = tensor
        if src.device != dst.device:
            src = src.to(dst.device)  # cast on the device: a host-side cast would need a full-size temp
        dst.copy_(src)
        self.pending.append(_Pending(name, file, finite_flag(dst), tensor, dst.dtype))

    def _flush(self) -> None:
        if not self.pending:
            return
        flags = torch.stack([p.flag for p in self.pending]).tolist()  # one host sync
        pending, self.pending = self.pending, []
        for item, ok in zip(pending, flags):
            if not ok:
                check_source_finite(self.what, item.name, item.file, item.source)
                peak = item.source.abs().max().item()
                raise AlcheckError(
                    f"{self.what}: tensor {item.name} in {item.file} overflows "
                    f"{str(item.dtype).removeprefix('torch.')} "
                    f"(values up to {peak:.3g}): load it with --dtype bfloat16 or float32"
                )


def load_strict(
    module: nn.Module,
    checkpoint: Checkpoint,
    *,
    dtype: torch.dtype,
    device,
    what: str,
    extras: list[Extra] = (),
    rename: Callable[[str], str] | None = None,
    slots: dict[str, Slot] | None = None,
) -> nn.Module:
    """Fill a meta-device module from a checkpoint, strictly, in dtype on device.

    Names are checked before any tensor data is read; then parameters are allocated (after a
    memory check) and filled shard by shard. Non-persistent buffers are the caller's job.
    slots: the checkpoint-name plan when it is not plan_slots(module) (MoE experts).
    """
    loader = StrictLoader(module, what, extras, rename, slots)
    loader.check_names(checkpoint.names(), checkpoint.source)
    check_fits(weight_bytes(module, dtype), device, what, dtype)
    allocate(module, dtype, device)
    loader.stream(checkpoint)
    return module
