"""`alcheck run --tensor-parallel-size N`: the sweep's cells on N tensor-parallel ranks.

Every rank runs the same cells in the same order on the same prompts (its own shard of the target,
the whole head); only rank 0 reports. Its events reach the parent process through
alcheck.tp.launch.run_ranks(on_message=...), and the parent - which claimed the run directory -
replays them into the sweep's events, which write each finished cell as it arrives, exactly as a
one-process run does, so an interrupted tensor-parallel run resumes like any other. Under torchrun
every process is a rank and rank 0's own sweep writes (the CLI gives the other ranks a sweep that
writes nothing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from alcheck.errors import AlcheckError
from alcheck.executors.processes import WorkerFailed, injected_failure
from alcheck.sweep.cells import CellPlan, run_cell
from alcheck.sweep.events import RemoteEvents, SweepEvents, replay
from alcheck.tp.launch import RankFailed, run_ranks


def run_tensor_parallel(
    plan: CellPlan,
    pending: list[tuple[int, int]],
    events: SweepEvents,
    device: str,
    devices: list[str] | None,
    saved: Callable[[], str] = lambda: "",
) -> None:
    """device / devices: --device, or --devices with one device per rank. saved(): the note a
    failure's message ends with (what is saved and how to finish)."""
    try:
        run_ranks(
            plan.cfg.tensor_parallel_size,
            _rank_cells,
            plan,
            pending,
            device=device,
            devices=devices,
            on_message=lambda message: replay(message, events),
        )
    except AlcheckError as exc:  # one rank's one-line error, plus what is saved and how to finish
        raise AlcheckError(f"{exc.format_message()}{saved()}") from None
    except RankFailed as exc:  # a bug or a killed rank, not bad input: exit 1, like a failed --devices worker
        raise WorkerFailed(f"{exc}{saved()}") from None


def _rank_cells(tp, plan: CellPlan, pending: list[tuple[int, int]]):
    pending = _agreed_cells(tp, plan, pending)
    backend = plan.load_worker_backend(str(tp.device), tp=tp)
    # ranks other than 0 compute in lockstep and say nothing
    events = RemoteEvents(tp.send) if tp.send is not None else SweepEvents()
    events.environment(backend.describe())
    oracle: dict = {}
    for k, repeat in pending:
        if tp.rank == tp.size - 1:  # tests make the last rank fail at one cell
            injected_failure(k, repeat)
        events.cell_started(k, repeat)
        events.cell_finished(run_cell(plan, backend, k, repeat, events, oracle))


def _agreed_cells(tp, plan: CellPlan, pending: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Under torchrun each process built its own plan and read its own copy of the run directory:
    every rank runs rank 0's cells, and a rank whose settings or prompts differ from rank 0's stops
    the run (ranks running different prompts in lockstep would sum partial products of different
    requests)."""
    if tp.size == 1:
        return pending
    import torch.distributed as dist

    mine = hashlib.sha256(
        json.dumps(
            [plan.cfg.to_dict(), plan.prompts_turn1, plan.turns_to_run],
            sort_keys=True,
            default=str,
            allow_nan=False,
        ).encode()
    ).hexdigest()
    box = [pending, mine] if tp.rank == 0 else [None, None]
    dist.broadcast_object_list(box, src=0, group=tp.group)
    if box[1] != mine:
        raise AlcheckError(
            f"rank {tp.rank}'s settings or prompts differ from rank 0's: start every rank with the "
            "same arguments, checkpoints and run directory"
        )
    return [tuple(cell) for cell in box[0]]
