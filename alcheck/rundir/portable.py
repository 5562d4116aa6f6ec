"""Paths in run.json's config as a shipped run may record them: relative to the folder alcheck runs
in when they lie inside it, so a run made in a checkout names no machine's folders (results/
baselines/ ship with the repository). A path outside that folder, a hub id or an empty value is
kept as given. A relative path is read against the folder the command runs in, so `--resume` such
a run from the folder it was started in."""

from __future__ import annotations

import os
from pathlib import Path

# config keys that name a file or folder
PATH_KEYS = ("target", "draft", "out", "chat_template")


def portable_path(value, base: Path | None = None):
    if not isinstance(value, str) or not value or not os.path.isabs(value):
        return value
    base = (base or Path.cwd()).resolve()
    try:
        relative = Path(value).resolve().relative_to(base)
    except (ValueError, OSError):
        return value
    return str(relative) if str(relative) != "." else "."


def portable_config(config: dict, base: Path | None = None) -> dict:
    return {k: portable_path(v, base) if k in PATH_KEYS else v for k, v in config.items()}
