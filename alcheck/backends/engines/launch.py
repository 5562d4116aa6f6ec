"""--engine-cmd: start the engine for one K, wait until it is healthy, stop it afterwards.

The command is a template: `{k}` becomes the K and `{port}` a free port (plain replacement, so a
JSON --speculative-config keeps its braces). It runs without a shell in a session of its own, so
stopping it signals the whole process group (vLLM and SGLang start worker processes), SIGTERM then
SIGKILL; on Linux it also gets SIGTERM if alcheck dies first. Ctrl-C and errors stop it through
EngineBackend.close(), which Sweep.run calls in a finally; SIGTERM to alcheck is turned into an
exit that takes the same path.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from alcheck.backends.engines.failure import failure_line
from alcheck.errors import AlcheckError

STOP_S = 15.0
POLL_S = 0.2
LAST_LINES = 400  # enough to reach the cause above a long traceback (failure.py)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)  # loaded in the parent: the child only calls into it
    except (OSError, AttributeError):
        return None


def _death_signal(libc):
    """preexec_fn: the server gets SIGTERM when alcheck dies, even by SIGKILL (PR_SET_PDEATHSIG)."""

    def set_it():
        try:
            libc.prctl(1, int(signal.SIGTERM))
        except AttributeError:
            pass

    return set_it


class Terminated(SystemExit):
    """SIGTERM to alcheck, raised in the main thread: finally blocks stop the server and the CLI
    prints what is saved, as for Ctrl-C."""


def raise_terminated(signum, frame):
    raise Terminated(128 + signum)


class EngineProcess:
    def __init__(self, template: str, k: int, endpoint: str | None):
        port = free_port() if "{port}" in template else None
        command = template.replace("{k}", str(k)).replace("{port}", str(port))
        try:
            self.args = shlex.split(command)
        except ValueError as exc:
            raise AlcheckError(
                f"--engine-cmd {template!r}: cannot split it into arguments ({exc}): fix its quoting"
            ) from None
        if not self.args:
            raise AlcheckError(
                "--engine-cmd is empty: pass the command that starts the server, e.g. "
                "'vllm serve MODEL --port {port} --speculative-config ...'"
            )
        self.k, self.command = k, command
        # {port}: alcheck chose where it listens (a stored --endpoint of an earlier server is stale)
        self.url = f"http://127.0.0.1:{port}" if port is not None else endpoint.rstrip("/")
        self.lines: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
        self.proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._old_sigterm = None

    def start(self):
        libc = _libc() if sys.platform.startswith("linux") else None
        try:
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_death_signal(libc) if libc is not None else None,
            )
        except OSError as exc:
            raise AlcheckError(
                f"--engine-cmd: cannot start {self.args[0]!r} ({exc.strerror or exc}): "
                "check the command and that it is installed"
            ) from None
        self._reader = threading.Thread(target=self._read, name="alcheck-engine-log", daemon=True)
        self._reader.start()
        self._exit_on_sigterm()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.lines.append(line)

    def _drain(self, timeout_s: float = 2.0):
        """Let the reader take the dead server's last lines (its pipe closes when it is gone)."""
        if self._reader is not None:
            self._reader.join(timeout_s)

    def last_lines(self) -> str:
        lines = [" ".join(line.split())[:200] for line in list(self.lines)[-5:]]
        return " | ".join(lines) if lines else "(it printed nothing)"

    def wait_healthy(self, http, timeout_s: float):
        """Poll GET /health until 200; the server exiting or the time running out stops the run."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self._drain()
                cause = failure_line(list(self.lines))
                said = f"it says: {cause}" if cause else f"its last lines: {self.last_lines()}"
                raise AlcheckError(
                    f"--engine-cmd for K={self.k} exited with code {code} before it was healthy; {said}"
                )
            if http.status("/health") == 200:
                time.sleep(POLL_S)  # a command that exits at once (not a server) must not pass as healthy
                code = self.proc.poll()
                if code is not None:
                    raise AlcheckError(
                        f"--engine-cmd for K={self.k} exited with code {code} although {self.url}/health "
                        "answered: something else serves there; stop it, or use {port} in --engine-cmd"
                    )
                return
            if time.monotonic() > deadline:
                self.stop()
                raise AlcheckError(
                    f"--engine-cmd for K={self.k}: {self.url}/health not ready after {timeout_s:g} s "
                    f"(raise --engine-start-timeout if it loads slowly); its last lines: {self.last_lines()}"
                )
            time.sleep(POLL_S)

    def stop(self):
        """SIGTERM to the process group, SIGKILL after STOP_S; reaped, nothing left behind."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    proc.wait(STOP_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # workers that outlived the leader
            except (ProcessLookupError, PermissionError):
                pass
            if proc.stdout:
                proc.stdout.close()
        self._restore_sigterm()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _exit_on_sigterm(self):
        """SIGTERM to alcheck becomes SystemExit, so finally blocks stop the server (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._old_sigterm = signal.signal(signal.SIGTERM, raise_terminated)

    def _restore_sigterm(self):
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
