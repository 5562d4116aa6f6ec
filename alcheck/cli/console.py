"""One console for every command: wide enough for the tables when output is not a terminal."""

from rich.console import Console


def make_console() -> Console:
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    return console
