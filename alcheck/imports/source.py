"""Reading another tool's file: lines with their numbers, and one-line errors that name the
file and the line (exit 2). Every format module reads through these, so a bad file reads the
same way whichever tool wrote it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from alcheck.errors import AlcheckError


def bad(path: Path, line: int | None, problem: str, fix: str) -> AlcheckError:
    """`<file> line <n>: <problem>: <fix>` (line None: the file as a whole)."""
    where = f"{path} line {line}" if line else f"{path}"
    return AlcheckError(f"{where}: {problem}: {fix}")


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AlcheckError(f"{path}: no such file: check the path") from None
    except IsADirectoryError:
        raise AlcheckError(f"{path} is a directory: pass the file the tool wrote") from None
    except UnicodeDecodeError:
        raise AlcheckError(f"{path} is not UTF-8 text: pass the file the tool wrote") from None
    except OSError as exc:
        raise AlcheckError(f"cannot read {path} ({exc.strerror or exc}): check its permissions") from None


def _no_constants(name: str):
    raise ValueError(f"{name} is not a finite number")


def json_lines(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object fails.
    Lines end at "\n" only: a tool writing JSON unescaped (ensure_ascii off) leaves U+2028, U+0085
    and the like inside its strings, which str.splitlines() would break a line at."""
    found = False
    for number, text in enumerate(read_text(path).split("\n"), start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text, parse_constant=_no_constants)
        except ValueError as exc:
            raise bad(
                path,
                number,
                f"not JSON ({str(exc).splitlines()[0]})",
                f"pass the JSON-lines file {fmt} writes",
            ) from None
        if not isinstance(obj, dict):
            raise bad(path, number, "not a JSON object", f"pass the JSON-lines file {fmt} writes")
        found = True
        yield number, obj
    if not found:
        raise bad(path, None, "holds no records", f"pass the file {fmt} writes")


def json_documents(path: Path, fmt: str) -> list[tuple[int, dict]]:
    """One JSON object (indented or not), or JSON lines (one object per line, as appended runs
    write them): (line number, object) each."""
    text = read_text(path)
    try:
        obj = json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return list(json_lines(path, fmt))
    if not isinstance(obj, dict):
        raise bad(path, 1, "not a JSON object", f"pass the JSON file {fmt} writes")
    return [(1, obj)]


def count(obj: dict, key: str, path: Path, line: int, fix: str, *, minimum: int = 0) -> int:
    """A non-negative integer field (a float that is a whole number passes: JSON writers differ)."""
    value = obj.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
    ):
        state = "missing" if key not in obj else f"{value!r}, not an integer"
        raise bad(path, line, f"`{key}` is {state}", fix)
    if value < minimum:
        raise bad(path, line, f"`{key}` is {value}, below {minimum}", fix)
    return int(value)


def number(obj: dict, key: str, path: Path, line: int, fix: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        state = "missing" if key not in obj else f"{value!r}, not a number"
        raise bad(path, line, f"`{key}` is {state}", fix)
    return float(value)


def _listed(obj: dict, key: str, path: Path, line: int, fix: str, item) -> list:
    values = obj.get(key)
    if not isinstance(values, list):
        state = "missing" if key not in obj else "not a list"
        raise bad(path, line, f"`{key}` is {state}", fix)
    return [item({key: v}, key, path, line, fix) for v in values]


def counts(obj: dict, key: str, path: Path, line: int, fix: str) -> list[int]:
    """A list of non-negative integers."""
    return _listed(obj, key, path, line, fix, count)


def numbers(obj: dict, key: str, path: Path, line: int, fix: str) -> list[float]:
    return _listed(obj, key, path, line, fix, number)
