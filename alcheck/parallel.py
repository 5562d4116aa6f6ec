"""--devices: a sweep's (K, repeat) cells spread over one worker process per device.

The parent has claimed the run directory and prepared the prompts (Sweep.prepare). Each worker
(torch.multiprocessing, spawn) loads the pair on its device and runs the cells it takes from one
shared queue, so a faster device takes more. Cells are independent: request order and sampling
seeds depend only on (seed, K, repeat, turn), so which worker ran a cell changes no number. Only
the parent writes, through Sweep.record_cell (its RunStore), which keeps questions.csv and run.json
in the (K, repeat) order of a one-device run; a worker's sweep has an in-memory store.

A worker that fails ends the run with its error; the parent stops the others, and the cells
already saved stay (finish with --resume). Workers ignore Ctrl-C (the parent stops them) and
exit on their own if the parent dies.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

from alcheck.errors import AlcheckError

TEST_FAIL_ENV = "ALCHECK_TEST_FAIL_CELL"  # "K:REPEAT" or "K:REPEAT:alcheck"; honoured only under pytest
POLL_S = 0.2
JOIN_S = 10.0

# the pids of the last run's workers: tests check that none outlives it
last_worker_pids: list[int] = []


class WorkerFailed(Exception):
    """A worker died or raised something other than AlcheckError: a bug, or the machine's doing."""


# -- the worker process --------------------------------------------------------------------------


def _worker(wid: int, device: str, state: dict, threads: int, tasks, results):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    _exit_with_parent()
    cell = None
    try:
        torch.set_num_threads(threads)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)  # kernels that follow the current device land on ours
        from alcheck.sweep import Sweep

        sweep = Sweep.for_worker(state, device)
        sweep.load_weights()
        results.put(("ready", wid, os.getpid(), sweep.meta["environment"]))
        while (cell := tasks.get()) is not None:
            k, repeat = cell
            results.put(("start", wid, cell))
            _injected_failure(k, repeat)

            def progress(finished, tokens, cell=cell):
                results.put(("progress", wid, cell, finished, tokens))

            results.put(("cell", wid, sweep.run_cell(k, repeat, progress)))
            cell = None
    except AlcheckError as exc:
        results.put(("error", wid, "alcheck", exc.format_message(), cell))
    except Exception as exc:  # noqa: BLE001 - any other failure is reported to the parent, which ends the run
        results.put(("error", wid, "crash", _summary(exc), cell))
    # returning (exit code 0) lets the queue's feeder thread deliver the last messages


def _exit_with_parent():
    """A watcher thread: if the parent dies (even by SIGKILL) this worker exits, never orphaned."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch():
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(3)

    threading.Thread(target=watch, name="alcheck-parent-watch", daemon=True).start()


def _summary(exc: BaseException) -> str:
    """'ValueError: message (at sweep.py:312 in run_cell <- runner.py:80 in generate ...)', one line."""
    head = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    frames = traceback.extract_tb(exc.__traceback__)[-4:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}{': ' + head if head else ''}" + (f" (at {where})" if where else "")


def _injected_failure(k: int, repeat: int):
    """Tests make a worker fail at one cell; nothing outside pytest can trigger it."""
    spec = os.environ.get(TEST_FAIL_ENV)
    if not spec or "PYTEST_CURRENT_TEST" not in os.environ:
        return
    parts = spec.split(":")
    if (int(parts[0]), int(parts[1])) != (k, repeat):
        return
    if parts[2:] == ["alcheck"]:
        raise AlcheckError(f"injected failure at K={k} repeat {repeat}: unset {TEST_FAIL_ENV}")
    raise RuntimeError(f"injected failure at K={k} repeat {repeat}")


# -- the parent ----------------------------------------------------------------------------------


def run_parallel(sweep, on_cell_start=None, on_progress=None, on_cell_done=None) -> dict:
    """Sweep.run for len(sweep.devices) > 1: the missing cells over one worker per device.

    on_progress is called as on_progress(finished, tokens, cell=(k, repeat)): several cells run at once.
    """
    pending = sweep.pending()
    if not pending:
        return sweep.finish()
    devices = sweep.devices[: len(pending)]  # a device with no cell to run loads nothing
    threads = max(1, torch.get_num_threads() // len(devices))
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for cell in pending:
        tasks.put(cell)
    for _ in devices:
        tasks.put(None)
    state = sweep.worker_state()
    procs: list = []
    last_worker_pids.clear()
    try:
        with _sigint_ignored():  # inherited through exec: a Ctrl-C while a worker starts up reaches only us
            for wid, device in enumerate(devices):
                proc = ctx.Process(target=_worker, args=(wid, device, state, threads, tasks, results),
                                   name=f"alcheck-worker-{wid}", daemon=True)
                proc.start()
                procs.append(proc)
                last_worker_pids.append(proc.pid)
        _collect(sweep, devices, procs, results, set(pending), on_cell_start, on_progress, on_cell_done)
        for proc in procs:  # each has taken its None and is leaving
            proc.join(JOIN_S)
    finally:
        _stop(procs)
        for q in (tasks, results):
            q.cancel_join_thread()  # what is left in them is not needed
            q.close()
    return sweep.finish()


def _collect(sweep, devices, procs, results, remaining, on_cell_start, on_progress, on_cell_done):
    environments: dict[int, dict] = {}
    while remaining:
        msg = _next_message(results, procs, devices, sweep)
        kind, wid = msg[0], msg[1]
        if kind == "ready":
            environments[wid] = msg[3]
            sweep.meta["environment"] = _merged_environment(environments, devices)
            sweep.store.write_meta()  # as a one-device run does once the weights are in
        elif kind == "start":
            if on_cell_start:
                on_cell_start(*msg[2])
        elif kind == "progress":
            if on_progress:
                on_progress(msg[3], msg[4], cell=msg[2])
        elif kind == "cell":
            cell = msg[2]
            with _sigint_deferred():  # a Ctrl-C now would leave rows in questions.csv that run.json lacks
                sweep.record_cell(cell)
            remaining.discard((cell.k, cell.repeat))
            if on_cell_done:
                on_cell_done(cell)
            sweep.check_audit(cell)
        elif kind == "error":
            _raise_worker_error(sweep, devices[wid], wid, *msg[2:])


def _merged_environment(environments: dict[int, dict], devices: list[str]) -> dict:
    first = environments[min(environments)]
    names = [environments[w]["device_name"] if w in environments else None for w in range(len(devices))]
    return {**first, "devices": list(devices), "device_names": names}


def _next_message(results, procs, devices, sweep):
    while True:
        try:
            return results.get(timeout=POLL_S)
        except queue.Empty:
            pass
        for wid, proc in enumerate(procs):
            if proc.exitcode not in (None, 0):  # killed, or crashed in native code: no message came
                try:  # unless one is still in the pipe
                    return results.get(timeout=POLL_S)
                except queue.Empty:
                    raise WorkerFailed(
                        f"worker {wid} on {devices[wid]} died (exit code {proc.exitcode}: killed, out of host "
                        f"memory, or a crash in native code){_saved(sweep)}") from None
        if all(proc.exitcode is not None for proc in procs):
            try:
                return results.get(timeout=POLL_S)
            except queue.Empty:
                raise WorkerFailed(f"every worker exited before the sweep finished: this is an alcheck bug{_saved(sweep)}") from None


def _raise_worker_error(sweep, device, wid, kind, text, cell):
    at = f" at K={cell[0]} repeat {cell[1]}" if cell else " while loading"
    if kind == "alcheck":
        raise AlcheckError(f"{device} (worker {wid}){at}: {text}")
    raise WorkerFailed(f"worker {wid} on {device} failed{at}: {text}{_saved(sweep)}")


def _saved(sweep) -> str:
    n = len(sweep.meta.get("cells") or [])
    if not n or not (sweep.out_dir / "run.json").is_file():
        return ""
    return (f"; {n} finished (K, repeat) cell{'s' * (n != 1)} saved in {sweep.out_dir}: "
            f"finish with: alcheck run --resume {sweep.out_dir}")


class _sigint_ignored:
    def __enter__(self):
        try:
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: nothing to inherit
            self.old = None

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False


class _sigint_deferred:
    """Ctrl-C inside the block is raised when it ends, so a cell is saved whole or not at all."""

    def __enter__(self):
        self.caught = False
        try:
            self.old = signal.signal(signal.SIGINT, self._catch)
        except ValueError:  # not the main thread: no signal arrives here
            self.old = None

    def _catch(self, signum, frame):
        self.caught = True

    def __exit__(self, exc_type, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            if self.caught and exc_type is None:
                raise KeyboardInterrupt
        return False


def _stop(procs):
    """Terminate and reap every worker still running (SIGTERM, then SIGKILL): none outlives the run."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(JOIN_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
