"""The line of a dead server's output that says what went wrong (pure Python).

A server that dies while starting ends its output with traceback frames; the exception line that
names the cause sits after them (vLLM: `... ValidationError: 1 validation error for ModelConfig`,
then the indented `Value error, User-specified max_model_len (4096) is greater than the derived
max_model_len ...`). vLLM's API server also wraps an engine-core failure in a last exception that
says "See root cause above": the root cause is the engine core's own traceback, printed earlier
under a `(EngineCore pid=N)` prefix. So: the last traceback's exception that is not such a pointer,
with its first indented detail line; without a traceback, the last ERROR log line. Tracebacks that
vLLM logs line by line (behind its process and logger prefixes) count as tracebacks.
"""

from __future__ import annotations

import re

# vLLM's process prefix "(EngineCore pid=2) ", then its logger's "ERROR 12-01 20:36:47 [core.py:1510] "
PREFIX = re.compile(r"^\([\w-]+ pid=\d+\)\s?")
LOGGER = re.compile(r"^(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\] ")
POINTERS = ("root cause above", "stack trace above")  # an exception that only points at an earlier one
MAX_CHARS = 400


def _exceptions(lines: list[str]) -> list[str]:
    """Each traceback's exception line, plus its first indented detail line when there is one."""
    found = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Traceback (most recent call last)"):
            i += 1
            continue
        i += 1
        while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):  # frames, code, carets
            i += 1
        if i >= len(lines):
            break
        text = lines[i].strip()
        detail = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith(" ") else ""
        if detail and not detail.lower().startswith("for further information"):
            text = f"{text}: {detail}"
        found.append(text)
        i += 1
    return found


def failure_line(raw_lines: list[str]) -> str | None:
    """The cause of the failure as one line, or None when the output names none."""
    logged = [PREFIX.sub("", line.rstrip()) for line in raw_lines]
    lines = [LOGGER.sub("", line) for line in logged]
    causes = _exceptions(lines)
    named = [c for c in causes if not any(p in c.lower() for p in POINTERS)]
    if named or causes:
        return _one_line((named or causes)[-1])
    errors = [text for text, line in zip(lines, logged) if re.match(r"(ERROR|CRITICAL)\b", line)]
    return _one_line(errors[-1]) if errors else None


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."
