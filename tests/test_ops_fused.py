"""The fused half-precision path (issue 22, models/ops.py): what the static runner runs on CUDA in
float16 / bfloat16 is the layers' own operations in the same order, so through torch.compile's
eager backend it gives the same bits as the unfused layers; the fused form is asked for only by
static batches on CUDA in half precision, never on the CPU or in float32."""

from __future__ import annotations

import pytest
import torch
from conftest import MAX_TOKENS

from alcheck.methods.table import proposer_for
from alcheck.models import ops
from alcheck.runner.config import RunnerConfig
from alcheck.runner.static import batch as static_batch_module
from alcheck.runner.static import chain, tree
from alcheck.runner.static.batch import static_batch
from alcheck.runner.static.runner import StaticRunner


@pytest.fixture
def eager_fused(monkeypatch):
    """Every static batch asks for the fused layers, compiled by the eager backend."""
    monkeypatch.setattr(ops, "BACKEND", "eager")
    monkeypatch.setattr(ops, "FAILED", {})

    def fused_batch(*args, **kw):
        b = static_batch(*args, **kw)
        b.fused = True
        return b

    for module in (chain, tree, static_batch_module):
        monkeypatch.setattr(module, "static_batch", fused_batch)


def run(pair, prompts, k, **cfg):
    target, head = pair
    runner = StaticRunner(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, block_size=4, **cfg),
    )
    return [(r.output_ids, r.steps, r.accepted) for r in runner.generate(prompts, MAX_TOKENS)]


@pytest.mark.parametrize("k, cfg", [(0, {}), (3, {}), (3, {"topk": 2, "num_draft_tokens": 6})])
def test_the_fused_layers_give_the_unfused_bits(pair, prompts, k, cfg, request):
    plain = run(pair, prompts, k, **cfg)
    request.getfixturevalue("eager_fused")
    assert run(pair, prompts, k, **cfg) == plain
    assert not ops.FAILED
    assert {name for name, _ in ops._compiled} >= {"rms_norm", "add_rms_norm", "rope_store", "silu_mul"}


def test_rope_with_the_kv_store_gives_the_unfused_bits(monkeypatch):
    """One function for RoPE on q and k and the K/V store: the same q, and the same cache bytes."""
    from alcheck.models.attention import store_kv

    monkeypatch.setattr(ops, "BACKEND", "eager")
    monkeypatch.setattr(ops, "FAILED", {})
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(6, h, 16, generator=gen) for h in (4, 2, 2))
    cos, sin = torch.randn(6, 1, 16, generator=gen), torch.randn(6, 1, 16, generator=gen)
    slots = torch.tensor([9, 3, 17, 4, 30, 0])
    caches = [torch.zeros(8, 4, 2, 16) for _ in range(4)]
    want_q, want_k = ops.rope(q, k, cos, sin)
    store_kv(caches[0], caches[1], want_k, v, slots, all_stored=True)
    got_q = ops.fused(ops.rope_store, q, k, v, cos, sin, caches[2], caches[3], slots)
    assert (
        torch.equal(got_q, want_q) and torch.equal(caches[2], caches[0]) and torch.equal(caches[3], caches[1])
    )
    assert not ops.FAILED


def test_only_half_precision_on_cuda_asks_for_them():
    table = torch.zeros(2, 3, dtype=torch.long)
    positions = torch.arange(4).expand(2, 4)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert not static_batch(table, positions, 4, dtype).fused  # the CPU: never


def test_a_function_that_cannot_compile_runs_eagerly(monkeypatch):
    monkeypatch.setattr(ops, "BACKEND", "no-such-backend")
    monkeypatch.setattr(ops, "FAILED", {})
    x = torch.randn(3, 8)
    assert torch.equal(ops.fused(ops.silu_mul, x), ops.silu_mul(x))
    assert "silu_mul" in ops.FAILED
