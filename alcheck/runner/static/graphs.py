"""CUDA graphs of the static step: one per step key (kind, K, batch bucket, width), sharing one
memory pool, kept on the engine so every runner of the pair replays them (nano-vllm's
capture_cudagraph, for the whole speculative step instead of one decode forward).

A step is a pure function of its input buffer and the KV pool: it writes the same KV and returns
the same output however often it runs. So the first step of a key runs eagerly (loading kernels,
and giving that step's result), the graph is captured after it, and later steps replay it. With
`check` on (gpu-check), each replay also runs the eager step on the same input and counts any
output that differs bit for bit. A reallocated KV pool moves the addresses the graphs read: they
are dropped and captured again. A key whose capture fails runs eagerly, with the reason kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepGraphs:
    device: torch.device
    pool: object = None  # torch.cuda.graph_pool_handle(), shared by every graph
    graphs: dict = field(default_factory=dict)  # key -> (CUDAGraph, its output tensor)
    failed: dict = field(default_factory=dict)  # key -> why capture failed
    generation: int = -1  # engine.allocations the graphs were captured at
    captures: int = 0
    replays: int = 0
    check: bool = False
    mismatches: int = 0

    @classmethod
    def for_engine(cls, engine, device: torch.device, enabled: bool = True) -> StepGraphs | None:
        """The engine's graphs on a CUDA device; None elsewhere (the step then always runs eagerly)."""
        if not enabled or device.type != "cuda":
            return None
        graphs = engine.state.get("graphs")
        if graphs is None:
            graphs = engine.state["graphs"] = cls(device, torch.cuda.graph_pool_handle())
        return graphs

    def run(self, key: tuple, step, generation: int) -> torch.Tensor:
        if generation != self.generation:
            self.graphs.clear()
            self.generation = generation
        entry = self.graphs.get(key)
        if entry is None:
            out = step()
            if key not in self.failed:
                self._capture(key, step)
            return out
        graph, out = entry
        graph.replay()
        self.replays += 1
        if self.check and not torch.equal(step(), out):
            self.mismatches += 1
        return out

    def _capture(self, key: tuple, step) -> None:
        try:
            self.graphs[key] = self._record(step)
        except Exception as exc:  # noqa: BLE001 - a host sync or an uncapturable op: run this key eagerly
            self.failed[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return
        self.captures += 1

    def _record(self, step) -> tuple:
        """(a graph with .replay(), the output tensor its replays refill)."""
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                out = step()
        finally:
            torch.cuda.synchronize(self.device)
        return graph, out
