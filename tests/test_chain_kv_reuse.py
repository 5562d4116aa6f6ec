"""A chain's single-token draft steps reuse the draft KV the step before gathered
(AttnBatch.kv_reuse, models/attention._gather_reused): the keys and values equal a fresh gather
bit for bit, and every result equals a runner that gathers afresh at each step."""

from __future__ import annotations

import random

import pytest
import torch

from alcheck.methods.table import proposer_for
from alcheck.models import attention
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def many_prompts(pair):
    """Enough requests (40) for the torch path's chunks of 16 as well as a plain batch."""
    vocab = pair[0].model.config.vocab_size
    rng = random.Random(3)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 40))] for _ in range(40)]


def run(pair, prompts, k=4, **cfg):
    target, head = pair
    cfg.setdefault("block_size", 4)
    runner = PagedRunner(
        target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=k, **cfg)
    )
    return runner.generate(prompts, MAX_TOKENS)


def key(results):
    return [
        (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.per_step_accepted) for r in results
    ]


def no_reuse(self, batch, reqs, starts, layer, plain):
    self._chain = None


@pytest.mark.parametrize("count", [8, 40], ids=["plain batch", "chunked batch"])
def test_reused_keys_and_values_equal_a_fresh_gather(pair, many_prompts, monkeypatch, count):
    real, reused = attention._gather_reused, []

    def checked(k_cache, v_cache, batch):
        fresh_blocks = -(-batch.max_kv // batch.block_size)
        held = batch.kv_reuse.get((k_cache.data_ptr(), batch.chunk[0] if batch.chunk else 0))
        keys, values = real(k_cache, v_cache, batch)
        fk, fv = attention._gather_blocks(k_cache, v_cache, batch, fresh_blocks)
        assert torch.equal(keys, fk[:, : batch.max_kv].transpose(1, 2))
        assert torch.equal(values, fv[:, : batch.max_kv].transpose(1, 2))
        reused.append(held is not None)
        return keys, values

    monkeypatch.setattr(attention, "_gather_reused", checked)
    run(pair, many_prompts[:count])
    assert any(reused) and not all(reused)  # each chain's first step gathers, later ones reuse


@pytest.mark.parametrize(
    "cfg", [{}, {"num_blocks": 60}, {"block_size": 16}], ids=["chain", "preempting", "block 16"]
)
def test_results_equal_a_runner_that_gathers_every_step(pair, many_prompts, monkeypatch, cfg):
    reused = run(pair, many_prompts, **cfg)
    monkeypatch.setattr(PagedRunner, "_chain_reuse", no_reuse)
    assert key(reused) == key(run(pair, many_prompts, **cfg))


def test_no_reuse_without_the_kv_lookahead(pair, many_prompts, monkeypatch):
    """Without the lookahead drafts write through block 0 into other requests' rows, which only a
    fresh gather sees: each step gathers afresh."""
    calls = []
    monkeypatch.setattr(attention, "_gather_reused", lambda *a: calls.append(a))
    run(pair, many_prompts[:8], kv_lookahead=False)
    assert calls == []


def test_no_reuse_off_the_cpu(pair, many_prompts, monkeypatch):
    """On a GPU the reuse would hold a second copy of the batch's draft KV that the KV budget does
    not count: a runner whose device is not the CPU gathers every step. Checked here by telling
    the CPU runner its device is CUDA at each draft step's decision."""
    calls, decide = [], PagedRunner._chain_reuse

    def as_if_cuda(self, batch, reqs, starts, layer, plain):
        device, self.device = self.device, torch.device("cuda")
        try:
            decide(self, batch, reqs, starts, layer, plain)
        finally:
            self.device = device
        calls.append(batch.kv_reuse)

    monkeypatch.setattr(PagedRunner, "_chain_reuse", as_if_cuda)
    run(pair, many_prompts[:8])
    assert calls and all(reuse is None for reuse in calls)
