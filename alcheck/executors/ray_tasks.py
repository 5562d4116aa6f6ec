"""--executor ray: each pending (K, repeat) cell is one Ray task, on a local Ray or a cluster.

The parent has claimed the run directory and planned the cells. The plan goes to Ray's object store
once; each task runs one cell and returns it, and the parent records each cell as it arrives
(ray.wait), so a killed driver finishes with --resume. A task is named `alcheck-K<k>-r<repeat>`,
so its worker's process title reads `ray::alcheck-K1-r0`.

Loading the pair dominates a small cell, so a worker keeps the pair it loaded (one, keyed by the
run's plan) and the next cell of the same run on that worker reuses it: the cells that share a
loaded pair form a group without the driver choosing one. GPU tasks are given max_calls=0 for the
same reason (Ray's default for them is a fresh process per task).

A task whose worker or node dies is retried by Ray (MAX_RETRIES); cells are deterministic, so a
retry gives the same rows. Exceptions are never retried: an AlcheckError (bad input) ends the run
with its one line, anything else as a WorkerFailed (exit 1).

`--ray-address HOST:PORT` is probed before ray.init, which retries an address no cluster answers
at for ever (issue 50): a TCP connect and an HTTP/2 handshake (Ray's GCS and its client server
speak gRPC), each within ALCHECK_RAY_CONNECT_TIMEOUT_S seconds (default 5); anything else is one
line, exit 2.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.executors.choice import ExecutorChoice, import_ray
from alcheck.executors.processes import TEST_FAIL_ENV, WorkerFailed, injected_failure, summarize_exception
from alcheck.sweep.cells import CellPlan, run_cell
from alcheck.sweep.events import SweepEvents

MAX_RETRIES = 2  # a dead worker's cell runs at most 3 times
POLL_S = 0.5
TEST_KILL_ENV = "ALCHECK_TEST_KILL_CELL"  # "K:REPEAT:DIR": the first attempt exits (only under pytest)
TEST_ATTEMPTS_ENV = "ALCHECK_TEST_ATTEMPTS"  # DIR: each attempt leaves a file there (tests count retries)

CONNECT_TIMEOUT_ENV = "ALCHECK_RAY_CONNECT_TIMEOUT_S"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# an HTTP/2 client's preface and an empty SETTINGS frame; a gRPC server answers with its SETTINGS
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4  # the frame type byte (offset 3 of a frame header)

# this worker process's loaded pair: (plan key, backend, lossless oracle)
_loaded: dict = {}


def task_name(k: int, repeat: int) -> str:
    return f"alcheck-K{k}-r{repeat}"


def task_resources(tensor_parallel_size: int, device: str) -> dict:
    """GPUs for the ranks on CUDA (the CPU's work is the ranks' too), CPUs otherwise."""
    if device.startswith("cuda"):
        return {"num_gpus": tensor_parallel_size, "num_cpus": 1, "max_calls": 0}
    return {"num_cpus": tensor_parallel_size}


# -- the task (runs in a Ray worker) ---------------------------------------------------------------


def _cell_task(plan: CellPlan, plan_key: str, k: int, repeat: int, device: str, test_env: dict):
    """One cell; returns (Cell, environment). device: cpu or cuda (Ray sets CUDA_VISIBLE_DEVICES)."""
    saved_env = {name: os.environ.get(name) for name in test_env}
    os.environ.update(test_env)
    try:
        _injected_death(k, repeat)
        if plan.cfg.tensor_parallel_size > 1:
            return _tensor_parallel_cell(plan, k, repeat, device)
        backend, oracle = _backend_for(plan, plan_key, device)
        backend.use_k(k)
        injected_failure(k, repeat)
        cell = run_cell(plan, backend, k, repeat, None, oracle)
        return cell, {**backend.describe(), "ray": _where()}
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _backend_for(plan: CellPlan, plan_key: str, device: str):
    if _loaded.get("key") != plan_key:
        old = _loaded.pop("backend", None)
        _loaded.clear()
        if old is not None:
            old.close()  # one pair per worker: another run's is dropped before ours loads
        _loaded.update(key=plan_key, backend=plan.load_worker_backend(device), oracle={})
    return _loaded["backend"], _loaded["oracle"]


class _Collected(SweepEvents):
    def __init__(self):
        self.cell, self.env = None, {}

    def environment(self, environment):
        self.env = environment

    def cell_finished(self, cell):
        self.cell = cell


def _tensor_parallel_cell(plan: CellPlan, k: int, repeat: int, device: str):
    """The cell on the task's ranks (its GPUs are cuda:0..N-1 inside the task)."""
    from alcheck.executors.tensor_parallel import run_tensor_parallel

    got = _Collected()
    run_tensor_parallel(plan, [(k, repeat)], got, device, None)
    return got.cell, {**got.env, "ray": _where()}


def _where() -> dict:
    """Where this task ran: run.json keeps it on the cell."""
    import ray

    return {
        "node_ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }


def _injected_death(k: int, repeat: int):
    """Tests kill a worker mid-task once: the first attempt leaves a mark and exits, the retry runs."""
    if "PYTEST_CURRENT_TEST" not in os.environ:
        return
    if os.environ.get(TEST_ATTEMPTS_ENV):
        Path(os.environ[TEST_ATTEMPTS_ENV], f"attempt-{k}-{repeat}-{time.time_ns()}").touch()
    spec = os.environ.get(TEST_KILL_ENV)
    if not spec:
        return
    kk, rr, folder = spec.split(":", 2)
    mark = Path(folder) / f"killed-{kk}-{rr}"
    if (int(kk), int(rr)) == (k, repeat) and not mark.exists():
        mark.touch()
        os._exit(1)


# -- the driver ------------------------------------------------------------------------------------


def run_on_ray(
    plan: CellPlan,
    pending: list[tuple[int, int]],
    events: SweepEvents,
    choice: ExecutorChoice,
    device: str,
    saved: Callable[[], str] = lambda: "",
) -> None:
    """The pending cells as Ray tasks; each recorded through `events` as it arrives. device: the
    sweep's resolved device (cpu, cuda or cuda:N: only its kind reaches the workers)."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:  # no address: a local Ray for this run; an address: connect to that cluster
        if choice.ray_address:
            check_ray_address(choice.ray_address, connect_timeout_s())
        _init_keeping_sigterm(ray, choice.ray_address)
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    resources = task_resources(plan.cfg.tensor_parallel_size, kind)
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False, **resources)(_cell_task)
    plan_ref = ray.put(plan)
    plan_key = f"{os.getpid()}-{time.time_ns()}"
    test_env = _test_env()
    refs = {
        remote.options(name=task_name(k, r)).remote(plan_ref, plan_key, k, r, kind, test_env): (k, r)
        for k, r in pending
    }
    environments: list[dict] = []
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
            for ref in ready:
                k, repeat = refs.pop(ref)
                cell, environment = _result(ray, ref, k, repeat, saved)
                cell.ran_on = {"executor": "ray", **environment.pop("ray", {})}
                if not environments:
                    environments.append(environment)
                    events.environment(_environment(environment, ray, choice, resources))
                events.cell_started(k, repeat)  # the display learns of a remote cell when it arrives
                events.progress(k, repeat, len(cell.rows), cell.generated_tokens)
                events.cell_finished(cell)
    finally:
        for ref in refs:  # an error or Ctrl-C: nothing keeps computing for a run that ended
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        if started:
            ray.shutdown()


def connect_timeout_s() -> float:
    """Seconds a --ray-address may take to answer (ALCHECK_RAY_CONNECT_TIMEOUT_S, default 5)."""
    text = os.environ.get(CONNECT_TIMEOUT_ENV)
    if not text:
        return DEFAULT_CONNECT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise AlcheckError(f"{CONNECT_TIMEOUT_ENV}={text!r}: set it to a number of seconds, e.g. 5")
    return value


def check_ray_address(address: str, timeout_s: float) -> None:
    """One line, exit 2, unless a Ray cluster (gRPC over HTTP/2) answers at HOST:PORT in time.
    `auto` and other forms Ray resolves itself are left to Ray."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or "://" in address.removeprefix("ray://"):
        return
    if not host or not port.isdigit():
        raise AlcheckError(
            f"--ray-address {address}: expected HOST:PORT (the GCS address `ray start --head` prints, "
            "e.g. 10.0.0.1:6379), ray://HOST:PORT or auto"
        )
    cause = f"--ray-address {address}: no Ray cluster answers there"
    fix = (
        "start one with `ray start --head` and pass the address it prints, or leave --ray-address "
        f"out for a local Ray ({CONNECT_TIMEOUT_ENV} sets the wait)"
    )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            if os.environ.get("RAY_USE_TLS", "0") in ("0", ""):  # TLS: only the TCP connect is probed
                reply = _http2_reply(sock)
                if reply is None or len(reply) < 4 or reply[3] != HTTP2_SETTINGS:
                    heard = "nothing" if not reply else repr(reply[:16])
                    raise AlcheckError(
                        f"--ray-address {address} does not answer as a Ray cluster (gRPC) would (it sent "
                        f"{heard} within {timeout_s:g} s; a dashboard's port, 8265?): pass the GCS "
                        "address `ray start --head` prints (port 6379 by default), or ray://HOST:10001"
                    )
    except OSError as exc:
        timed_out = isinstance(exc, TimeoutError)
        reason = (
            f"no answer within {timeout_s:g} s" if timed_out else (exc.strerror or type(exc).__name__).lower()
        )
        raise AlcheckError(f"{cause} ({reason}): {fix}") from None


def _http2_reply(sock: socket.socket) -> bytes | None:
    """The first bytes a server sends back to an HTTP/2 preface; None when it sends nothing in time."""
    try:
        sock.sendall(HTTP2_PREFACE)
        reply = b""
        while len(reply) < 9:
            chunk = sock.recv(9 - len(reply))
            if not chunk:
                break
            reply += chunk
        return reply
    except TimeoutError:
        return None
    except OSError:  # reset by a server that will not speak HTTP/2
        return b""


def _init_keeping_sigterm(ray, address: str | None) -> None:
    """ray.init replaces the driver's SIGTERM handler with sys.exit(15) and leaves it after shutdown;
    the run's own handler (exit 143, what is saved printed, the folder released) is put back."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    if main and before is not None:
        signal.signal(signal.SIGTERM, before)


def _result(ray, ref, k, repeat, saved):
    from ray import exceptions as rex

    at = f"ray task {task_name(k, repeat)} at K={k} repeat {repeat}"
    try:
        cell, environment = ray.get(ref)
    except rex.RayTaskError as exc:
        cause = getattr(exc, "cause", None) or exc
        if isinstance(cause, AlcheckError):
            raise AlcheckError(f"{at}: {cause.format_message()}{saved()}") from None
        raise WorkerFailed(f"{at} failed: {summarize_exception(cause)}{saved()}") from None
    except (rex.WorkerCrashedError, rex.NodeDiedError, rex.OutOfMemoryError, rex.TaskCancelledError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkerFailed(
            f"{at}: its worker died {MAX_RETRIES + 1} times ({type(exc).__name__}: {text}){saved()}"
        ) from None
    environment = dict(environment)
    environment["ray"] = {**environment.get("ray", {}), "task": task_name(k, repeat)}
    return cell, environment


def _environment(first: dict, ray, choice: ExecutorChoice, resources: dict) -> dict:
    try:
        nodes = len([n for n in ray.nodes() if n.get("Alive")])
    except Exception:  # noqa: BLE001
        nodes = None
    return {
        **first,
        "executor": {
            "name": "ray",
            "address": choice.ray_address or "local",
            "ray": ray.__version__,
            "nodes": nodes,
            "task_resources": {k: v for k, v in resources.items() if k != "max_calls"},
            "max_retries": MAX_RETRIES,
        },
    }


def _test_env() -> dict:
    """The failure hooks tests set, for the workers (they were started before the test set them)."""
    if "PYTEST_CURRENT_TEST" not in os.environ:
        return {}
    names = ("PYTEST_CURRENT_TEST", TEST_FAIL_ENV, TEST_KILL_ENV, TEST_ATTEMPTS_ENV)
    return {name: os.environ[name] for name in names if name in os.environ}
