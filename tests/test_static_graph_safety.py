"""Graph safety of the static step without a GPU (issue 22): under torch.compile(fullgraph=True,
backend=eager) the step function traces as one graph, once per (K, batch bucket, width), and never
again across steps. A host sync (.item(), .tolist(), bool(tensor), a data-dependent shape) would
fail the fullgraph trace; a Python value that changes from step to step would be frozen into the
graph and show up as a second compile of the same key. The negative controls prove the test sees
both."""

from __future__ import annotations

import pytest
import torch
from conftest import MAX_TOKENS
from eagle3_pair import build_pair, make_prompts

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner
from alcheck.runner.static.chain import chain_step
from alcheck.runner.static.runner import StaticRunner


class Compiled:
    """The step under torch.compile with an eager backend that records every graph it is given,
    and the step keys the runner asked for."""

    def __init__(self, fn):
        self.graphs: list[tuple] = []  # the int64 input shapes (the step's meta buffer) per compile
        self.keys: list[tuple] = []
        self.compiled = torch.compile(fn, fullgraph=True, backend=self.backend, dynamic=False)

    def backend(self, gm, example_inputs):
        self.graphs.append(
            tuple(
                tuple(x.shape)
                for x in example_inputs
                if isinstance(x, torch.Tensor) and x.dtype == torch.long
            )
        )
        return gm.forward

    def __call__(self, runner, meta, k, width, *draws):
        self.keys.append((k, *meta.shape, width))
        return self.compiled(runner, meta, k, width, *draws)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=256):
        yield
    torch._dynamo.reset()


def run(target, head, prompts, k, step=None, max_tokens=MAX_TOKENS, **cfg):
    cfg.setdefault("block_size", 4)
    runner = StaticRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, **cfg),
    )
    if step is not None:
        runner.step_fn = step
    return runner.generate(prompts, max_tokens), runner


def paged(target, head, prompts, k, max_tokens=MAX_TOKENS, **cfg):
    cfg.setdefault("block_size", 4)
    runner = PagedRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, **cfg),
    )
    return runner.generate(prompts, max_tokens)


def outputs(results):
    return [(r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos)) for r in results]


def assert_once_per_key(step: Compiled):
    distinct = set(step.keys)
    assert len(step.keys) > len(distinct)  # steps repeated keys: a recompile would have shown
    assert len(step.graphs) == len(distinct), (len(step.graphs), sorted(distinct))


@pytest.mark.parametrize("k, buckets", [(0, ()), (3, ()), (3, (1, 2, 4, 8)), (5, (3,))])
def test_the_chain_step_traces_once_per_bucket(pair, prompts, k, buckets):
    target, head = pair
    step = Compiled(chain_step)
    results, runner = run(target, head, prompts, k, step, batch_buckets=buckets)
    assert_once_per_key(step)
    assert len(set(step.keys)) >= 2  # several buckets or widths were exercised
    assert outputs(results) == outputs(paged(target, head, prompts, k))


def test_the_sampled_chain_step_traces_once_per_bucket(pair, prompts):
    """Temperature > 0: the draws come in as a buffer, so the trace holds no generator state."""
    target, head = pair
    step = Compiled(chain_step)
    compiled, _ = run(target, head, prompts, 3, step, temperature=1.0, seed=2)
    assert_once_per_key(step)
    plain, _ = run(target, head, prompts, 3, temperature=1.0, seed=2)
    assert outputs(compiled) == outputs(plain)


def test_the_eagle3_chain_step_traces_once_per_bucket(tmp_path):
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_target

    dirs = build_pair(tmp_path)
    target = load_target(str(dirs["target"]))
    head = load_eagle3(str(dirs["eagle"]), target)
    prompts = make_prompts(target.model.config.vocab_size, n=5)
    step = Compiled(chain_step)
    results, _ = run(target, head, prompts, 2, step, max_tokens=30)
    assert_once_per_key(step)
    assert outputs(results) == outputs(paged(target, head, prompts, 2, max_tokens=30))


# -- negative controls: what the test catches ---------------------------------------------------------


def test_a_host_sync_in_the_step_fails_the_trace(pair, prompts):
    target, head = pair

    def syncing(runner, meta, k, width):
        out = chain_step(runner, meta, k, width)
        if int(out[0, 0]) > k:  # a branch on a device value: the host waits for the device
            out = out + 1
        return out

    with pytest.raises(Exception, match="(?i)data.dependent|item|graph break|unsupported"):
        run(target, head, prompts[:2], 2, Compiled(syncing))


def test_a_frozen_python_value_shows_as_a_second_compile(pair, prompts):
    target, head = pair
    calls = []

    def frozen(runner, meta, k, width):
        calls.append(1)
        return chain_step(runner, meta, k, width) + 0 * len(
            calls
        )  # a per-step Python int baked into the graph

    step = Compiled(frozen)
    run(target, head, prompts[:1], 2, step, max_tokens=8)
    assert len(step.graphs) > len(set(step.keys))


@pytest.mark.parametrize("k, topk, t, buckets", [(3, 2, 6, ()), (2, 3, 7, (1, 2, 4, 8))])
def test_the_tree_step_traces_once_per_bucket(pair, prompts, k, topk, t, buckets):
    from alcheck.runner.static.tree import tree_step

    target, head = pair
    step = Compiled(tree_step)
    results, _ = run(target, head, prompts, k, step, topk=topk, num_draft_tokens=t, batch_buckets=buckets)
    assert_once_per_key(step)
    assert outputs(results) == outputs(paged(target, head, prompts, k, topk=topk, num_draft_tokens=t))
