"""`--shard I/N`: share I of N of a sweep's (K, repeat) cells, and the fingerprint shares agree on.

The full cell list is the sweep's own order (each K of --ks, each repeat), and share I takes
every N-th cell from the I-th (round robin), so shares of a SLURM array or a shell loop cover
every cell exactly once, and each share mixes small and large K (similar wall times).

A share's run.json records `shard`: {index, count, cells, sweep}, `sweep` being the fingerprint of
the whole sweep (sweep_fingerprint): what `alcheck merge` compares before it joins shares.
Torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alcheck.config import NOT_RESULT_AFFECTING
from alcheck.errors import AlcheckError
from alcheck.rundir.fingerprint import settings_fingerprint

SHARD_FORMAT = "I/N with 1 <= I <= N, e.g. --shard 2/4"
# settings whose value as typed may differ between shares of one sweep: paths to the same files
# (their contents are in the checkpoint and input fingerprints) and device/dtype (compared as
# resolved, in the runtime fingerprint), as --resume compares them
AS_TYPED = ("target", "draft", "chat_template", "device", "dtype")


@dataclass(frozen=True, slots=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def cells(self, all_cells: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """This share's cells, in the sweep's order: every count-th from index-1."""
        return list(all_cells[self.index - 1 :: self.count])

    def record(self, all_cells: list[tuple[int, int]], sweep: str) -> dict:
        return {
            "index": self.index,
            "count": self.count,
            "cells": [list(c) for c in self.cells(all_cells)],
            "sweep": sweep,
        }


def parse_shard(text: str | None) -> Shard | None:
    """'2/4' -> Shard(2, 4); None when not given; anything else is one line, exit 2."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise AlcheckError(f"--shard {text!r}: cannot read it: pass {SHARD_FORMAT}")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise AlcheckError(f"--shard {text}: N must be at least 1: pass {SHARD_FORMAT}")
    if not 1 <= index <= count:
        raise AlcheckError(f"--shard {text}: I must be in 1..{count}: pass {SHARD_FORMAT}")
    return Shard(index, count)


def sweep_cells(ks: list[int], repeats: int) -> list[tuple[int, int]]:
    """Every (K, repeat) cell of a sweep, in the order a whole run computes and writes them."""
    return [(int(k), r) for k in ks for r in range(int(repeats))]


def check_shard_size(shard: Shard, all_cells: list[tuple[int, int]]):
    """A share with no cell is a job that measures nothing: refused before anything is written."""
    if shard.count > len(all_cells):
        n = len(all_cells)
        raise AlcheckError(
            f"--shard {shard}: the sweep has only {n} (K, repeat) cell{'s' * (n != 1)}, so some shares "
            f"would have none: pass N <= {n}"
        )


def stored_shard(meta: dict) -> Shard | None:
    """The share a run.json records, or None for a whole run."""
    entry = meta.get("shard")
    if not isinstance(entry, dict):
        return None
    return Shard(int(entry["index"]), int(entry["count"]))


def resumed_shard(typed: Shard | None, meta: dict, run_dir) -> Shard | None:
    """--resume keeps the share the run measured; a --shard typed now must be that one."""
    stored = stored_shard(meta)
    if typed is None or typed == stored:
        return stored
    if stored is None:
        raise AlcheckError(f"--resume {run_dir} is a whole run, not a share: drop --shard {typed}")
    raise AlcheckError(
        f"--resume {run_dir} holds share {stored} of its sweep, not {typed}: resume it with --shard "
        f"{stored} (or without --shard), and run share {typed} into its own --out"
    )


def sweep_fingerprint(meta: dict) -> str:
    """One sha over what decides every number of the whole sweep: its result-affecting settings
    (paths and device/dtype as typed left out: see AS_TYPED) and the recorded fingerprints of the
    checkpoints, the runtime (device kind, dtype, attention kernel) and the inputs."""
    config = meta.get("config") or {}
    settings = {k: v for k, v in config.items() if k not in NOT_RESULT_AFFECTING and k not in AS_TYPED}
    return settings_fingerprint({"settings": settings, "fingerprints": meta.get("fingerprints") or {}})
