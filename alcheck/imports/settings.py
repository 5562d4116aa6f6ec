"""The settings of an import: what the file states, what the user gave, and where each came from.

A setting the file states and an option contradicts is an error (exit 2): the file is the record
of what ran. A setting nobody states stays unstated, and every comparison warns about it
(alcheck.references.tables: `origins`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.imports.records import UNSTATED, USER, Setting

# the settings an import records, in this order; the option that gives each is --<name with ->
SETTINGS = (
    "k",
    "target",
    "draft",
    "method",
    "dataset",
    "protocol",
    "temperature",
    "max_tokens",
    "dtype",
    "topk",
    "num_draft_tokens",
    "draft_sampling",
    "limit",
)


@dataclass
class Given:
    """Settings given as options (None: not given)."""

    k: int | None = None
    target: str | None = None
    draft: str | None = None
    method: str | None = None
    dataset: str | None = None
    protocol: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    dtype: str | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    draft_sampling: str | None = None
    limit: int | None = None


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return str(a).strip().lower() == str(b).strip().lower()


def resolve(stated: dict[str, Setting], given: Given, path: Path) -> dict[str, Setting]:
    """One Setting per name in SETTINGS: the file's (or the tool's) value, else the option's,
    else unstated. An option that contradicts the file exits 2."""
    options = asdict(given)
    out = {}
    for name in SETTINGS:
        mine, theirs = options.get(name), stated.get(name)
        if theirs is not None and theirs.value is not None:
            if mine is not None and not _same(mine, theirs.value):
                where = f" ({theirs.where})" if theirs.where else ""
                raise AlcheckError(
                    f"{path}: {option(name)} {mine} contradicts the file, which says "
                    f"{name} {theirs.value!r}{where}: drop the option or pass the right file"
                )
            out[name] = theirs
        elif mine is not None:
            out[name] = Setting(mine, USER)
        else:
            out[name] = Setting(None, UNSTATED)
    return out


def origins(settings: dict[str, Setting]) -> dict[str, str]:
    return {name: s.origin for name, s in settings.items()}


def unstated(settings: dict[str, Setting]) -> list[str]:
    return [name for name, s in settings.items() if s.origin == UNSTATED]
