"""The cells in this process, one after another, on the sweep's own loaded backend."""

from __future__ import annotations

from alcheck.sweep.cells import CellPlan, run_cell
from alcheck.sweep.events import SweepEvents


def run_local(
    plan: CellPlan, backend, pending: list[tuple[int, int]], events: SweepEvents, oracle: dict
) -> None:
    for k, repeat in pending:
        backend.use_k(k)  # outside the cell's clock: an engine may start a server here
        events.cell_started(k, repeat)
        cell = run_cell(plan, backend, k, repeat, events, oracle)
        events.environment(backend.describe())  # an engine learns its server's settings as it runs
        events.cell_finished(cell)
