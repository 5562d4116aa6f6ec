"""Issue 50: `run --executor ray --ray-address` to a place no Ray cluster answers is one line, exit 2,
within seconds (it hung for over 10 minutes in Ray's reconnect loop). Loopback addresses only."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from alcheck.errors import AlcheckError
from alcheck.executors import ray_tasks

pytest.importorskip("ray", reason="ray is not installed (pip install 'alcheck[ray]')")

RUN = ["--method", "ngram", "--ks", "1", "--repeats", "1", "--limit", "2", "--max-tokens", "8"]
RUN += ["--reference", "none", "--executor", "ray"]
LIMIT_S = 120  # far above the connect timeout; the old code was still retrying after 10 minutes


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_alcheck(tmp_path, address: str) -> tuple[int, str, float]:
    env = {**os.environ, "ALCHECK_RAY_CONNECT_TIMEOUT_S": "2", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [
        sys.executable,
        "-m",
        "alcheck",
        "run",
        *RUN,
        "--ray-address",
        address,
        "--out",
        str(tmp_path / "r"),
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"alcheck run --ray-address {address} still running after {LIMIT_S} s")
    return proc.returncode, output, time.monotonic() - start


def test_an_unreachable_ray_address_is_one_line_not_a_hang(tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    code, output, _ = run_alcheck(tmp_path, address)
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert code == 2, output
    assert len(errors) == 1 and f"--ray-address {address}: no Ray cluster answers there" in errors[0], output
    assert "ray start --head" in errors[0]


@pytest.fixture
def http_server():
    """An HTTP/1.1 server on loopback: what answers at a Ray dashboard's port (8265), not Ray's GCS."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_port_that_is_not_rays_is_refused_in_one_line(http_server):
    for address in (f"127.0.0.1:{http_server}", f"ray://127.0.0.1:{http_server}"):
        with pytest.raises(AlcheckError, match="does not answer as a Ray cluster") as info:
            ray_tasks.check_ray_address(address, timeout_s=2)
        assert "\n" not in info.value.message


def test_a_closed_port_is_refused_quickly_and_auto_is_left_to_ray():
    start = time.monotonic()
    with pytest.raises(AlcheckError, match="no Ray cluster answers there"):
        ray_tasks.check_ray_address(f"127.0.0.1:{closed_port()}", timeout_s=2)
    assert time.monotonic() - start < 10
    ray_tasks.check_ray_address("auto", timeout_s=2)  # Ray finds the cluster itself: nothing to probe
    with pytest.raises(AlcheckError, match="HOST:PORT"):
        ray_tasks.check_ray_address("127.0.0.1", timeout_s=2)


def test_the_connect_timeout_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(ray_tasks.CONNECT_TIMEOUT_ENV, "7.5")
    assert ray_tasks.connect_timeout_s() == 7.5
    monkeypatch.setenv(ray_tasks.CONNECT_TIMEOUT_ENV, "soon")
    with pytest.raises(AlcheckError, match=ray_tasks.CONNECT_TIMEOUT_ENV):
        ray_tasks.connect_timeout_s()
