"""Per-step timing and counting for the speed piece: CUDA events around every decoding step (the
host's work included, since a step ends in its device-to-host copy), and kernel launches and host
syncs per step from the profiler and torch's sync-debug mode. On the CPU (dry run) steps are timed
with the wall clock and launches and syncs are not counted."""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass

import torch

LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaLaunchCooperativeKernel")


@dataclass
class Steps:
    """Step times in ms, the first `warm` left out (graph capture, allocator, first kernels)."""

    ms: list[float]
    warm: int

    @property
    def steady(self) -> list[float]:
        return self.ms[self.warm :]

    def summary(self) -> dict:
        xs = sorted(self.steady) or [float("nan")]
        return {
            "step_ms": statistics.median(xs),
            "p10_ms": xs[len(xs) // 10],
            "p90_ms": xs[(9 * len(xs)) // 10],
            "steady_steps": len(self.steady),
        }


class Clock:
    """mark() at each step boundary; intervals() in ms after the run."""

    def __init__(self, device: torch.device):
        self.device, self.marks = device, []

    def mark(self):
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self) -> list[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def time_runner_steps(runner, prompts, new_tokens: int, warm: int) -> tuple[Steps, list]:
    """Every decoding step of runner.generate(prompts, new_tokens): from one step's start to the
    next's (the loop's own host work included, as transformers' per-token time includes its own)."""
    clock = Clock(runner.device)
    inner = runner._step

    def step(running, waiting):
        clock.mark()
        inner(running, waiting)

    runner._step = step
    try:
        results = runner.generate(prompts, new_tokens)
        clock.mark()
    finally:
        del runner._step
    return Steps(clock.intervals(), warm), results


def generate_step_clock(device: torch.device):
    """(a transformers LogitsProcessor marking each decoding step, its clock)."""
    from transformers import LogitsProcessor

    clock = Clock(device)

    class Mark(LogitsProcessor):
        def __call__(self, input_ids, scores):
            clock.mark()
            return scores

    return Mark(), clock


def count_per_step(run, steps_of, device: torch.device) -> dict:
    """Launches and host syncs per decoding step: run(n) decodes n tokens; (count(9) - count(1)) / steps
    leaves out the prefill. None off CUDA."""
    if device.type != "cuda":
        return {"launches_per_step": None, "syncs_per_step": None}
    one, many = _counts(lambda: run(1), device), _counts(lambda: run(9), device)
    steps = max(1, steps_of(many[2]) - steps_of(one[2]))
    return {"launches_per_step": (many[0] - one[0]) / steps, "syncs_per_step": (many[1] - one[1]) / steps}


def _counts(fn, device) -> tuple[int, int, object]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                out = fn()
                torch.cuda.synchronize(device)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    launches = sum(e.count for e in prof.key_averages() if e.key.startswith(LAUNCH_NAMES))
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    return launches, syncs, out
