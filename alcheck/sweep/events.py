"""What happens during a sweep, for whoever shows or records it: one events object, one method per event.

The sweep (alcheck/sweep/driver.py) records each finished cell and passes every event on to the caller's
events (the CLI's live display, a test's list). Executors that run cells in other processes send
events as plain messages (`RemoteEvents`) and the parent replays them (`replay`), so the one
dispatch is written once here. A leaf: it imports nothing of alcheck.
"""

from __future__ import annotations

from collections.abc import Callable


class SweepEvents:
    """Every method does nothing here: override the ones you need."""

    def environment(self, environment: dict) -> None:
        """The backend described itself: loaded, a worker or rank ready, or a server's settings learned."""

    def cell_started(self, k: int, repeat: int) -> None:
        """A (K, repeat) cell begins (several may run at once with --devices)."""

    def progress(self, k: int, repeat: int, finished: int, tokens: int) -> None:
        """`finished` more requests of that cell are done; `tokens`: generated so far in its current call."""

    def cell_finished(self, cell) -> None:
        """A cell (alcheck.sweep.cells.Cell) is complete: its rows, counts and timing."""


EVENTS = ("environment", "cell_started", "progress", "cell_finished")


class RemoteEvents(SweepEvents):
    """Events as messages ("name", args) through `send` (a queue's put, a rank's pipe)."""

    def __init__(self, send: Callable[[tuple], None]):
        self.send = send

    def environment(self, environment):
        self.send(("environment", (environment,)))

    def cell_started(self, k, repeat):
        self.send(("cell_started", (k, repeat)))

    def progress(self, k, repeat, finished, tokens):
        self.send(("progress", (k, repeat, finished, tokens)))

    def cell_finished(self, cell):
        self.send(("cell_finished", (cell,)))


def is_event(message) -> bool:
    return isinstance(message, tuple) and len(message) == 2 and message[0] in EVENTS


def replay(message: tuple, events: SweepEvents) -> None:
    """A RemoteEvents message, delivered to `events` in this process."""
    name, args = message
    if name not in EVENTS:
        raise ValueError(f"not a sweep event: {name!r}")
    getattr(events, name)(*args)
