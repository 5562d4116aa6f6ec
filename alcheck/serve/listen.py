"""Serve the app over HTTP with uvicorn: bind first, print the listening line once connections
are accepted, and stop cleanly (exit 0) on SIGINT or SIGTERM.

The socket is bound before the weights load, so a port in use exits 2 at once; it only starts
listening once the app is up, so a client never connects to a half-started server.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from dataclasses import dataclass

import uvicorn

from alcheck.errors import AlcheckError

GRACEFUL_S = 5  # in-flight requests get this long after SIGINT/SIGTERM


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets, and without it every
    # response (headers, then body) waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        import errno

        fix = (
            "pick another port, or --port 0 for a free one"
            if exc.errno == errno.EADDRINUSE
            else "pass an address of this machine as --host (127.0.0.1, 0.0.0.0 or one of its interfaces)"
        )
        raise AlcheckError(
            f"--host {host} --port {port}: cannot bind ({exc.strerror or exc}): {fix}"
        ) from None
    sock.set_inheritable(True)
    return sock


def url_of(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started=None):
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and self.on_started is not None:
            self.on_started()


def _config(app) -> uvicorn.Config:
    return uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=GRACEFUL_S
    )


def serve_forever(app, host: str, sock: socket.socket) -> None:
    """Block in the main thread until SIGINT/SIGTERM; then return normally (exit 0)."""

    def announce():
        print(f"alcheck serve: listening on {url_of(host, sock)}", flush=True)

    # uvicorn handles both signals while it runs and re-raises the one it caught once it is done:
    # these no-op handlers make that re-raise harmless, so the process ends with status 0
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _Server(_config(app), announce).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    sys.stdout.flush()


@dataclass
class ThreadedServer:
    """A server on a background thread (tests, harnesses): `url`, then `stop()`."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout: float = 10.0):
        self.server.should_exit = True
        self.thread.join(timeout)


def start_in_thread(app, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> ThreadedServer:
    sock = bind(host, port)
    ready = threading.Event()
    server = _Server(_config(app), ready.set)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="alcheck-serve-http", daemon=True
    )
    thread.start()
    if not ready.wait(timeout):
        server.should_exit = True
        raise RuntimeError(f"alcheck serve did not start within {timeout} s")
    return ThreadedServer(url_of(host, sock), server, thread)
