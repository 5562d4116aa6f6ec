"""`--draft` given several times: the entries one command measures and ranks.

An entry is `[METHOD=]SPEC`: SPEC a folder, a hub id or a glob of folders (`ckpts/step-*`),
METHOD one of `--method`'s choices (default: the command's --method). A method with no checkpoint
is given with nothing after `=` (`ngram=`, `suffix=`). Each entry gets a name, its folder under
--out: the checkpoint's folder name, or the method's, made unique.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from alcheck.errors import AlcheckError

GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Entry:
    name: str  # its run's folder under --out, and its row label
    draft: str  # "" for a method with no checkpoint
    method: str


def draft_values(value) -> list[str]:
    """click's multiple --draft (a tuple), a stored or config-file string, or None -> a list."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [v for v in value if v is not None]


def parse_entries(values: list[str], default_method: str, methods: tuple[str, ...]) -> list[Entry]:
    specs: list[tuple[str, str]] = []
    for value in values:
        method, spec = default_method, value
        head, sep, tail = value.partition("=")
        if sep and head in methods:
            method, spec = head, tail
        elif sep and re.fullmatch(r"[a-z_0-9]+", head):
            raise AlcheckError(
                f"--draft {value}: {head!r} is not a method: use one of {', '.join(methods)} before '='"
            )
        elif not sep and value in methods and not Path(value).exists():
            raise AlcheckError(
                f"--draft {value} names a method, not a checkpoint: write {value}= for a method with no "
                f"checkpoint, or {value}=FOLDER"
            )
        if GLOB_CHARS & set(spec):
            found = sorted(glob.glob(spec), key=_natural)
            if not found:
                raise AlcheckError(f"--draft {value}: the pattern matches nothing: check the path")
            specs += [(method, f) for f in found]
        else:
            specs.append((method, spec))
    seen, entries = {}, []
    for method, spec in specs:
        if (method, spec) in {(e.method, e.draft) for e in entries}:
            raise AlcheckError(f"--draft {spec} is given twice: name each head once")
        base = Path(spec.rstrip("/")).name.replace("/", "_") if spec else method
        name = base if base not in seen else f"{base}-{seen[base] + 1}"
        seen[base] = seen.get(base, 0) + 1
        entries.append(Entry(name, spec, method))
    return entries


def _natural(text: str):
    """step-2 before step-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def step_of(name: str) -> int | None:
    """The last number in an entry's name (a checkpoint's step), or None."""
    numbers = re.findall(r"\d+", name)
    return int(numbers[-1]) if numbers else None
