"""Where a checkpoint lives: a local folder, the HF cache, or the hub.

A cached snapshot counts only when it holds weights: an earlier `AutoTokenizer.from_pretrained`
leaves config and tokenizer files behind, and that partial snapshot is not the model. Downloads
fetch safetensors when the repository has them and `.bin` files only when it has none.
"""

from __future__ import annotations

from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.models.checkpoint_files import has_weights

BASE_PATTERNS = ["*.json", "*.model", "*.jinja", "*.txt"]


def resolve_checkpoint(spec: str, what: str) -> Path:
    """A local directory, or a hub id found in the HF cache (with weights) or fetched from the hub. A GGUF
    file (or a folder holding one and no config.json) becomes its converted folder (models/gguf.py)."""
    path = Path(spec).expanduser()
    if path.exists():
        from alcheck.models.gguf import gguf_checkpoint, gguf_file_of

        gguf_file = gguf_file_of(path, what)
        if gguf_file is not None:
            return gguf_checkpoint(gguf_file, what)
    if path.is_dir():
        return path
    if path.exists():
        raise AlcheckError(
            f"{what} {spec} is a file, not a checkpoint directory: pass the folder holding config.json, "
            "or a .gguf file"
        )
    if spec.count("/") != 1 or spec.startswith((".", "/", "~")):
        raise AlcheckError(
            f"{what} {spec}: no such directory: pass a checkpoint folder or a hub id like org/name"
        )
    cached = _cached_snapshot(spec)
    if cached is not None and has_weights(cached):
        return cached
    unreachable = hub_unreachable()
    if unreachable:  # fail in seconds, not after huggingface_hub's retries (27 s, 11 lines)
        partial = f" (the HF cache holds {cached} without weights)" if cached is not None else ""
        raise AlcheckError(
            f"{what} {spec}: not in the HF cache and the hub is unreachable ({unreachable}){partial}: "
            "download it where a hub is reachable and pass the local folder"
        )
    try:
        directory = _download(spec)
    except Exception as exc:  # noqa: BLE001
        partial = f" (the HF cache holds {cached} without weights)" if cached is not None else ""
        raise AlcheckError(
            f"{what} {spec}: cannot fetch it from the hub ({type(exc).__name__}){partial}: "
            "download it where a hub is reachable and pass the local folder"
        ) from None
    if not has_weights(directory):
        raise AlcheckError(
            f"{what} {spec}: the hub repository has no safetensors or pytorch_model.bin weights: "
            "pass a repository with weights"
        )
    return directory


PROBE_TIMEOUT_S = 3.0
_reachability: dict[str, str] = {}  # endpoint -> "" (reachable) or why not, once per process


def hub_unreachable() -> str:
    """Why the hub cannot be reached ("" when it can): HF_HUB_OFFLINE, or a TCP connect to the
    endpoint's host that fails within PROBE_TIMEOUT_S (name resolution included)."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if endpoint not in _reachability:
        url = urlparse(endpoint)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname or "", port), timeout=PROBE_TIMEOUT_S).close()
            _reachability[endpoint] = ""
        except OSError as exc:
            _reachability[endpoint] = f"{url.hostname}:{port}: {exc.strerror or type(exc).__name__}"
    return _reachability[endpoint]


def _cached_snapshot(spec: str) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                spec, allow_patterns=BASE_PATTERNS + ["*.safetensors", "*.bin"], local_files_only=True
            )
        )
    except Exception:  # noqa: BLE001 - not cached
        return None


def download_patterns(repo_files: list[str]) -> list[str]:
    """What to fetch: safetensors when there are any, else the .bin files, plus configs and tokenizer."""
    weights = "*.safetensors" if any(f.endswith(".safetensors") for f in repo_files) else "*.bin"
    return BASE_PATTERNS + [weights]


def _download(spec: str) -> Path:
    from huggingface_hub import list_repo_files, snapshot_download

    return Path(snapshot_download(spec, allow_patterns=download_patterns(list_repo_files(spec))))
