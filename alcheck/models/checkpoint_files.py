"""Checkpoint files on disk: config.json, weight files and shard indexes, read without running code.

Weights come from safetensors (memory-mapped through `safe_open`) or from `.bin` files through
`torch.load(weights_only=True, mmap=True)`. `Checkpoint.shards()` opens one shard at a time, so a
loader that copies each tensor out before moving on holds at most one shard's pages.
"""

from __future__ import annotations

import json
import pickle
import pickletools
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from alcheck.errors import AlcheckError

# in order of preference: a folder holding both formats is read as safetensors
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def read_json(file: Path, what: str) -> dict:
    """A JSON object from file, or a one-line error naming it."""
    try:
        raw = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = json_problem(exc) if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
        raise AlcheckError(f"{what}: {file} is not valid JSON ({reason}): re-download or fix it") from None
    except OSError as exc:
        raise AlcheckError(f"{what}: cannot read {file} ({exc.strerror}): check the file") from None
    if not isinstance(raw, dict):
        raise AlcheckError(
            f"{what}: {file} holds a JSON {type(raw).__name__}, not an object: re-download or fix it"
        )
    return raw


def json_problem(exc: json.JSONDecodeError) -> str:
    """'unterminated string starting at line 12, column 5': json's reason with where it is (its
    own `msg` ends in a bare "at" for some reasons, and never names the line)."""
    reason = exc.msg.removesuffix(" at")
    return f"{reason[:1].lower()}{reason[1:]} at line {exc.lineno}, column {exc.colno}"


def read_config(directory: Path, what: str) -> dict:
    """config.json of a checkpoint folder as a dict."""
    file = directory / "config.json"
    if not file.is_file():
        raise AlcheckError(f"{what}: {file} is missing: point at a checkpoint folder that has config.json")
    return read_json(file, what)


def has_weights(directory: Path) -> bool:
    """True when the folder holds a complete set of weight files (every shard an index names)."""
    for name in WEIGHT_FILES:
        file = directory / name
        if not file.is_file():
            continue
        if not name.endswith(".index.json"):
            return True
        try:
            shards = set(json.loads(file.read_text())["weight_map"].values())
        except Exception:  # noqa: BLE001 - a broken index is reported when it is read for real
            return True
        return all((directory / shard).is_file() for shard in shards)
    return False


@dataclass
class Checkpoint:
    """The weight files of one checkpoint folder, in reading order."""

    directory: Path
    what: str
    source: Path  # the file to name for the whole checkpoint: the single weight file or the index
    files: list[Path]  # shards in reading order
    index: dict[str, str] | None = None  # tensor name -> shard file name, from *.index.json
    _names: list[str] | None = field(default=None, repr=False)

    def names(self) -> list[str]:
        """Every tensor name, from the index or the file headers (a .bin is memory-mapped to list it)."""
        if self.index is not None:
            return list(self.index)
        if self._names is None:
            self._names = [name for _, reader in self.shards() for name in reader.names()]
        return self._names

    @contextmanager
    def _open(self, file: Path):
        if file.suffix == ".safetensors":
            with _open_safetensors(file, self.what) as reader:
                yield reader
        else:
            yield _BinReader(file, _load_bin(file, self.what))

    def shards(self) -> Iterator[tuple[Path, _Reader]]:
        """(file, reader) per shard; the shard is closed (its pages released) before the next opens."""
        for file in self.files:
            if not file.is_file():
                raise AlcheckError(f"{self.what}: shard {file} is missing: re-download the checkpoint")
            with self._open(file) as reader:
                yield file, reader


class _Reader:
    def names(self) -> list[str]:
        raise NotImplementedError

    def get(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def get_part(self, name: str, dim: int, start: int, stop: int) -> tuple[tuple[int, ...], torch.Tensor]:
        """(the tensor's full shape, its [start, stop) slice along dim): a tensor-parallel rank's
        share. This default reads the whole tensor (a memory-mapped .bin) and narrows it."""
        tensor = self.get(name)
        if dim >= tensor.dim() or stop > tensor.shape[dim]:
            return tuple(tensor.shape), tensor
        return tuple(tensor.shape), tensor.narrow(dim, start, stop - start)


class _SafetensorsReader(_Reader):
    def __init__(self, handle, file: Path, what: str):
        self.handle, self.file, self.what = handle, file, what

    def names(self):
        return list(self.handle.keys())

    def get(self, name):
        try:  # a view of the memory map: pages are read when the tensor is copied
            return self.handle.get_tensor(name)
        except Exception as exc:  # noqa: BLE001 - truncated data, bad dtype, ...
            raise AlcheckError(
                f"{self.what}: tensor {name} in {self.file} cannot be read ({exc}): re-download it"
            ) from None

    def get_part(self, name, dim, start, stop):
        try:  # only the slice's bytes are read from the file
            part = self.handle.get_slice(name)
            shape = tuple(part.get_shape())
            if dim >= len(shape) or stop > shape[dim]:  # the caller reports the shape mismatch
                return shape, self.handle.get_tensor(name)
            return shape, part[(slice(None),) * dim + (slice(start, stop),)]
        except Exception as exc:  # noqa: BLE001 - truncated data, bad dtype, ...
            raise AlcheckError(
                f"{self.what}: tensor {name} in {self.file} cannot be read ({exc}): re-download it"
            ) from None


class _BinReader(_Reader):
    def __init__(self, file: Path, state: dict):
        self.file, self.state = file, state

    def names(self):
        return list(self.state)

    def get(self, name):
        return self.state[name]


@contextmanager
def _open_safetensors(file: Path, what: str):
    from safetensors import safe_open

    try:
        handle = safe_open(str(file), framework="pt", device="cpu")
    except Exception as exc:  # noqa: BLE001
        raise AlcheckError(
            f"{what}: {file} is not a readable safetensors file ({exc}): re-download it"
        ) from None
    with handle:
        yield _SafetensorsReader(handle, file, what)


def open_checkpoint(directory: Path, what: str) -> Checkpoint:
    """The weight files of a folder: one file, or the shards an index names."""
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    if not present:
        raise AlcheckError(
            f"{what}: no weights in {directory} (looked for {', '.join(WEIGHT_FILES)}): "
            "pass a folder with safetensors or pytorch_model.bin"
        )
    name = present[0]
    if not name.endswith(".index.json"):
        return Checkpoint(directory, what, directory / name, [directory / name])
    index = _read_index(directory / name, what)
    files = [directory / shard for shard in sorted(set(index.values()))]
    return Checkpoint(directory, what, directory / name, files, index)


def _read_index(file: Path, what: str) -> dict[str, str]:
    raw = read_json(file, what)
    weight_map = raw.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise AlcheckError(
            f'{what}: {file} has no "weight_map" (tensor name -> shard file): re-download the checkpoint'
        )
    suffix = ".safetensors" if file.name.startswith("model.safetensors") else ".bin"
    for tensor, shard in weight_map.items():
        # shard names are plain file names next to the index: nothing outside the folder is read
        if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(suffix):
            raise AlcheckError(
                f"{what}: {file} maps {tensor} to {shard!r}, not a {suffix} file in that folder: "
                "re-download the checkpoint"
            )
    return weight_map


def load_state_dict(directory: Path, what: str) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint folder as one dict (copied out of the memory maps), each one
    checked for NaN/inf. For small checkpoints (heads) and tools; models stream through
    `strict_load.load_strict` instead."""
    checkpoint = open_checkpoint(directory, what)
    state: dict[str, torch.Tensor] = {}
    for file, reader in checkpoint.shards():
        for name in reader.names():
            if name in state:
                raise AlcheckError(
                    f"{what}: tensor {name} appears in two shards ({file} and another): re-download it"
                )
            tensor = reader.get(name)
            check_source_finite(what, name, file, tensor)
            state[name] = tensor.clone()
    return state


def finite_flag(t: torch.Tensor) -> torch.Tensor:
    """0-d bool on t's device: all values finite. min/max propagate NaN and need no full-size temp."""
    if t.numel() == 0 or not t.is_floating_point():
        return torch.ones((), dtype=torch.bool, device=t.device)
    low, high = torch.aminmax(t)
    return torch.isfinite(low) & torch.isfinite(high)


def check_source_finite(what: str, name: str, file: Path, tensor: torch.Tensor) -> None:
    """A one-line error naming file and tensor when a checkpoint tensor holds NaN or inf."""
    if not bool(finite_flag(tensor)):
        kind = "NaN" if bool(torch.isnan(tensor).any()) else "infinite"
        raise AlcheckError(
            f"{what}: tensor {name} in {file} holds {kind} values: "
            "the checkpoint is corrupt: re-download or re-export it"
        )


# -- .bin files --------------------------------------------------------------------------------

ZIP_MAGIC = b"PK\x03\x04"


def _load_bin(file: Path, what: str) -> dict[str, torch.Tensor]:
    """A weights_only torch.load, memory-mapped when the file is in the zip format."""
    with file.open("rb") as f:
        head = f.read(4)
    is_zip = head == ZIP_MAGIC
    # a pickle starts with PROTO (0x80) and a protocol number; torch's legacy format is one
    if not is_zip and not (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5):
        raise AlcheckError(
            f"{what}: {file} is not a PyTorch checkpoint (neither a zip archive nor a pickle): "
            "re-download it, or pass safetensors"
        )
    if is_zip and not _zip_has_pickle(file):
        raise AlcheckError(
            f"{what}: {file} is a zip archive but not a PyTorch checkpoint (no data.pkl): "
            "re-download it, or pass safetensors"
        )
    try:
        state = torch_load(file, mmap=is_zip)
    except pickle.UnpicklingError as exc:
        raise AlcheckError(_unpickling_problem(file, what, str(exc), is_zip)) from None
    except Exception as exc:  # noqa: BLE001 - truncated archives, corrupt records
        raise AlcheckError(
            f"{what}: {file} is not a readable PyTorch checkpoint ({type(exc).__name__}): re-download it"
        ) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AlcheckError(
            f"{what}: {file} is not a state dict of tensors: re-save it with torch.save(model.state_dict())"
        )
    return state


def torch_load(file: Path, mmap: bool):
    """torch.load with weights_only=True and torch's warnings silenced: a refused or odd pickle
    (another pickle protocol, a legacy file) is reported by the caller in one line, not by torch's
    UserWarning lines with a site-packages path before it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)


def _zip_has_pickle(file: Path) -> bool:
    try:
        with zipfile.ZipFile(file) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except zipfile.BadZipFile:
        return False


def _unpickling_problem(file: Path, what: str, message: str, is_zip: bool) -> str:
    """Why the safe unpickler refused: a pickle that needs code, or bytes that are no pickle."""
    if not _parses_as_pickle(file, is_zip):
        return (
            f"{what}: {file} is not a PyTorch checkpoint (its pickle data is corrupt): re-download it, "
            "or pass safetensors"
        )
    if "global" in message.lower():
        return (
            f"{what}: {file} needs code execution to unpickle, which alcheck refuses: "
            "convert it to safetensors or re-save it as a plain state dict"
        )
    return (
        f"{what}: {file} uses pickle features torch's safe loader does not read: "
        "re-save it with torch.save(model.state_dict()) or convert it to safetensors"
    )


def _parses_as_pickle(file: Path, is_zip: bool) -> bool:
    """Whether the pickle stream is well formed. pickletools only decodes opcodes, it runs nothing."""
    try:
        if is_zip:
            with zipfile.ZipFile(file) as archive:
                data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        else:
            with file.open("rb") as f:
                data = f.read(1 << 20)  # torch's legacy format starts with small pickles
        for _ in pickletools.genops(data):
            pass
        return True
    except Exception:  # noqa: BLE001 - any decoding failure means "not a pickle"
        return False


def tensor_names(directory: Path, what: str = "draft") -> list[str]:
    """Every tensor name of a checkpoint folder, without reading the weights when avoidable."""
    names = cheap_tensor_names(directory)
    if names is not None:
        return names
    if not any((directory / name).is_file() for name in WEIGHT_FILES):
        legacy = read_medusa_legacy(directory, names_only=True)
        if legacy is not None:
            return legacy[0]
    return sorted(load_state_dict(directory, what))  # one-line errors for unreadable folders


def cheap_tensor_names(directory: Path) -> list[str] | None:
    """Every tensor name, from a shard index, a safetensors header or a zip-format .bin's memory
    map; None when only loading the weights would list them (a legacy .bin) or none is readable."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        file = directory / index
        if file.is_file():
            try:
                return sorted(json.loads(file.read_text())["weight_map"])
            except Exception:  # noqa: BLE001 - the loader reports a broken index in one line
                break
    single = directory / "model.safetensors"
    if single.is_file():
        try:
            from safetensors import safe_open

            with safe_open(str(single), framework="pt") as f:
                return sorted(f.keys())
        except Exception:  # noqa: BLE001
            pass
    binary = directory / "pytorch_model.bin"
    if binary.is_file() and _is_zip(binary):
        try:
            return sorted(torch_load(binary, mmap=True))
        except Exception:  # noqa: BLE001 - not a readable checkpoint: the loader decides
            pass
    return None


def _is_zip(file: Path) -> bool:
    with file.open("rb") as f:
        return f.read(4) == ZIP_MAGIC


# FasterDecoding's Medusa weight files, read when a folder has none of WEIGHT_FILES (here, not in
# models/medusa.py, so reading tensor names needs no model module)
MEDUSA_LEGACY_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")


def read_medusa_legacy(directory: Path, names_only: bool = False):
    """FasterDecoding's Medusa folders keep their heads in medusa_lm_head.* (models/medusa.py reads
    them): (sorted tensor names, or the whole tensor dict, file), or None when there is no such
    file. Names come without reading the weights, so detection sees the heads cheaply."""
    for name in MEDUSA_LEGACY_FILES:
        file = directory / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors import safe_open
                from safetensors.torch import load_file

                if names_only:
                    with safe_open(str(file), framework="pt") as f:
                        return sorted(f.keys()), file
                return load_file(str(file)), file
            # weights only: a pickle that would run code is refused
            state = torch_load(file, mmap=names_only)
        except Exception as exc:  # noqa: BLE001 - any unreadable file, in one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise AlcheckError(
                f"draft: {file} is not a readable weight file ({first}): re-download it"
            ) from None
        if not isinstance(state, dict):
            raise AlcheckError(f"draft: {file} holds no tensor dict: re-download it")
        return (sorted(state) if names_only else state), file
    return None
