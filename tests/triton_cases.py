"""The Triton paged-attention kernel (models/triton_attention.py) against the torch path, its
reference: random caches and block tables, decode, chain verify, tree masks (static and eager
batches), GQA groups 1/2/4, block sizes 4 and 16, lanes of different lengths, padding lanes, padded
head dims, float32 / float16 / bfloat16; then the runners end to end with the kernel forced.

Not collected on its own (no test_ prefix): tests/test_triton_attention.py runs it in a child
process, on the CPU with TRITON_INTERPRET=1, which must be set before triton is first imported
(torch.compile imports it, so a shared pytest worker may already hold a compiled-mode triton).
By hand: TRITON_INTERPRET=1 python -m pytest -q tests/triton_cases.py (no variable on a GPU).
"""

from __future__ import annotations

import os

import pytest
import torch

from alcheck.models import triton_attention
from alcheck.models.attention import FORCE_ENV, AttnBatch, paged_attention
from alcheck.runner.static.batch import static_batch
from alcheck.runner.tree import ancestor_mask

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def caches(num_blocks, block_size, kv_heads, dim, dtype, gen):
    shape = (num_blocks, block_size, kv_heads, dim)
    return (
        torch.randn(shape, generator=gen).to(DEVICE, dtype),
        torch.randn(shape, generator=gen).to(DEVICE, dtype),
    )


def tables(lens, width, num_blocks, block_size, gen):
    """[B, width] distinct random blocks covering each lane's length; 0 past it (len 0: a padding lane)."""
    ids = torch.randperm(num_blocks - 1, generator=gen) + 1
    table = torch.zeros(len(lens), width, dtype=torch.long)
    at = 0
    for b, n in enumerate(lens):
        used = -(-n // block_size)
        table[b, :used] = ids[at : at + used]
        at += used
    return table.to(DEVICE)


def compare(q, k, v, make_batch, monkeypatch, dtype):
    """make_batch() under the torch and the triton kernels; the outputs agree."""
    want = paged_attention(q, k, v, make_batch(), 0.3)
    monkeypatch.setenv(FORCE_ENV, "triton")
    batch = make_batch()
    assert batch.kernel == "triton" and batch.mask is None
    got = paged_attention(q, k, v, batch, 0.3)
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = want.float().abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= TOLERANCE[dtype] * max(1.0, scale)


# -- static batches (the static runner's: n queries per lane, the table's full width) -----------

# (n, group, block size): block sizes that are not powers of two, and one larger than a key tile
STATIC = [(1, 1, 4), (1, 4, 16), (4, 2, 4), (4, 4, 16), (6, 1, 16), (6, 2, 4), (4, 2, 6), (4, 2, 96)]


@pytest.mark.parametrize("n, group, block_size", STATIC)
@pytest.mark.parametrize("tree", [False, True])
def test_static_batches(monkeypatch, n, group, block_size, tree):
    gen = torch.Generator().manual_seed(n * 100 + group * 10 + block_size)
    kv_heads, dim, width = 2, 32, 6 if block_size == 4 else 2
    k, v = caches(40, block_size, kv_heads, dim, torch.float32, gen)
    ends = [n, 9, width * block_size - 1, 0]  # the last query's position + 1; 0: a padding lane
    table = tables(ends, width, 40, block_size, gen)
    start = torch.tensor([max(0, e - n) for e in ends], device=DEVICE)
    positions = start[:, None] + torch.arange(n, device=DEVICE)
    q = torch.randn(len(ends) * n, kv_heads * group, dim, generator=gen).to(DEVICE)
    mask, tree_width = None, 0
    if tree:  # the verify tree: node i's parent is an earlier node (a lone root for n = 1)
        parents = torch.stack([torch.randint(0, i, (len(ends),), generator=gen) for i in range(1, n + 1)], 1)
        mask = (
            ancestor_mask(parents[:, 1:].to(DEVICE), n)
            if n > 1
            else torch.ones(len(ends), 1, 1, dtype=torch.bool)
        )
        mask, tree_width = mask.to(DEVICE), n
    compare(
        q,
        k,
        v,
        lambda: static_batch(
            table, positions, block_size, torch.float32, tree_mask=mask, tree_width=tree_width
        ),
        monkeypatch,
        torch.float32,
    )


@pytest.mark.parametrize("level", [1, 3])
def test_static_expansion_levels(monkeypatch, level):
    """A draft level: topk queries over the last level*topk keys, each seeing any subset with itself."""
    gen = torch.Generator().manual_seed(level)
    topk, block_size, width = 3, 4, 8
    k, v = caches(30, block_size, 1, 16, torch.float32, gen)
    base = torch.tensor([5, 12, 0], device=DEVICE)
    positions = base[:, None] + (level - 1) * topk + torch.arange(topk, device=DEVICE)
    table = tables([int(p) + 1 for p in positions[:, -1]], width, 30, block_size, gen)
    mask = torch.rand(3, topk, level * topk, generator=gen).to(DEVICE) < 0.5
    mask[:, torch.arange(topk), (level - 1) * topk + torch.arange(topk)] = True
    q = torch.randn(3 * topk, 4, 16, generator=gen).to(DEVICE)
    compare(
        q,
        k,
        v,
        lambda: static_batch(
            table, positions, block_size, torch.float32, tree_mask=mask, tree_width=level * topk
        ),
        monkeypatch,
        torch.float32,
    )


@pytest.mark.parametrize("dim", [16, 24, 80])
def test_head_dims_padded_to_a_power_of_two(monkeypatch, dim):
    gen = torch.Generator().manual_seed(dim)
    k, v = caches(20, 4, 2, dim, torch.float32, gen)
    table = tables([7, 13], 4, 20, 4, gen)
    positions = torch.tensor([[5, 6], [11, 12]], device=DEVICE)
    q = torch.randn(4, 4, dim, generator=gen).to(DEVICE)
    compare(q, k, v, lambda: static_batch(table, positions, 4, torch.float32), monkeypatch, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(monkeypatch, dtype):
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("triton 3.9's interpreter computes tl.dot on bfloat16 as garbage (a GPU runs this case)")
    gen = torch.Generator().manual_seed(7)
    k, v = caches(20, 16, 2, 32, dtype, gen)
    table = tables([30, 17, 0], 2, 20, 16, gen)
    positions = torch.tensor([[26, 27, 28, 29], [13, 14, 15, 16], [0, 1, 2, 3]], device=DEVICE)
    q = torch.randn(12, 4, 32, generator=gen).to(DEVICE, dtype)
    mask = ancestor_mask(torch.tensor([[0, 0, 1]] * 3, device=DEVICE), 2)
    compare(
        q,
        k,
        v,
        lambda: static_batch(table, positions, 16, dtype, tree_mask=mask, tree_width=4),
        monkeypatch,
        dtype,
    )


# -- the eager runner's batches (AttnBatch.build: ragged query lengths) --------------------------


@pytest.mark.parametrize("tree", [False, True])
def test_eager_batches(monkeypatch, tree):
    gen = torch.Generator().manual_seed(3)
    block_size = 4
    query_lens, seq_lens = [1, 5, 3], [9, 5, 14]
    k, v = caches(20, block_size, 2, 16, torch.float32, gen)
    table = tables(seq_lens, 4, 20, block_size, gen).int()
    positions = [p for n, s in zip(query_lens, seq_lens) for p in range(s - n, s)]
    q = torch.randn(sum(query_lens), 4, 16, generator=gen).to(DEVICE)
    masks = None
    if tree:  # over each request's last 3 keys (rows past a request's length are padding)
        masks = torch.rand(3, 5, 3, generator=gen).to(DEVICE) < 0.5
        masks[:, :, 0] = True

    def build():
        kernel = "triton" if FORCE_ENV in os.environ else "torch"
        return AttnBatch.build(
            positions,
            torch.full((len(positions),), -1, device=DEVICE),
            table,
            query_lens,
            seq_lens,
            block_size,
            kernel,
            tree_masks=masks,
        )

    compare(q, k, v, build, monkeypatch, torch.float32)


def test_no_host_sync_in_the_wrapper(monkeypatch):
    """The wrapper reads no tensor value on the host (a CUDA graph could not replay that)."""
    gen = torch.Generator().manual_seed(1)
    k, v = caches(10, 4, 1, 16, torch.float32, gen)
    table = tables([6], 2, 10, 4, gen)
    monkeypatch.setenv(FORCE_ENV, "triton")
    batch = static_batch(
        table,
        torch.tensor([[4, 5]], device=DEVICE),
        4,
        torch.float32,
        tree_mask=torch.ones(1, 2, 2, dtype=torch.bool, device=DEVICE),
        tree_width=2,
    )
    for name in ("item", "tolist", "__bool__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, _n=name: pytest.fail(f"host read: {_n}"))
    triton_attention.triton_paged_attention(torch.randn(2, 2, 16, device=DEVICE), k, v, batch, 0.25)


def test_a_failing_kernel_names_the_way_around_it(monkeypatch):
    """A compile or launch failure (a GPU triton does not support, say) is one line naming
    ALCHECK_ATTENTION=torch, not a traceback from inside triton."""
    from alcheck.errors import AlcheckError

    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise RuntimeError("PTX assembly failed\nmore detail")

            return launch

    gen = torch.Generator().manual_seed(1)
    k, v = caches(10, 4, 1, 16, torch.float32, gen)
    monkeypatch.setenv(FORCE_ENV, "triton")
    batch = static_batch(tables([6], 2, 10, 4, gen), torch.tensor([[4, 5]], device=DEVICE), 4, torch.float32)
    monkeypatch.setattr(triton_attention, "_paged_attention_kernel", Broken())
    with pytest.raises(AlcheckError, match="RuntimeError: PTX assembly failed.*ALCHECK_ATTENTION=torch"):
        triton_attention.triton_paged_attention(torch.randn(2, 2, 16, device=DEVICE), k, v, batch, 0.25)


# -- end to end: the runners with the kernel forced -------------------------------------------------


def results(runner_cls, target, head, prompts, k, **cfg):
    from alcheck.methods.table import proposer_for
    from alcheck.runner.config import RunnerConfig

    runner = runner_cls(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, block_size=4, **cfg),
    )
    out = runner.generate(prompts, 20)
    return [
        (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason) for r in out
    ], runner


@pytest.mark.parametrize("cfg", [{}, {"topk": 2, "num_draft_tokens": 6}], ids=["chain", "tree"])
def test_runners_with_the_kernel_equal_the_torch_paged_runner(pair, prompts, monkeypatch, cfg):
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.static.runner import StaticRunner

    target, head = pair
    want, _ = results(PagedRunner, target, head, prompts[:2], 3, **cfg)
    calls = []
    kernel = triton_attention.triton_paged_attention
    monkeypatch.setattr(triton_attention, "triton_paged_attention", lambda *a: calls.append(1) or kernel(*a))
    monkeypatch.setenv(FORCE_ENV, "triton")
    for cls in (StaticRunner, PagedRunner):
        got, runner = results(cls, target, head, prompts[:2], 3, **cfg)
        assert runner.attention == "triton" and got == want, cls.__name__
    assert calls
