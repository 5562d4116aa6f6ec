"""The CUDA-graph bookkeeping of the static runner (runner/static/graphs.py), on the CPU with a
stand-in for torch.cuda.CUDAGraph that records the step and refills one output tensor on replay:
the first step of a key runs eagerly and captures, later ones replay; replays give the eager
runner's results; check mode counts replays that differ from the eager step; a reallocated KV pool
drops every graph; a key whose capture fails runs eagerly with the reason kept."""

from __future__ import annotations

import torch
from conftest import MAX_TOKENS

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.paged import PagedRunner
from alcheck.runner.static.graphs import StepGraphs
from alcheck.runner.static.runner import StaticRunner


class FakeGraph:
    def __init__(self, step):
        self.step, self.out = step, step()

    def replay(self):
        self.out.copy_(self.step())


class FakeGraphs(StepGraphs):
    def _record(self, step):
        graph = FakeGraph(step)
        return graph, graph.out


def runner_on(pair, engine, k=3, **cfg):
    target, head = pair
    runner = StaticRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, block_size=4, **cfg),
        engine=engine,
    )
    if "graphs" not in engine.state:
        engine.state["graphs"] = FakeGraphs(torch.device("cpu"))
    runner.graphs = engine.state["graphs"]
    return runner


def outputs(results):
    return [(r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos)) for r in results]


def test_replays_give_the_eager_results_and_capture_once_per_key(pair, prompts):
    target, head = pair
    engine = Engine()
    runner = runner_on(pair, engine)
    got = runner.generate(prompts, MAX_TOKENS)
    want = PagedRunner(
        target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=3, block_size=4)
    ).generate(prompts, MAX_TOKENS)
    graphs = engine.state["graphs"]
    assert outputs(got) == outputs(want)
    assert (
        graphs.captures == len(graphs.graphs) and graphs.replays == runner.static_steps - graphs.captures > 0
    )
    assert not graphs.failed
    again = runner_on(pair, engine).generate(
        prompts, MAX_TOKENS
    )  # a second cell replays what the first captured
    assert outputs(again) == outputs(want) and graphs.captures == len(graphs.graphs)


def test_check_mode_counts_replays_that_differ(pair, prompts):
    engine = Engine()
    graphs = FakeGraphs(torch.device("cpu"), check=True)
    engine.state["graphs"] = graphs
    runner_on(pair, engine).generate(prompts[:3], 20)
    assert graphs.replays > 0 and graphs.mismatches == 0

    class Drifting(FakeGraph):
        def replay(self):
            super().replay()
            self.out[0, 1] += 1  # a replay that computes something else than the eager step

    class DriftingGraphs(FakeGraphs):
        def _record(self, step):
            graph = Drifting(step)
            return graph, graph.out

    drifting = DriftingGraphs(torch.device("cpu"), check=True)
    engine = Engine()
    engine.state["graphs"] = drifting
    runner_on(pair, engine).generate(prompts[:3], 20)
    assert drifting.mismatches == drifting.replays > 0


def test_a_reallocated_pool_drops_the_graphs(pair, prompts):
    engine = Engine()
    runner_on(pair, engine).generate(prompts[:2], 20)
    graphs = engine.state["graphs"]
    first = graphs.captures
    runner_on(pair, engine).generate([p * 4 for p in prompts], 20)  # longer prompts: the pool grows
    assert graphs.generation == engine.allocations and graphs.captures > first


def test_a_failed_capture_runs_that_key_eagerly(pair, prompts):
    target, head = pair

    class Failing(FakeGraphs):
        def _record(self, step):
            raise RuntimeError("operation not permitted when stream is capturing")

    engine = Engine()
    engine.state["graphs"] = Failing(torch.device("cpu"))
    got = runner_on(pair, engine).generate(prompts, MAX_TOKENS)
    graphs = engine.state["graphs"]
    assert (
        graphs.captures == 0 and graphs.failed and all("capturing" in why for why in graphs.failed.values())
    )
    want = PagedRunner(
        target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=3, block_size=4)
    ).generate(prompts, MAX_TOKENS)
    assert outputs(got) == outputs(want)
