"""Start N tensor-parallel ranks and run one function on each: `run_ranks(n, fn, *args)`.

- Alone: N processes are spawned on this machine (torch.multiprocessing, spawn), joined into one
  process group on a free local port (gloo on CPU, NCCL on CUDA; rank r uses devices[r]), and
  each runs fn(tp, *args) with its alcheck.tp.group.TPGroup. rank 0's return value comes back.
- Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, for several machines): this
  process is one rank; it joins through env:// and runs fn in-process; every rank returns its own
  value (only rank 0's should be written anywhere).

Failure: the first rank to raise ends the run. The parent terminates every other rank (they may
be blocked in a collective that will never complete) and raises that rank's one-line error:
AlcheckError keeps its message (exit 2), anything else becomes RankFailed. Ctrl-C reaches the
whole process group; the ranks ignore it and the parent stops them, and a rank whose parent dies
exits on its own, so no rank outlives the run.
"""

from __future__ import annotations

import os
import pickle
import queue
import socket

import torch
import torch.multiprocessing as mp

from alcheck.errors import AlcheckError
from alcheck.executors.processes import exit_with_parent, sigint_ignored, stop_processes, summarize_exception
from alcheck.sweep.placement import rank_devices
from alcheck.tp.group import init_group, teardown_group, under_torchrun

POLL_S = 0.1
JOIN_S = 10.0
DRAIN_S = 0.5

last_rank_pids: list[int] = []  # the last spawned ranks' pids: tests check that none outlives a run


class RankFailed(Exception):
    """A rank raised something other than AlcheckError, or died: a bug, or the machine's doing."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    n: int,
    fn,
    *args,
    device: str = "cpu",
    devices: list[str] | None = None,
    threads: int | None = None,
    start_method: str = "spawn",
    on_message=None,
):
    """fn(tp: TPGroup, *args) on each of n ranks; returns rank 0's result (see the module doc).
    on_message: rank 0's tp.send(payload) calls on_message(payload) in this process, in order, while
    the ranks run (a sweep's finished cells, to be written as they finish); other ranks' tp.send is None.
    fn and args must pickle (a module-level function). start_method "fork" starts CPU ranks in
    well under a second when the parent has already imported torch and transformers (spawned
    ranks import them again: seconds); CUDA ranks are always spawned (a CUDA context does not
    survive fork)."""
    if under_torchrun():
        return _run_torchrun(n, fn, args, device, devices, on_message)
    if n < 1:
        raise ValueError(f"run_ranks needs n >= 1, got {n}")
    placed = rank_devices(n, device, devices)
    threads = threads or max(1, torch.get_num_threads() // n)
    if start_method not in ("spawn", "fork"):
        raise ValueError(f"start_method must be 'spawn' or 'fork', got {start_method!r}")
    ctx = mp.get_context("spawn" if any(d.startswith("cuda") for d in placed) else start_method)
    results = ctx.Queue()
    init = f"tcp://127.0.0.1:{free_port()}"
    procs = []
    last_rank_pids.clear()
    try:
        with sigint_ignored():  # inherited through exec: a Ctrl-C while a rank starts reaches only us
            for rank in range(n):
                proc = ctx.Process(
                    target=_rank_main,
                    args=(rank, n, placed[rank], init, threads, fn, args, results, on_message is not None),
                    name=f"alcheck-tp-rank-{rank}",
                    daemon=True,
                )
                proc.start()
                procs.append(proc)
                last_rank_pids.append(proc.pid)
        return _collect(procs, results, placed, on_message)
    finally:
        stop_processes(procs)
        results.cancel_join_thread()
        results.close()


def _run_torchrun(n, fn, args, device, devices, on_message=None):
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != n:
        raise AlcheckError(
            f"--tensor-parallel-size {n} but torchrun started {size} processes: "
            f"pass --nproc-per-node (times --nnodes) = {n}, or --tensor-parallel-size {size}"
        )
    local = int(os.environ.get("LOCAL_RANK", rank))
    if devices:
        where = devices[rank]
    elif str(device).startswith("cuda"):
        where = f"cuda:{local}"  # one GPU per process on each machine
    else:
        where = "cpu"
    tp = init_group(rank, size, torch.device(where), "env://")
    tp.send = on_message if rank == 0 else None
    try:
        return fn(tp, *args)
    finally:
        teardown_group()


def _rank_main(rank, size, device, init, threads, fn, args, results, forward=False):
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    exit_with_parent()
    torch.set_num_threads(threads)
    try:
        tp = init_group(rank, size, torch.device(device), init)
        if forward and rank == 0:
            tp.send = lambda payload: results.put(("msg", rank, _by_value(payload)))
        value = fn(tp, *args)
        results.put(("done", rank, _by_value(value if rank == 0 else None)))
        teardown_group()
    except AlcheckError as exc:
        results.put(("error", rank, "alcheck", exc.format_message()))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which ends the run
        results.put(("error", rank, "crash", summarize_exception(exc)))
    # returning (exit code 0) lets the queue's feeder thread deliver the last message


def _by_value(obj) -> bytes:
    """Plain pickle, so tensors travel by value. The queue's own pickler (torch's reductions) would
    pass a tensor as a shared-memory handle that the parent fetches from the rank's process later,
    and fails with 'connection reset' when the rank has already exited."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _collect(procs, results, placed, on_message=None):
    done, value = set(), None
    while len(done) < len(procs):
        try:
            msg = results.get(timeout=POLL_S)
        except queue.Empty:
            msg = _check_alive(procs, results, placed, done)
            if msg is None:
                continue
        kind, rank, *rest = msg
        if kind == "msg":
            on_message(pickle.loads(rest[0]))
            continue
        if kind == "error":
            if on_message is not None:
                _drain(results, on_message)
            _raise(rank, placed[rank], *rest)
        done.add(rank)
        if rank == 0:
            value = pickle.loads(rest[0])
    return value


def _drain(results, on_message):
    """Before ending the run on a rank's error: rank 0's messages sent before it (a finished cell)
    may still be in flight from its process (each process feeds the queue on its own), so take
    them until the queue stays quiet for DRAIN_S, and no finished result is lost."""
    while True:
        try:
            kind, _rank, *rest = results.get(timeout=DRAIN_S)
        except queue.Empty:
            return
        if kind == "msg":
            on_message(pickle.loads(rest[0]))


def _check_alive(procs, results, placed, done):
    for rank, proc in enumerate(procs):
        if rank in done or proc.exitcode is None:
            continue
        try:  # its last message may still be in the pipe: the caller handles it, in order
            return results.get(timeout=POLL_S)
        except queue.Empty:
            raise RankFailed(
                f"tensor-parallel rank {rank} on {placed[rank]} died (exit code {proc.exitcode}: "
                "killed, out of memory, or a crash in native code)"
            ) from None
    return None


def _raise(rank, device, kind, text):
    if kind == "alcheck":
        raise AlcheckError(f"tensor-parallel rank {rank} on {device}: {text}")
    raise RankFailed(f"tensor-parallel rank {rank} on {device} failed: {text}")
