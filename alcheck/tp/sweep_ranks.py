"""`alcheck run --tensor-parallel-size N`: the sweep's cell loop on N tensor-parallel ranks.

Every rank runs the same cells in the same order on the same prompts (its own shard of the
target, the whole head); only rank 0 reports. Its messages reach the parent process through
alcheck.tp.launch.run_ranks(on_message=...), and the parent - which claimed the run directory -
writes each finished cell as it arrives, exactly as a one-process run does, so an interrupted
tensor-parallel run resumes like any other. Under torchrun every process is a rank and rank 0's
own sweep writes (the CLI gives the other ranks a store that writes nothing).
"""

from __future__ import annotations

from alcheck.errors import AlcheckError
from alcheck.parallel import WorkerFailed, _injected_failure, _saved, _sigint_deferred
from alcheck.tp.launch import RankFailed, run_ranks


def run_tensor_parallel(sweep, on_cell_start=None, on_progress=None, on_cell_done=None) -> dict:
    pending = sweep.pending()
    if not pending:
        return sweep.finish()

    def on_message(msg):
        kind, payload = msg
        if kind == "ready":
            sweep.meta["environment"] = payload
            sweep.store.write_meta()  # as a one-process run does once the weights are in
        elif kind == "start" and on_cell_start:
            on_cell_start(*payload)
        elif kind == "progress" and on_progress:
            on_progress(*payload)
        elif kind == "cell":
            with _sigint_deferred():  # a Ctrl-C now would leave rows in questions.csv that run.json lacks
                sweep.record_cell(payload)
            if on_cell_done:
                on_cell_done(payload)
            sweep.check_audit(payload)

    cfg = sweep.cfg
    try:
        run_ranks(cfg.tensor_parallel_size, _rank_sweep, sweep.worker_state(), pending,
                  device=sweep.backend.device, devices=cfg.devices, on_message=on_message)
    except AlcheckError as exc:  # one rank's one-line error, plus what is saved and how to finish
        raise AlcheckError(f"{exc.format_message()}{_saved(sweep)}") from None
    except RankFailed as exc:  # a bug or a killed rank, not bad input: exit 1, like a failed --devices worker
        raise WorkerFailed(f"{exc}{_saved(sweep)}") from None
    return sweep.finish()


def _rank_sweep(tp, state: dict, pending: list[tuple[int, int]]):
    from alcheck.sweep import Sweep

    pending = _agreed_cells(tp, state, pending)
    worker = Sweep.for_worker(state, str(tp.device), tp=tp)
    worker.load_weights()
    send = tp.send or (lambda payload: None)  # ranks other than 0 compute in lockstep and say nothing
    send(("ready", worker.backend.describe()))
    for k, repeat in pending:
        if tp.rank == tp.size - 1:  # tests make the last rank fail at one cell (parallel._injected_failure)
            _injected_failure(k, repeat)
        send(("start", (k, repeat)))
        cell = worker.run_cell(k, repeat, lambda finished, tokens: send(("progress", (finished, tokens))))
        send(("cell", cell))


def _agreed_cells(tp, state: dict, pending: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Under torchrun each process built its own prompts and read its own copy of the run
    directory: every rank runs rank 0's cells, and a rank whose settings or prompts differ from
    rank 0's stops the run (ranks running different prompts in lockstep would sum partial
    products of different requests)."""
    if tp.size == 1:
        return pending
    import hashlib
    import json

    import torch.distributed as dist

    mine = hashlib.sha256(json.dumps([state["config"], state["prompts_turn1"], state["turns_to_run"]],
                                     sort_keys=True, default=str, allow_nan=False).encode()).hexdigest()
    box = [pending, mine] if tp.rank == 0 else [None, None]
    dist.broadcast_object_list(box, src=0, group=tp.group)
    if box[1] != mine:
        raise AlcheckError(f"rank {tp.rank}'s settings or prompts differ from rank 0's: start every rank with the "
                           "same arguments, checkpoints and run directory")
    return [tuple(cell) for cell in box[0]]
