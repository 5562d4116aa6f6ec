"""Cheap fingerprints of what a run's numbers depend on, so `--resume` never pools two models, or
two settings, into one AL.

- A checkpoint folder: the sha256 of every small file that decides what loads (config.json,
  generation_config.json, the shard indexes, the tokenizer files), and per weight file its size
  and the sha256 of its first and last MiB (a safetensors header and the first tensors, the last
  tensors): a re-trained or re-exported checkpoint changes them, a copy or a fresh download of
  the same files does not. Seconds for any size: nothing else is read.
- The settings: the sha256 of run.json's result-affecting config as written, so an edit of
  run.json's `config` (max_tokens, target) is caught on resume.
- The inputs: the sha256 of each dataset file and of a --chat-template file, and one over every
  question's turn-1 prompt_hash, so a question, template or tokenizer changed in place is caught.

Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SMALL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "chat_template.jinja",
    "gguf_source.json",  # a converted GGUF folder (models/gguf.py): the file's sha256 and types
)
WEIGHT_SUFFIXES = (".safetensors", ".bin")
EDGE = 1 << 20  # bytes read at each end of a weight file


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _edges(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(EDGE)
        if size > 2 * EDGE:
            f.seek(size - EDGE)
        tail = f.read(EDGE)
    return _sha(head + tail)


def checkpoint_fingerprint(directory: Path) -> dict:
    """{file name: "sha" or "size:sha-of-edges"} for the files of a checkpoint folder that decide
    what loads (a file that is absent is left out)."""
    directory = Path(directory)
    out = {}
    for name in SMALL_FILES:
        path = directory / name
        if path.is_file():
            out[name] = _sha(path.read_bytes())
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name.endswith(WEIGHT_SUFFIXES) and path.name not in out:
            out[path.name] = f"{path.stat().st_size}:{_edges(path)}"
    return out


def settings_fingerprint(result_settings: dict) -> str:
    """The sha256 of the result-affecting settings, canonically serialised."""
    return _sha(json.dumps(result_settings, sort_keys=True, default=str, allow_nan=False).encode())


def file_fingerprint(path: Path) -> str:
    """The sha256 of a small file's bytes (a dataset, a chat template)."""
    return _sha(Path(path).read_bytes())


def questions_fingerprint(questions) -> str:
    """The sha256 of questions with no file of their own (a hub dataset): ids, categories, turns."""
    return _sha(
        json.dumps(
            [[q.question_id, q.category, list(q.turns)] for q in questions], default=str, allow_nan=False
        ).encode()
    )


def prompts_fingerprint(hashes: dict) -> str:
    """One sha256 over each question's turn-1 prompt_hash, keyed (dataset, question_id), in order."""
    return _sha("\n".join(f"{d}\t{q}\t{h}" for (d, q), h in hashes.items()).encode())


def differences(then: dict, now: dict) -> list[str]:
    """The files whose fingerprint changed, appeared or disappeared, in words."""
    out = []
    for name in sorted(set(then) | set(now)):
        if name not in now:
            out.append(f"{name} is gone")
        elif name not in then:
            out.append(f"{name} is new")
        elif then[name] != now[name]:
            out.append(f"{name} changed")
    return out
