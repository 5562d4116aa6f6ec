"""--devices: a sweep's (K, repeat) cells spread over one worker process per device.

The parent has claimed the run directory and planned the cells (alcheck/sweep/driver.py). Each worker
(torch.multiprocessing, spawn) builds the plan's backend on its device (backends/registry.py),
loads it, and runs the cells it takes from one shared queue, so a faster device takes more. Cells
are independent (alcheck/sweep/cells.py), so which worker ran one changes no number. Workers only send
events; the parent replays them into the sweep's events, which record each cell in the order of a
one-device run.

A worker that fails ends the run with its error; the parent stops the others, and the cells
already saved stay (finish with --resume). Workers ignore Ctrl-C (the parent stops them) and
exit on their own if the parent dies.
"""

from __future__ import annotations

import os
import queue
import signal
from collections.abc import Callable

import torch
import torch.multiprocessing as mp

from alcheck.errors import AlcheckError
from alcheck.executors.processes import (
    WorkerFailed,
    exit_with_parent,
    injected_failure,
    sigint_ignored,
    stop_processes,
    summarize_exception,
)
from alcheck.sweep.cells import CellPlan, run_cell
from alcheck.sweep.events import RemoteEvents, SweepEvents, is_event, replay

POLL_S = 0.2
JOIN_S = 10.0

# the pids of the last run's workers: tests check that none outlives it
last_worker_pids: list[int] = []


# -- the worker process --------------------------------------------------------------------------


def _worker(wid: int, device: str, plan: CellPlan, threads: int, tasks, results):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    exit_with_parent()
    cell = None
    try:
        torch.set_num_threads(threads)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)  # kernels that follow the current device land on ours
        backend = plan.load_worker_backend(device)
        events = RemoteEvents(lambda message: results.put((wid, message)))
        results.put((wid, ("ready", os.getpid())))
        events.environment(backend.describe())
        oracle: dict = {}
        while (cell := tasks.get()) is not None:
            k, repeat = cell
            events.cell_started(k, repeat)
            injected_failure(k, repeat)
            events.cell_finished(run_cell(plan, backend, k, repeat, events, oracle))
            cell = None
    except AlcheckError as exc:
        results.put((wid, ("error", "alcheck", exc.format_message(), cell)))
    except Exception as exc:  # noqa: BLE001 - any other failure is reported to the parent, which ends the run
        results.put((wid, ("error", "crash", summarize_exception(exc), cell)))
    # returning (exit code 0) lets the queue's feeder thread deliver the last messages


# -- the parent ----------------------------------------------------------------------------------


def run_on_devices(
    plan: CellPlan,
    pending: list[tuple[int, int]],
    devices: list[str],
    events: SweepEvents,
    saved: Callable[[], str] = lambda: "",
) -> None:
    """The pending cells over one worker per device. saved(): the note a failure's message ends
    with (what is saved and how to finish)."""
    devices = devices[: len(pending)]  # a device with no cell to run loads nothing
    threads = max(1, torch.get_num_threads() // len(devices))
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for cell in pending:
        tasks.put(cell)
    for _ in devices:
        tasks.put(None)
    procs: list = []
    last_worker_pids.clear()
    try:
        with sigint_ignored():  # inherited through exec: a Ctrl-C while a worker starts up reaches only us
            for wid, device in enumerate(devices):
                proc = ctx.Process(
                    target=_worker,
                    args=(wid, device, plan, threads, tasks, results),
                    name=f"alcheck-worker-{wid}",
                    daemon=True,
                )
                proc.start()
                procs.append(proc)
                last_worker_pids.append(proc.pid)
        _collect(devices, procs, results, set(pending), events, saved)
        for proc in procs:  # each has taken its None and is leaving
            proc.join(JOIN_S)
    finally:
        stop_processes(procs)
        for q in (tasks, results):
            q.cancel_join_thread()  # what is left in them is not needed
            q.close()


def _collect(devices, procs, results, remaining, events: SweepEvents, saved):
    environments: dict[int, dict] = {}
    while remaining:
        wid, message = _next_message(results, procs, devices, saved)
        if message[0] == "ready":
            continue
        if message[0] == "error":
            _raise_worker_error(devices[wid], wid, *message[1:], saved=saved)
        if not is_event(message):
            raise WorkerFailed(f"worker {wid} sent {message[0]!r}: this is an alcheck bug{saved()}")
        name, args = message
        if name == "environment":  # the run records the first worker's, with every worker's device
            environments[wid] = args[0]
            events.environment(_merged_environment(environments, devices))
        else:
            replay(message, events)
            if name == "cell_finished":
                remaining.discard((args[0].k, args[0].repeat))


def _merged_environment(environments: dict[int, dict], devices: list[str]) -> dict:
    first = environments[min(environments)]
    names = [environments[w]["device_name"] if w in environments else None for w in range(len(devices))]
    return {**first, "devices": list(devices), "device_names": names}


def _next_message(results, procs, devices, saved):
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
                        f"worker {wid} on {devices[wid]} died (exit "
                        f"code {proc.exitcode}: killed, out of host "
                        f"memory, or a crash in native code){saved()}"
                    ) from None
        if all(proc.exitcode is not None for proc in procs):
            try:
                return results.get(timeout=POLL_S)
            except queue.Empty:
                raise WorkerFailed(
                    f"every worker exited before the sweep finished: this is an alcheck bug{saved()}"
                ) from None


def _raise_worker_error(device, wid, kind, text, cell, saved):
    at = f" at K={cell[0]} repeat {cell[1]}" if cell else " while loading"
    if kind == "alcheck":
        raise AlcheckError(f"{device} (worker {wid}){at}: {text}")
    raise WorkerFailed(f"worker {wid} on {device} failed{at}: {text}{saved()}")
