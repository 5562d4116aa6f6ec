"""One console for every command: COLUMNS when it is set (piped output included), the terminal's
width on a terminal, and wide enough for the tables otherwise."""

import os

from rich.console import Console

PIPED_WIDTH = 160  # piped with no COLUMNS: the tables' natural width


def columns() -> int | None:
    """COLUMNS as a usable width, or None when unset or not a number >= 20."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) >= 20 else None


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    width = columns()
    if width is not None:
        return Console(width=width, stderr=stderr)
    if not console.is_terminal:
        console = Console(width=PIPED_WIDTH, stderr=stderr)
    return console
