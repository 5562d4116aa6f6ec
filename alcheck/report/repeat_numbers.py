"""One numbering of repeats (issue 35): what a person reads counts a sweep's passes from 1.

The files keep the index they always stored, counted from 0 (run.json's cells[].repeat, the repeat
column of questions.csv and traces.csv, the seed suffix in cells[].varied), so that shipped
baselines and --resume of older runs read alike; docs/reference/cli-help-notes.md says so. Every
message, table and report line names a repeat through this module.
"""

from __future__ import annotations


def shown(repeat) -> int:
    """The stored 0-based index as a person reads it: repeat 0 is "repeat 1"."""
    return int(repeat) + 1


def cell_name(k, repeat) -> str:
    """'K=3 repeat 2' for the stored (3, 1)."""
    return f"K={k} repeat {shown(repeat)}"


def passes_text(cells, *, sort: bool = True) -> str:
    """'K=1 repeat 2, K=2 repeats 1,2' for the stored (1, 1), (2, 0), (2, 1)."""
    by_k: dict[int, list[int]] = {}
    for k, repeat in cells:
        by_k.setdefault(k, []).append(shown(repeat))
    items = sorted(by_k.items()) if sort else by_k.items()
    return ", ".join(f"K={k} repeat{'s' * (len(r) > 1)} {','.join(map(str, r))}" for k, r in items)
