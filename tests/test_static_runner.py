"""The static runner (issue 22) against its oracle, today's paged runner: token for token and
count for count (outputs, steps, accepted, accepted per position, finish reasons, preemptions),
with EAGLE-1 and EAGLE-3 heads, K = 0..5, preemption, EOS inside an accepted run, forced small
buckets; and it stays on the static path for those runs (no silent fallback to the eager step)."""

from __future__ import annotations

import pytest
from conftest import MAX_TOKENS
from eagle3_pair import build_pair, make_prompts

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.paged import PagedRunner
from alcheck.runner.static.runner import StaticRunner


def key(results):
    return [
        (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason, r.preemptions)
        for r in results
    ]


def step_keys(engine) -> list[tuple]:
    """(kind, K, batch bucket, width) of every step buffer the engine holds."""
    return [name[1] for name in engine.state if isinstance(name, tuple) and name[0] == "static"]


def both(target, head, prompts, k, max_tokens=MAX_TOKENS, eos=None, engine=None, **cfg):
    """(paged results, static results, the static runner) on the same settings."""
    cfg.setdefault("block_size", 4)
    eos = target.eos_token_ids if eos is None else eos
    out = []
    for cls in (PagedRunner, StaticRunner):
        runner = cls(
            target.model,
            proposer_for(head) if k else None,
            eos,
            RunnerConfig(num_spec_tokens=k, **cfg),
            engine=engine if cls is StaticRunner else None,
        )
        out.append(runner.generate(prompts, max_tokens))
    return out[0], out[1], runner


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 5])
def test_static_equals_paged_eagle1(pair, prompts, k):
    target, head = pair
    paged, static, runner = both(target, head, prompts, k)
    assert key(static) == key(paged)
    assert runner.static_steps > 0
    if k:
        assert 1.0 < sum(r.steps + r.accepted for r in paged) / sum(r.steps for r in paged) < k + 1


def test_static_equals_paged_on_a_random_gqa_pair(random_dirs, tmp_path):
    from alcheck.models.loading import load_eagle, load_target

    target = load_target(str(random_dirs[0]))
    head = load_eagle(str(random_dirs[1]), target)
    prompts = make_prompts(target.model.config.vocab_size, n=6, seed=4)
    for k in (1, 4):
        paged, static, _ = both(target, head, prompts, k)
        assert key(static) == key(paged)


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory):
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_target

    dirs = build_pair(tmp_path_factory.mktemp("eagle3"))
    target = load_target(str(dirs["target"]))
    heads = {name: load_eagle3(str(dirs[name]), target) for name in ("eagle", "plain")}
    return target, heads, make_prompts(target.model.config.vocab_size, n=6)


@pytest.mark.parametrize("name, k", [("eagle", 1), ("eagle", 2), ("eagle", 3), ("eagle", 5), ("plain", 3)])
def test_static_equals_paged_eagle3(eagle3, name, k):
    target, heads, prompts = eagle3
    paged, static, runner = both(target, heads[name], prompts, k, max_tokens=40)
    assert key(static) == key(paged)
    assert runner.static_steps > 0


@pytest.mark.parametrize("k", [0, 3])
def test_static_equals_paged_under_preemption(pair, prompts, k):
    target, head = pair
    paged, static, _ = both(target, head, prompts, k, num_blocks=36)
    assert sum(r.preemptions for r in paged) > 0
    assert key(static) == key(paged)


@pytest.mark.parametrize("buckets, max_batch", [((1,), 128), ((2, 3), 128), ((1, 2, 4, 8), 128), ((), 3)])
def test_forced_small_buckets_chunk_the_batch_with_the_same_results(pair, prompts, buckets, max_batch):
    target, head = pair
    paged, static, runner = both(target, head, prompts, 3, batch_buckets=buckets, max_batch_size=max_batch)
    assert key(static) == key(paged)
    used = {step_key[2] for step_key in step_keys(runner.engine)}
    assert used <= set(runner.buckets) and max(used) <= (max(buckets) if buckets else max_batch)


def test_eos_inside_an_accepted_run(pair, prompts):
    """EOS set to a token the pair accepts as a draft mid-run: the step's later tokens are cut,
    and both runners count the whole step (1 + a) before the cut."""
    target, head = pair
    paged0, _, _ = both(target, head, prompts[:1], 5)
    cut = False
    for eos in dict.fromkeys(paged0[0].output_ids[3:20]):
        paged, static, _ = both(target, head, prompts, 5, eos=[eos])
        assert key(static) == key(paged)
        cut |= any(r.finish_reason == "eos" and len(r.output_ids) < 1 + r.steps + r.accepted for r in paged)
    assert cut  # at least one EOS fell inside an accepted run


def test_one_engine_serves_every_k_with_its_buffers(pair, prompts):
    target, head = pair
    engine = Engine()
    for k in (3, 1, 0, 3, 5):
        paged, static, _ = both(target, head, prompts, k, engine=engine)
        assert key(static) == key(paged)
    assert {step_key[1] for step_key in step_keys(engine)} == {
        0,
        1,
        3,
        5,
    }  # buffers per K, kept on the engine


# -- trees ------------------------------------------------------------------------------------------

SHAPES = [(2, 2, 4), (3, 3, 9), (3, 2, 5), (4, 2, 10), (1, 3, 4)]  # (K, topk, T), as test_tree_oracle's


@pytest.mark.parametrize("k, topk, t", SHAPES)
def test_static_tree_equals_paged(pair, prompts, k, topk, t):
    target, head = pair
    paged, static, runner = both(target, head, prompts, k, topk=topk, num_draft_tokens=t)
    assert key(static) == key(paged)
    assert runner.static_steps > 0 and runner.step_fn.__name__ == "tree_step"


@pytest.mark.parametrize("k, topk, t", [(3, 2, 6), (4, 3, 12)])
def test_static_tree_equals_paged_eagle3(eagle3, k, topk, t):
    target, heads, prompts = eagle3
    paged, static, _ = both(target, heads["eagle"], prompts, k, max_tokens=40, topk=topk, num_draft_tokens=t)
    assert key(static) == key(paged)


def test_static_tree_equals_paged_under_preemption_and_small_buckets(pair, prompts):
    target, head = pair
    paged, static, _ = both(
        target, head, prompts, 3, topk=2, num_draft_tokens=6, num_blocks=40, batch_buckets=(1, 3)
    )
    assert sum(r.preemptions for r in paged) > 0
    assert key(static) == key(paged)


def test_the_exact_topk_equals_stable_topk_under_ties():
    import torch

    from alcheck.runner.static.topk import exact_topk
    from alcheck.runner.tree import stable_topk

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(2, 300, (1,), generator=g))
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        x = torch.randint(-4, 4, (3, n), generator=g).float() * 0.5  # many exact ties, zeros of both signs
        x[0, : min(n, 3)] = -0.0
        x[1, ::5] = float("-inf")  # EAGLE-3's unmapped ids
        if trial % 4 == 0:
            x = torch.randn(2, 3, n, generator=g)
        want, got = stable_topk(x, k), exact_topk(x, k)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]), (n, k)


# -- a target run through transformers' modeling code -------------------------------------------------

from arch_pairs import arch_loaded, arch_pair, arch_prompts  # noqa: E402,F401 - fixtures


@pytest.mark.parametrize("arch", ["qwen3", "mistral"])
def test_static_equals_paged_on_transformers_targets(arch_loaded, arch):  # noqa: F811 - the fixture
    target, eagle, eagle3 = arch_loaded(arch)
    prompts = arch_prompts(target.model.config.vocab_size, n=5)
    for head, k in ((eagle, 3), (eagle3, 2)):
        paged, static, runner = both(target, head, prompts, k, max_tokens=30)
        assert key(static) == key(paged) and runner.static_steps > 0
