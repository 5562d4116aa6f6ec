"""The CPU runner's prompt cache (runner/prompt_cache.py): a prompt's prefill computed once per
engine, and every result equal to a runner that computes it again (the oracle: --no-prompt-cache,
which runs the same per-prompt forwards without keeping them)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import MAX_TOKENS
from eagle3_pair import load_eagle_head_pair

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.engine import Engine
from alcheck.runner.paged import PagedRunner
from alcheck.runner.prompt_cache import PromptCache


@pytest.fixture(scope="module")
def eagle3_pair(tmp_path_factory):
    return load_eagle_head_pair(tmp_path_factory.mktemp("eagle3"))


def key(results):
    return [
        (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason, r.preemptions)
        for r in results
    ]


def runner(pair, engine, k, **cfg):
    target, head = pair
    cfg.setdefault("block_size", 4)
    return PagedRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, **cfg),
        engine=engine,
    )


CASES = [
    pytest.param(3, {}, id="chain"),
    pytest.param(0, {}, id="target-only"),
    pytest.param(2, {"temperature": 0.8, "seed": 5}, id="sampled"),
    pytest.param(2, {"topk": 2, "num_draft_tokens": 5}, id="tree"),
    pytest.param(3, {"num_blocks": 30}, id="preempting"),
]


@pytest.mark.parametrize("k,cfg", CASES)
def test_a_warm_cache_changes_no_result(pair, prompts, k, cfg):
    engine = Engine()
    runner(pair, engine, k, **cfg).generate(prompts, MAX_TOKENS)  # fills the cache
    hits_before = engine.prompts.hits
    # another order (another batch composition, other preemptions and draws): warm equals cold
    order = list(reversed(prompts))
    warm = runner(pair, engine, k, **cfg).generate(order, MAX_TOKENS)
    cold = runner(pair, Engine(), k, prompt_cache=False, **cfg).generate(order, MAX_TOKENS)
    assert key(warm) == key(cold)
    assert engine.prompts.hits - hits_before >= len(prompts)  # the second call prefilled no prompt


def test_hits_misses_and_the_feature_kind_in_the_key(pair, prompts, eagle3_pair):
    engine = Engine()
    runner(pair, engine, 2).generate(prompts, MAX_TOKENS)
    assert (engine.prompts.hits, engine.prompts.misses) == (0, len(prompts))
    runner(pair, engine, 0).generate(prompts, MAX_TOKENS)  # target-only: the same final-norm states
    assert engine.prompts.hits == len(prompts)
    assert len(engine.prompts.entries) == len(prompts)


def test_eagle3_keys_its_entries_by_the_states_it_reads(eagle3_pair, prompts):
    """An EAGLE-3 head reads the target's auxiliary states, not its final-norm ones: a K=0 pass
    on the same engine keeps its own entries, and the head's warm cells equal cold ones."""
    engine = Engine()
    warm = [runner(eagle3_pair, engine, k).generate(prompts, MAX_TOKENS) for k in (2, 0, 2)]
    head = eagle3_pair[1]
    assert {layers for _, layers, _ in engine.prompts.entries} == {tuple(head.aux_layers), ()}
    assert engine.prompts.hits == len(prompts)  # the second K=2 call
    cold = runner(eagle3_pair, Engine(), 2, prompt_cache=False).generate(prompts, MAX_TOKENS)
    assert key(warm[0]) == key(warm[2]) == key(cold)


def test_no_prompt_cache_keeps_nothing(pair, prompts):
    engine = Engine()
    runner(pair, engine, 2, prompt_cache=False).generate(prompts, MAX_TOKENS)
    assert engine.prompts.entries == {} and engine.prompts.hits == engine.prompts.misses == 0


def test_the_cap_stops_new_entries(pair, prompts):
    engine = Engine(prompts=PromptCache(cap_bytes=1))
    results = runner(pair, engine, 2).generate(prompts, MAX_TOKENS)
    assert engine.prompts.entries == {} and engine.prompts.nbytes == 0
    assert key(results) == key(runner(pair, Engine(), 2).generate(prompts, MAX_TOKENS))


def test_copied_kv_stays_in_the_request_s_own_blocks(pair, prompts):
    engine = Engine()
    runner(pair, engine, 3).generate(prompts, MAX_TOKENS)
    audited = runner(pair, engine, 3, audit_slots=True)
    audited.generate(prompts, MAX_TOKENS)
    assert engine.prompts.hits >= len(prompts) and engine.extends.hits >= len(prompts)  # target and draft
    assert audited.slot_violations == 0


def test_the_head_s_prefill_extend_is_kept_beside_the_prompt(pair, prompts):
    """The head's step 0 over a fresh prompt (and the target's first token) is kept in the engine's
    extend cache: a second call in another order computes no extend, and equals a cold runner."""
    engine = Engine()
    runner(pair, engine, 3).generate(prompts, MAX_TOKENS)
    assert (engine.extends.hits, engine.extends.misses) == (0, len(prompts))
    order = list(reversed(prompts))
    warm = runner(pair, engine, 3).generate(order, MAX_TOKENS)
    assert engine.extends.hits == len(prompts) and len(engine.extends.entries) == len(prompts)
    assert key(warm) == key(runner(pair, Engine(), 3, prompt_cache=False).generate(order, MAX_TOKENS))
    runner(pair, engine, 0).generate(prompts, MAX_TOKENS)  # target-only: no head, no extend
    assert engine.extends.hits + engine.extends.misses == 2 * len(prompts)


def test_an_extend_entry_serves_only_the_head_that_computed_it(pair, prompts):
    """Two heads on one engine (an ablation's variants) never share an extend: a second head with
    other weights, run warm after the first, equals that head run cold."""
    target, head = pair
    other = copy.deepcopy(head)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)

    def run(h, engine, **cfg):
        config = RunnerConfig(num_spec_tokens=2, block_size=4, **cfg)
        return PagedRunner(
            target.model, proposer_for(h), target.eos_token_ids, config, engine=engine
        ).generate(prompts, MAX_TOKENS)

    engine = Engine()
    first = run(head, engine)
    second = run(other, engine)
    assert engine.extends.hits == 0 and engine.extends.misses == 2 * len(prompts)
    assert engine.prompts.hits == len(prompts)  # the target's prefill does not depend on the head
    assert key(second) == key(run(other, Engine(), prompt_cache=False)) != key(first)


def test_eagle3_extends_warm_equal_cold_in_a_tree(eagle3_pair, prompts):
    engine = Engine()
    cfg = {"topk": 2, "num_draft_tokens": 5}
    runner(eagle3_pair, engine, 3, **cfg).generate(prompts, MAX_TOKENS)
    warm = runner(eagle3_pair, engine, 3, **cfg).generate(list(reversed(prompts)), MAX_TOKENS)
    assert engine.extends.hits == len(prompts)
    cold = runner(eagle3_pair, Engine(), 3, prompt_cache=False, **cfg).generate(
        list(reversed(prompts)), MAX_TOKENS
    )
    assert key(warm) == key(cold)


@pytest.mark.parametrize("how", ["in place", "new Parameter"])
@pytest.mark.parametrize("which", ["head", "target"])
def test_a_weight_changed_on_a_loaded_pair_makes_the_kept_entries_miss(pair_dirs, prompts, which, how):
    """Entries are keyed by the state of the weights they read: change the head (or the target) on
    a loaded pair between two calls on one engine, written in place or replaced by another
    Parameter, and the second call equals a cold runner with the new weights instead of reusing
    what the old ones computed."""
    from alcheck.models.loading import load_eagle, load_target

    target = load_target(str(pair_dirs[0]))  # its own copy: the weights are changed below
    head = load_eagle(str(pair_dirs[1]), target)
    engine = Engine()
    first = runner((target, head), engine, 3).generate(prompts, MAX_TOKENS)
    stamps = engine.prompts.weights_key(target.model), engine.prompts.weights_key(head)
    runner((target, head), engine, 3).generate(prompts, MAX_TOKENS)
    assert (engine.prompts.weights_key(target.model), engine.prompts.weights_key(head)) == stamps
    assert engine.prompts.hits == engine.extends.hits == len(prompts)  # a run writes no weight
    module = head if which == "head" else target.model
    name, weight = next((n, p) for n, p in module.named_parameters() if p.dim() == 2)
    with torch.no_grad():
        if how == "in place":
            weight.mul_(1.5)
        else:
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            setattr(owner, attr, torch.nn.Parameter(weight.detach() * 1.5, requires_grad=False))
    warm = runner((target, head), engine, 3).generate(prompts, MAX_TOKENS)
    assert engine.extends.hits == len(prompts)  # no new hit: the head's step 0 reads both
    assert engine.prompts.hits == len(prompts) * (2 if which == "head" else 1)
    cold = runner((target, head), Engine(), 3, prompt_cache=False).generate(prompts, MAX_TOKENS)
    assert key(warm) == key(cold) != key(first)
