"""One long-lived engine per loaded pair (issue 22): the KV pool and the GPU warm-up are reused
across generate() calls, and every result equals a fresh runner's (the oracle: today's runner,
built per call)."""

from __future__ import annotations

import pytest
from conftest import MAX_TOKENS

from alcheck.methods.table import proposer_for
from alcheck.runner import kv_budget
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.paged import PagedRunner

GIB = 1 << 30


def key(results):
    return [
        (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason, r.preemptions)
        for r in results
    ]


def run(pair, prompts, engine, k, **cfg):
    target, head = pair
    cfg.setdefault("block_size", 4)
    runner = PagedRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, **cfg),
        engine=engine,
    )
    return runner.generate(prompts, MAX_TOKENS), runner


# a sweep's calls: cells at K=1..3 with both turns' prompt sets, sampled cells, target-only passes
CALLS = [
    (1, {}),
    (0, {}),
    (2, {"temperature": 1.0, "seed": 11}),
    (3, {}),
    (0, {}),
    (3, {"num_blocks": 36}),
    (2, {"temperature": 0.7, "seed": 3, "draft_sampling": "sampled"}),
    (2, {"topk": 2, "num_draft_tokens": 5}),
]


def test_one_engine_across_a_sweep_equals_a_fresh_runner_per_call(pair, prompts):
    engine = Engine()
    longer = [p + p[:5] for p in prompts]  # a later turn: longer prompts need a larger pool
    for i, (k, cfg) in enumerate(CALLS):
        batch = longer if i % 2 else prompts
        shared, _ = run(pair, batch, engine, k, **cfg)
        fresh, _ = run(pair, batch, None, k, **cfg)
        assert key(shared) == key(fresh), (k, cfg)
    # the pools grew a few times (target, draft, a longer turn), not once per call
    assert engine.allocations <= 5
    assert set(engine.pools) == {"target", "draft"}


def test_a_reused_pool_keeps_the_block_count_a_fresh_runner_chooses(pair, prompts):
    engine = Engine()
    _, big = run(pair, [p + p for p in prompts], engine, 3)
    _, small = run(pair, prompts, engine, 3)
    _, fresh = run(pair, prompts, None, 3)
    assert small.kv.num_blocks == fresh.kv.num_blocks < big.kv.num_blocks
    assert small.kv_cache.shape[2] == big.kv.num_blocks  # the tensor is the larger one, reused
    assert small.kv_cache.data_ptr() == big.kv_cache.data_ptr()


# -- on a fake GPU: the warm-up runs once while it covers the calls ----------------------------------


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(blocks: int, per_block: int, total: int = 10 * GIB):
        free = total - int(0.9 * total) + blocks * per_block
        monkeypatch.setattr(kv_budget, "sizes_from_memory", lambda device: True)
        monkeypatch.setattr(kv_budget, "device_memory", lambda device: (free, total))

    return install


def per_block(pair, with_head=True):
    target, head = pair
    layers = list(target.model.attention_layers) + (list(head.attention_layers) if with_head else [])
    return sum(kv_budget.block_bytes(1, 4, a.num_kv_heads, a.head_dim, 4) for a in layers)


def test_the_gpu_warm_up_runs_once_while_it_covers_the_calls(pair, prompts, fake_gpu):
    fake_gpu(10_000, per_block(pair))
    engine = Engine()
    first, runner = run(pair, prompts, engine, 3)
    assert engine.warm_ups == 1 and runner.kv_pool["warm_ups"] == 1
    for k in (3, 2, 1, 0, 3):  # smaller K and target-only passes are covered by the K=3 warm-up
        got, runner = run(pair, prompts, engine, k)
        assert key(got) == key(run(pair, prompts, None, k)[0])
    assert engine.warm_ups == 1
    run(pair, [p + p for p in prompts], engine, 3)  # a longer turn: measured again, at the larger shape
    run(pair, prompts, engine, 3)
    assert engine.warm_ups == 2
    run(pair, prompts, engine, 4)  # more drafts per step than measured
    assert engine.warm_ups == 3


def test_a_tight_gpu_pool_stays_within_its_budget_across_calls(pair, prompts, greedy, fake_gpu):
    """Target-only passes fit more blocks (no draft KV); the pools together never exceed the
    budget: a pool that must grow lets the others go."""
    fake_gpu(30, per_block(pair))
    engine = Engine()
    for k in (3, 0, 3, 0):
        results, runner = run(pair, prompts, engine, k)
        assert [r.output_ids for r in results] == [g.output_ids for g in greedy]
        held = sum(p.numel() * p.element_size() for p in engine.pools.values())
        assert held <= engine.budget.pool_bytes
    assert engine.warm_ups == 1
