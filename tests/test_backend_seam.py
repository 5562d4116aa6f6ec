"""The sweep's seam (issue 14): the cell loop on a Backend, writing through a RunStore that a
process other than the writer (tensor-parallel ranks > 0) runs with write=False."""

from __future__ import annotations

import json

import pandas as pd

from alcheck.backends.builtin import BuiltinBackend
from alcheck.config import RunConfig
from alcheck.sweep.cells import run_cell
from alcheck.sweep.driver import Sweep
from alcheck.sweep.events import SweepEvents


def config(pair_dirs, **kw) -> RunConfig:
    return RunConfig(
        target=str(pair_dirs[0]),
        draft=str(pair_dirs[1]),
        ks=[1, 2],
        repeats=1,
        limit=2,
        max_tokens=8,
        block_size=4,
        reference="none",
        **kw,
    )


class Collect(SweepEvents):
    def __init__(self, cells):
        self.cells = cells

    def cell_finished(self, cell):
        self.cells.append(cell)


def files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


def test_a_non_writing_sweep_computes_the_same_cells_and_writes_nothing(pair_dirs, tmp_path):
    writer = Sweep(config(pair_dirs), tmp_path / "w")
    writer.run()
    assert isinstance(writer.backend, BuiltinBackend)
    written = pd.read_csv(tmp_path / "w" / "questions.csv", dtype=str, keep_default_na=False)

    cells = []
    silent = Sweep(config(pair_dirs), tmp_path / "silent", write=False)
    meta = silent.run(Collect(cells))
    assert not (tmp_path / "silent").exists()  # not even the folder
    assert [(c.k, c.repeat) for c in cells] == [(1, 0), (2, 0)] and meta["status"] == "complete"
    mine = pd.DataFrame([{c: str(v) for c, v in row.items()} for cell in cells for row in cell.rows])
    pd.testing.assert_frame_equal(mine, written[list(mine.columns)])
    assert [c["k"] for c in meta["cells"]] == [1, 2]


def test_a_non_writing_sweep_resumes_from_the_writers_files_without_touching_them(pair_dirs, tmp_path):
    out = tmp_path / "run"
    first = Sweep(config(pair_dirs, **{}), out)
    first.prepare()
    first.backend.load()
    first.store.write_meta()
    first.store.record_cell(run_cell(first.plan, first.backend, 1, 0))  # the writer saved K=1 only
    before = files(out)
    reader = Sweep(config(pair_dirs), out, resume=True, write=False)
    assert reader.pending() == [(2, 0)]
    reader.run()
    assert files(out) == before
    assert json.loads((out / "run.json").read_text())["status"] == "partial"
