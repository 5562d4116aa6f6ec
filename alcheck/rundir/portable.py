"""Paths in run.json's config as a shipped run may record them. A path inside alcheck's own root (the
checkout, or site-packages for a wheel: where the demo models and shipped data lie) is recorded
relative to that root, so a run made in a checkout names no machine's folders (results/baselines/
ship with the repository). Any other path, a hub id or an empty value is kept as given: a user's
run then resumes from any folder.

Reading back (`--resume`), a relative path is taken from the current folder when it is there, else
from alcheck's root, so a shipped or demo run resumes from anywhere too."""

from __future__ import annotations

import os
from pathlib import Path

from alcheck.paths import REPO_ROOT

# config keys that name a file or folder
PATH_KEYS = ("target", "draft", "out", "chat_template")


def portable_path(value, root: Path | None = None):
    if not isinstance(value, str) or not value or not os.path.isabs(value):
        return value
    root = (root or REPO_ROOT).resolve()
    try:
        relative = Path(value).resolve().relative_to(root)
    except (ValueError, OSError):
        return value
    return str(relative) if str(relative) != "." else "."


def portable_config(config: dict, root: Path | None = None) -> dict:
    return {k: portable_path(v, root) if k in PATH_KEYS else v for k, v in config.items()}


def resolved_path(value, root: Path | None = None):
    """A stored path as this machine reads it: relative ones from the current folder when there,
    else from alcheck's root when there; anything else as stored (the loader names what is missing)."""
    if not isinstance(value, str) or not value or os.path.isabs(value) or Path(value).exists():
        return value
    candidate = (root or REPO_ROOT) / value
    return str(candidate) if candidate.exists() else value
