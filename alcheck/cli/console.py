"""One console for every command: COLUMNS when it is set (piped output included), the terminal's
width on a terminal, and 80 columns when piped with no COLUMNS.

Piped with no COLUMNS, tables and their captions fit 80 columns (report/table.py `fitted` stacks
a table that does not), while a message (a plain string: a note, a warning, a gate's FAIL line)
stays one line, so that a log is read and grepped whole. COLUMNS=200 gives the wide tables.

No console highlights text by itself (rich's highlighter would colour "Intel", "(R)" and digits of
a device name at random): colour comes only from the markup and the tables' own styles.
"""

import os

from rich.console import Console
from rich.text import Text

PIPED_WIDTH = 80  # piped with no COLUMNS: what a pager, a CI log viewer or an email shows whole


class PipedConsole(Console):
    """80 columns for tables; each message printed as one line."""

    def print(self, *objects, **kwargs):
        if "soft_wrap" not in kwargs and all(isinstance(o, str | Text) for o in objects):
            kwargs["soft_wrap"] = True
        super().print(*objects, **kwargs)


def columns() -> int | None:
    """COLUMNS as a usable width, or None when unset or not a number >= 20."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) >= 20 else None


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    width = columns()
    if width is not None:
        return Console(width=width, stderr=stderr, highlight=False)
    if not console.is_terminal:
        console = PipedConsole(width=PIPED_WIDTH, stderr=stderr, highlight=False)
    return console
