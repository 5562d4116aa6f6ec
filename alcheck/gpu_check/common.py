"""What every gpu-check piece shares: its record, the run's settings, timing on the device."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Piece:
    key: str
    title: str
    status: str = "pass"  # pass | fail | skip | error
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = ""):
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        if not ok and self.status == "pass":
            self.status = "fail"

    def skip(self, note: str):
        self.status = "skip"
        self.notes.append(note)

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "title": self.title,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "notes": self.notes,
            "checks": self.checks,
            "data": self.data,
        }


@dataclass
class Context:
    dry_run: bool
    device: torch.device
    out_dir: Path
    deadline: float  # time.perf_counter() by which every piece must be done
    shared: dict = field(default_factory=dict)  # results one piece hands to a later one

    def piece_deadline(self, budget_s: float) -> float:
        return min(time.perf_counter() + budget_s, self.deadline)


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """(wall seconds, fn's result), the device's queue drained before and after."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def pooled_al(results) -> float:
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps if steps else float("nan")


def counts_consistent(results, k: int) -> bool:
    """The runner's own invariants: K drafts per step, per-position counts summing to accepted."""
    return all(
        r.drafted == k * r.steps and sum(r.accepted_per_pos) == r.accepted and r.accepted <= r.drafted
        for r in results
    )
