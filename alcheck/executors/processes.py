"""Process helpers the multi-process executors share: no child outlives the run, Ctrl-C is the
parent's to handle, a cell is saved whole or not at all, and a failure is one line."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import traceback
from pathlib import Path

from alcheck.errors import AlcheckError

TEST_FAIL_ENV = "ALCHECK_TEST_FAIL_CELL"  # "K:REPEAT" or "K:REPEAT:alcheck"; honoured only under pytest
JOIN_S = 10.0


class WorkerFailed(Exception):
    """A worker or rank died or raised something other than AlcheckError: a bug, or the machine's doing."""


def exit_with_parent():
    """A watcher thread: if the parent dies (even by SIGKILL) this process exits, never orphaned."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch():
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(3)

    threading.Thread(target=watch, name="alcheck-parent-watch", daemon=True).start()


def summarize_exception(exc: BaseException) -> str:
    """'ValueError: message (at cells.py:312 in run_cell <- paged.py:80 in generate ...)', one line."""
    head = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    frames = traceback.extract_tb(exc.__traceback__)[-4:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}{': ' + head if head else ''}" + (f" (at {where})" if where else "")


def injected_failure(k: int, repeat: int):
    """Tests make a worker or rank fail at one cell; nothing outside pytest can trigger it."""
    spec = os.environ.get(TEST_FAIL_ENV)
    if not spec or "PYTEST_CURRENT_TEST" not in os.environ:
        return
    parts = spec.split(":")
    if (int(parts[0]), int(parts[1])) != (k, repeat):
        return
    if parts[2:] == ["alcheck"]:
        raise AlcheckError(f"injected failure at K={k} repeat {repeat}: unset {TEST_FAIL_ENV}")
    raise RuntimeError(f"injected failure at K={k} repeat {repeat}")


class sigint_ignored:
    """Ctrl-C ignored inside the block; children started in it inherit that through exec."""

    def __enter__(self):
        try:
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: nothing to inherit
            self.old = None

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False


class signals_deferred:
    """Ctrl-C and SIGTERM inside the block reach their handler when it ends, so a cell is saved
    whole or not at all (a SIGTERM mid-save would leave rows in questions.csv that run.json lacks)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self.caught: list[int] = []
        self.old: dict = {}
        try:
            for signum in self.SIGNALS:
                self.old[signum] = signal.signal(signum, self._catch)
        except ValueError:  # not the main thread: no signal arrives here
            self.old = {}

    def _catch(self, signum, frame):
        if signum not in self.caught:
            self.caught.append(signum)

    def __exit__(self, exc_type, *exc):
        for signum, handler in self.old.items():
            signal.signal(signum, handler)
        if exc_type is None:  # the block's own exception wins over a deferred signal
            for signum in self.caught:
                _deliver(signum, self.old[signum])
        return False


def _deliver(signum: int, handler):
    """What the signal would have done outside the block: its handler runs (Ctrl-C's raises
    KeyboardInterrupt, the run's SIGTERM handler raises Terminated), or the default action."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def stop_processes(procs):
    """Terminate and reap every process still running (SIGTERM, then SIGKILL): none outlives the run."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(JOIN_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
