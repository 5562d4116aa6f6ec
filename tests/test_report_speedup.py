"""The tables show a run's speedup against its target-only pass when run.json's cells carry it
(`target_only_wall_s`, `target_only_tokens`; docs/reference/run-directory.md), and nothing when they
do not."""

from __future__ import annotations

import pytest
from fake_runs import make_meta, make_questions

from alcheck.report.speedup import TOTAL_VS_TARGET_ONLY, speedups
from alcheck.report.table import markdown_table


def meta_with(cells_extra):
    meta = make_meta(make_questions({1: 1.7, 2: 2.1}, n_questions=10, repeats=2))
    for cell, extra in zip(meta["cells"], cells_extra):
        cell.update(extra)
    return meta


def test_speedup_is_total_tokens_over_time_against_the_target_only_pass():
    meta = meta_with(
        [
            {"target_only_wall_s": 2.0, "target_only_tokens": 200},
            {"target_only_wall_s": 0.0, "target_only_tokens": 0},
        ]
        * 2
    )
    cells = meta["cells"]
    base = 200 * 2 / (2.0 * 2)  # every cell with a target-only pass: 100 tokens/s
    for k in (1, 2):
        mine = [c for c in cells if c["k"] == k]
        spec = sum(c["generated_tokens"] for c in mine) / sum(
            c["wall_s"] - c["target_only_wall_s"] for c in mine
        )
        assert speedups(meta, k) == {TOTAL_VS_TARGET_ONLY: pytest.approx(spec / base)}
    text = markdown_table(meta)
    assert TOTAL_VS_TARGET_ONLY in text.splitlines()[0]
    assert f"{speedups(meta, 1)[TOTAL_VS_TARGET_ONLY]:.2f}×" in text


def test_no_speedup_column_without_a_target_only_pass():
    meta = meta_with([{}] * 4)
    assert speedups(meta, 1) == {} and "speedup" not in markdown_table(meta)
