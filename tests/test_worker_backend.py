"""A --devices worker or tensor-parallel rank loads the target's tokenizer once: the backend it
builds and the cells it runs share it (tokenizers are not pickled with the plan)."""

from __future__ import annotations

import pickle

from alcheck.config import RunConfig
from alcheck.models import loading
from alcheck.sweep import cells
from alcheck.sweep.driver import Sweep
from alcheck.sweep.events import SweepEvents


def test_a_worker_loads_the_tokenizer_once(pair_dirs, tmp_path, monkeypatch):
    cfg = RunConfig(
        target=str(pair_dirs[0]),
        draft=str(pair_dirs[1]),
        ks=[1],
        repeats=1,
        limit=2,
        max_tokens=4,
        block_size=4,
        reference="none",
    )
    sweep = Sweep(cfg, tmp_path / "run", write=False)
    sweep.prepare()
    plan = pickle.loads(pickle.dumps(sweep.plan))  # what a worker receives
    assert plan.tokenizer is None
    loads = []
    for module in (cells, loading):
        real = module.load_tokenizer
        monkeypatch.setattr(
            module, "load_tokenizer", lambda *a, _real=real, **kw: loads.append(a) or _real(*a, **kw)
        )
    backend = plan.load_worker_backend("cpu")
    cell = cells.run_cell(plan, backend, 1, 0, SweepEvents(), {})
    assert len(loads) == 1, loads
    assert backend.tokenizer is plan.tokenizer and cell.rows
