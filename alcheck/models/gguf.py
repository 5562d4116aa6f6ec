"""A GGUF file as a checkpoint: checked, then converted once into a float32 HF folder that every
path (the runners, --devices workers, tensor-parallel ranks, serve, engine runs) loads as usual.

Why a converted folder and not a GGUF loader of our own: transformers already dequantizes GGUF
tensors and undoes llama.cpp's Q/K row permutation; the folder it gives is a normal checkpoint,
so nothing downstream learns a second format, and the float32 weights are cast to the run's
dtype when they load (dequantize -> float32 -> dtype, the order transformers uses too).

The folder lives in the user cache (paths.user_cache_dir()/gguf/<stem>-<sha256[:16]>), is written
atomically, and holds `gguf_source.json` (the file's name, size, sha256, architecture and
quantization types), which run.json records and the resume fingerprint covers.

Refused before anything is converted, in one line each: the gguf extra missing, a file that is not
GGUF, truncated or corrupt, an architecture alcheck's targets do not cover, a quantization type
the installed gguf package cannot dequantize.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from alcheck.errors import AlcheckError

MAGIC = b"GGUF"
SUFFIX = ".gguf"
SOURCE_FILE = "gguf_source.json"
# bump when convert() writes something else: a cached folder of another version is converted again
CONVERSION = 2
EXTRA = "pip install 'alcheck[gguf]' (the gguf and accelerate packages)"
# GGUF general.architecture -> the target model_type alcheck runs (models/targets.py). llama.cpp
# writes Mistral as "llama"; transformers tells them apart by general.name, and so do we.
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3moe": "qwen3_moe"}
UNQUANTIZED = ("F32", "F16")
# transformers keeps only tokenizer.ggml.eos_token_id; a Llama-3 GGUF also names eot (and eom) ids,
# which end a turn in llama.cpp: all of them go into the converted folder's generation_config
EOG_FIELDS = (
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
)  # read as they are; every other type goes through gguf's dequantizer


@dataclass(frozen=True)
class GGUFSource:
    """What a converted folder was made from (gguf_source.json; run.json's `gguf`)."""

    file: str
    size: int
    sha256: str
    architecture: str  # the file's general.architecture
    model_type: str  # what alcheck runs it as
    name: str
    quantization: dict  # tensor type -> number of tensors, e.g. {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    eog_token_ids: list  # the file's eos, eot and eom ids: llama.cpp stops on each
    converted_by: str  # "transformers X.Y.Z, gguf A.B.C"
    conversion: int = CONVERSION


def gguf_file_of(path: Path, what: str) -> Path | None:
    """The GGUF file `path` names: the file itself, or the one .gguf in a folder with no config.json.
    None for anything else (an HF folder, a hub id)."""
    if path.is_file():
        return path if path.suffix.lower() == SUFFIX or _has_magic(path) else None
    if not path.is_dir() or (path / "config.json").exists():
        return None
    found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == SUFFIX)
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:4])
        raise AlcheckError(
            f"{what} {path} holds {len(found)} .gguf files ({names}): pass the one to run as a file path"
        )
    return found[0] if found else None


def _has_magic(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == MAGIC


def gguf_checkpoint(file: Path, what: str) -> Path:
    """The converted folder for a GGUF file: checked, converted on first use, reused after."""
    source = inspect_gguf(file, what)
    dest = user_gguf_dir() / f"{file.stem}-{source.sha256[:16]}"
    if is_current(dest):
        return dest
    with conversion_lock(dest):  # workers and torchrun ranks resolve the same file at once: one converts
        if is_current(dest):
            return dest
        shutil.rmtree(dest, ignore_errors=True)  # absent, or written by an older conversion
        print(
            f"note: {what} {file.name}: converting the GGUF file to a float32 checkpoint in {dest} "
            "(once; later runs reuse it)",
            file=sys.stderr,
            flush=True,
        )
        convert(file, source, dest)
    return dest


@contextlib.contextmanager
def conversion_lock(dest: Path):
    """An exclusive flock beside dest, held while it is (re)written; waiters then find it current."""
    import fcntl

    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(f".{dest.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def user_gguf_dir() -> Path:
    from alcheck.paths import user_cache_dir

    return user_cache_dir() / "gguf"


def is_current(directory: Path) -> bool:
    """A converted folder written by this version of convert()."""
    source = read_source(directory) if (Path(directory) / SOURCE_FILE).is_file() else None
    return source is not None and source.get("conversion") == CONVERSION


def read_source(directory: Path) -> dict | None:
    """gguf_source.json of a converted folder, or None for any other checkpoint."""
    path = Path(directory) / SOURCE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def inspect_gguf(file: Path, what: str) -> GGUFSource:
    """Read the header and tensor table; refuse what cannot be converted, before any weight is read."""
    size = file.stat().st_size
    if not _has_magic(file):
        raise AlcheckError(
            f"{what} {file}: not a GGUF file (it does not start with the GGUF magic): pass a .gguf "
            "file or an HF checkpoint folder"
        )
    gguf = _require_extra(file, what)
    try:
        reader = gguf.GGUFReader(str(file))
        tensors = list(reader.tensors)
        end = max((t.data_offset + int(t.n_bytes) for t in tensors), default=0)
    except Exception as exc:  # noqa: BLE001 - gguf's reader fails with numpy's words on a short file
        raise AlcheckError(
            f"{what} {file}: truncated or corrupt GGUF file ({size} bytes; reading its tensor table "
            f"failed: {_first_line(exc)}): download or copy it again"
        ) from None
    if not tensors or end > size:
        raise AlcheckError(
            f"{what} {file}: truncated GGUF file ({size} bytes, its tensors need {end}): "
            "download or copy it again"
        )
    parts = int(_field(reader, "split.count") or 1)
    if parts > 1:
        raise AlcheckError(
            f"{what} {file}: part {int(_field(reader, 'split.no') or 0) + 1} of {parts} of a split GGUF: "
            "merge the parts (llama-gguf-split --merge) and pass the merged file"
        )
    architecture = _field(reader, "general.architecture") or "?"
    name = _field(reader, "general.name") or file.stem
    model_type = ARCHITECTURES.get(architecture)
    if architecture == "llama" and "mistral" in name.lower():
        model_type = "mistral"
    if model_type is None:
        raise AlcheckError(
            f"{what} {file}: GGUF architecture {architecture!r} is not a target alcheck runs "
            f"(GGUF architectures: {', '.join(sorted(ARCHITECTURES))}): pass a GGUF of one of those, "
            "or the model's HF checkpoint folder"
        )
    _check_transformers_reads(architecture, model_type, file, what)
    kinds = Counter(t.tensor_type.name for t in tensors)
    eog = sorted({int(v) for key in EOG_FIELDS if (v := _field(reader, key)) is not None})
    _check_dequantizable(gguf, tensors, file, what)
    import transformers

    return GGUFSource(
        file=file.name,
        size=size,
        sha256=_sha256(file),
        architecture=architecture,
        model_type=model_type,
        name=name,
        quantization=dict(sorted(kinds.items())),
        eog_token_ids=eog,
        converted_by=f"transformers {transformers.__version__}, gguf {_version('gguf')}",
    )


def _require_extra(file: Path, what: str):
    try:
        import accelerate  # noqa: F401 - transformers' GGUF loading builds the model through it
        import gguf
    except ImportError as exc:
        raise AlcheckError(
            f"{what} {file} is a GGUF file, and reading one needs the {exc.name} package: {EXTRA}"
        ) from None
    return gguf


def _check_transformers_reads(architecture: str, model_type: str, file: Path, what: str):
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    # transformers lists some under its own names (qwen3moe as qwen3_moe)
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES and model_type not in GGUF_SUPPORTED_ARCHITECTURES:
        import transformers

        raise AlcheckError(
            f"{what} {file}: transformers {transformers.__version__} cannot read GGUF architecture "
            f"{architecture!r}: upgrade transformers, or pass the model's HF checkpoint folder"
        )


def _check_dequantizable(gguf, tensors, file: Path, what: str):
    """Dequantize one row of the first tensor of each type: the gguf package's own answer to
    whether it can, rather than a list of type names that ages."""
    seen = set()
    for tensor in tensors:
        kind = tensor.tensor_type.name
        if kind in seen or kind in UNQUANTIZED:
            continue
        seen.add(kind)
        try:
            gguf.dequantize(tensor.data[:1], tensor.tensor_type)
        except Exception as exc:  # noqa: BLE001 - NotImplementedError for the types it lacks
            raise AlcheckError(
                f"{what} {file}: tensor {tensor.name} is quantized as {kind}, which gguf "
                f"{_version('gguf')} cannot dequantize ({_first_line(exc)}): use a GGUF quantized "
                "with another type (Q8_0, Q4_K_M, F16, ...), or upgrade gguf"
            ) from None


def _field(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value if isinstance(value, str) else str(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def _sha256(file: Path) -> str:
    """The file's sha256, remembered per (path, size, mtime, ctime) so workers and ranks do not
    re-read gigabytes (ctime: a copy that keeps the old mtime still changes it)."""
    stat = file.stat()
    key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}"
    index = user_gguf_dir() / "sha256-index.json"
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    known[key] = file_sha256(file)
    _write_atomic(index, json.dumps(known, indent=1, sort_keys=True, allow_nan=False))
    return known[key]


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (a leaf here: models must not import prompts, which imports hub)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def convert(file: Path, source: GGUFSource, dest: Path):
    """transformers' GGUF loader -> float32 state dict in safetensors (the tied head left out, as HF
    folders store it), its config without the quantization record, the tokenizer and chat
    template from the file, and gguf_source.json. Written beside dest and renamed into place."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    # one note says what happens: no per-tensor bars in logs. The GGUF loop calls the tqdm it
    # imported (TQDM_DISABLE was read then), so that name is swapped for a disabled one here
    plain_tqdm, bars = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    gguf_utils.tqdm = functools.partial(plain_tqdm, disable=True)
    hf_logging.disable_progress_bar()
    try:
        # gguf_file absolute: transformers tries a bare name against the working directory first
        model, info = AutoModelForCausalLM.from_pretrained(
            str(file.parent),
            gguf_file=str(file.resolve()),
            dtype=torch.float32,
            trust_remote_code=False,
            output_loading_info=True,
        )
        missing = [
            k
            for k in info.get("missing_keys", ())
            if not (k == "lm_head.weight" and model.config.tie_word_embeddings)
        ]
        if missing:  # transformers would leave them randomly initialised and only log it
            raise AlcheckError(
                f"{file}: the GGUF file has no tensor for {len(missing)} of the model's weights "
                f"({', '.join(sorted(missing)[:3])}, ...): pass a complete GGUF of this model"
            )
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        for key in ("quantization_config", "_name_or_path", "transformers_version"):
            config.pop(key, None)
        config["dtype"] = "float32"
        source = replace(source, model_type=config.get("model_type", source.model_type))
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n")
        if len(source.eog_token_ids) > 1:
            model.generation_config.eos_token_id = list(source.eog_token_ids)
        model.generation_config.save_pretrained(tmp)
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=str(file.resolve()))
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps(asdict(source), indent=2, allow_nan=False) + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:  # another process converted the same file first: theirs is the same
            if not (dest / SOURCE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        gguf_utils.tqdm = plain_tqdm
        if bars:
            hf_logging.enable_progress_bar()
