"""CUDA checks (marked `gpu`; skipped cleanly without a GPU), and the half-precision torch
attention path they rely on, checked on the CPU too.

- paged_attention (torch path) against attention written from scratch here, per request over
  its own blocks, in float32 / float16 / bfloat16, on the CPU and on CUDA;
- float32 on CUDA through the torch paged path (block sizes 4 and 256): speculative output for
  K = 0, 3, 5 and the contiguous runner equal the CPU target-only greedy output;
- bfloat16 / float16 on CUDA without flash-attn: logits close to float32, and a speculative run
  on the torch path with consistent counts;
- the KV pool on CUDA is sized from free memory (--gpu-memory-utilization), an earlier pool is
  released before measuring, and a utilization too small for one request is a one-line error;
- triton (when importable; picked on CUDA by default): float32 eager and static runs, chains and
  trees, equal the CPU target-only greedy output (tests/triton_cases.py compares the kernel itself);
- flash-attn (when importable; its kernels take fp16/bf16 only and block sizes that are
  multiples of 256): one paged batch of different-length sequences gives the torch path's logits,
  and a short fp16 speculative run completes on it with consistent counts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch
from conftest import MAX_TOKENS, paged_batch, run_contiguous, run_spec

from alcheck.methods.table import proposer_for

HAS_CUDA = torch.cuda.is_available()
cuda = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")]


def on_cuda(fn):
    for mark in cuda:
        fn = mark(fn)
    return fn


def _flash_available() -> bool:
    from alcheck.models import attention

    return attention.flash_attn_varlen_func is not None


def _triton_available() -> bool:
    from alcheck.models import attention

    return attention.triton_available()


needs_flash = pytest.mark.skipif(not _flash_available(), reason="flash-attn not installed")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.fixture(scope="module")
def cuda_pair(pair):
    target, head = pair
    return copy.deepcopy(target.model).cuda(), copy.deepcopy(head).cuda()


@pytest.fixture
def torch_backend(monkeypatch):
    """Force the torch paged path on CUDA (not flash-attn, not triton), eager and static batches."""
    from alcheck.models.attention import FORCE_ENV

    monkeypatch.setenv(FORCE_ENV, "torch")


# -- the torch attention path against a from-scratch reference ----------------------------------


def reference_attention(q, k_cache, v_cache, tables, seq_lens, q_lens, block_size, scale):
    """Per request: its keys/values read block by block in float32, causal softmax attention of
    its last q_len positions, GQA by repeating each KV head over its query heads."""
    out, at = [], 0
    heads, kv_heads = q.shape[1], k_cache.shape[2]
    for table, n, m in zip(tables, seq_lens, q_lens):
        slots = [table[p // block_size] * block_size + p % block_size for p in range(n)]
        k = (
            k_cache.reshape(-1, kv_heads, k_cache.shape[-1])[slots]
            .float()
            .repeat_interleave(heads // kv_heads, 1)
        )
        v = (
            v_cache.reshape(-1, kv_heads, v_cache.shape[-1])[slots]
            .float()
            .repeat_interleave(heads // kv_heads, 1)
        )
        for j in range(m):
            pos = n - m + j
            scores = torch.einsum("hd,khd->hk", q[at + j].float(), k[: pos + 1]) * scale
            out.append(torch.einsum("hk,khd->hd", scores.softmax(-1), v[: pos + 1]))
        at += m
    return torch.stack(out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("q_lens", [[1, 1, 1], [4, 4, 4], [7, 1, 3]])  # decode, verify (dense), prefill mix
def test_paged_attention_matches_reference(device, dtype, q_lens):
    from alcheck.models.attention import AttnBatch, paged_attention

    g = torch.Generator().manual_seed(0)
    bs, heads, kv_heads, dim, seq_lens = 4, 4, 2, 16, [9, 5, 12]
    tables = [[3, 7, 1], [5, 2, 0], [8, 4, 6]]  # scattered blocks; unset entries are 0
    k_cache = torch.randn(9, bs, kv_heads, dim, generator=g).to(device, dtype)
    v_cache = torch.randn(9, bs, kv_heads, dim, generator=g).to(device, dtype)
    q = torch.randn(sum(q_lens), heads, dim, generator=g).to(device, dtype)
    positions = [p for n, m in zip(seq_lens, q_lens) for p in range(n - m, n)]
    batch = AttnBatch.build(
        positions,
        torch.full((len(positions),), -1, device=device),
        torch.tensor(tables, dtype=torch.int32, device=device),
        q_lens,
        seq_lens,
        bs,
        "torch",
    )
    got = paged_attention(q, k_cache, v_cache, batch, dim**-0.5)  # the mask was built in float32
    assert got.dtype == dtype
    want = reference_attention(q.cpu(), k_cache.cpu(), v_cache.cpu(), tables, seq_lens, q_lens, bs, dim**-0.5)
    assert (got.float().cpu() - want).abs().max().item() <= TOLERANCE[dtype]


# -- float32 on CUDA: equal to the CPU ----------------------------------------------------------


@on_cuda
@pytest.mark.parametrize("block_size", [4, 256])
@pytest.mark.parametrize("k", [0, 3, 5])
def test_cuda_float32_equals_cpu_greedy(cuda_pair, pair, prompts, greedy, torch_backend, k, block_size):
    model, head = cuda_pair
    results, runner = run_spec(model, head, pair[0].eos_token_ids, prompts, k=k, block_size=block_size)
    assert runner.attention == "torch" and runner.kv_cache.is_cuda
    for got, want in zip(results, greedy):
        assert (got.output_ids, got.finish_reason) == (want.output_ids, want.finish_reason)
    assert all(len(r.output_ids) <= MAX_TOKENS for r in results)


@on_cuda
@pytest.mark.skipif(not _triton_available(), reason="triton not installed")
@pytest.mark.parametrize("runner", ["paged", "static"])
@pytest.mark.parametrize("k, cfg", [(0, {}), (3, {}), (3, {"topk": 2, "num_draft_tokens": 6})])
def test_cuda_float32_triton_kernel_equals_cpu_greedy(cuda_pair, pair, prompts, greedy, runner, k, cfg):
    """triton is picked on CUDA by default (16 is no multiple of 256: flash-attn never is)."""
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.static.runner import StaticRunner

    model, head = cuda_pair
    cls = StaticRunner if runner == "static" else PagedRunner
    run = cls(
        model,
        proposer_for(head) if k else None,
        pair[0].eos_token_ids,
        RunnerConfig(num_spec_tokens=k, block_size=16, **cfg),
    )
    results = run.generate(prompts, MAX_TOKENS)
    assert run.attention == "triton"
    for got, want in zip(results, greedy):
        assert (got.output_ids, got.finish_reason) == (want.output_ids, want.finish_reason)


@on_cuda
def test_cuda_contiguous_equals_cpu_greedy(cuda_pair, pair, prompts, greedy):
    model, head = cuda_pair
    results = run_contiguous(model, head, pair[0].eos_token_ids, prompts, MAX_TOKENS, 3)
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]


# -- half precision on CUDA without flash-attn --------------------------------------------------


@dataclass
class _Req:
    request_id: int
    num_computed_tokens: int = 0


def _prefill_logits(model, prompts, block_size, kernel, dtype):
    from alcheck.kv.manager import KVCacheManager
    from alcheck.models.attention import bind_kv_cache

    reqs = [_Req(i) for i in range(len(prompts))]
    num_blocks = sum(-(-len(p) // block_size) for p in prompts) + 1
    kv = KVCacheManager(num_blocks, block_size)
    for r, p in zip(reqs, prompts):
        assert kv.allocate_slots(r, len(p)) is not None
    bind_kv_cache(model.attention_layers, num_blocks, block_size, dtype, torch.device("cuda"))
    ids = torch.tensor([t for p in prompts for t in p], device="cuda")
    batch = paged_batch(kv, reqs, [0] * len(reqs), [len(p) for p in prompts], block_size, kernel, "cuda")
    with torch.no_grad():
        return model.compute_logits(model(ids, batch)).float()


@on_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_half_precision_torch_path_close_to_float32(cuda_pair, prompts, dtype):
    want = _prefill_logits(cuda_pair[0], prompts, 16, "torch", torch.float32)
    got = _prefill_logits(copy.deepcopy(cuda_pair[0]).to(dtype), prompts, 16, "torch", dtype)
    # about 10 rounding steps of 2^-11 (fp16) / 2^-8 (bf16) deep; the CPU measured 0.003 / 0.023
    rel = ((got - want).norm() / want.norm()).item()
    assert rel <= {torch.float16: 0.01, torch.bfloat16: 0.06}[dtype], rel
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert agree >= 0.95, f"{dtype} greedy tokens agree with float32 at only {agree:.0%} of positions"


@on_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_half_precision_speculative_run_on_torch_path(cuda_pair, pair, prompts, dtype, torch_backend):
    model, head = (copy.deepcopy(m).to(dtype) for m in cuda_pair)
    base, _ = run_spec(model, None, pair[0].eos_token_ids, prompts, k=0, block_size=16)
    results, runner = run_spec(model, head, pair[0].eos_token_ids, prompts, k=3, block_size=16)
    assert runner.attention == "torch"
    assert runner.kv_cache.dtype == dtype
    identical = sum(r.output_ids == b.output_ids for r, b in zip(results, base))
    print(f"{dtype} torch-path lossless rate: {identical}/{len(base)}")
    for r, b in zip(results, base):
        assert r.output_ids[:1] == b.output_ids[:1]  # the same prefill token
        assert sum(r.accepted_per_pos) == r.accepted and r.drafted == 3 * r.steps


# -- the KV pool from free memory ---------------------------------------------------------------


@on_cuda
def test_cuda_kv_pool_is_sized_from_free_memory(cuda_pair, pair, prompts, greedy, torch_backend):
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    model, head = cuda_pair
    runner = PagedRunner(
        model, proposer_for(head), pair[0].eos_token_ids, RunnerConfig(num_spec_tokens=3, block_size=4)
    )
    assert [r.output_ids for r in runner.generate(prompts, MAX_TOKENS)] == [g.output_ids for g in greedy]
    first = dict(runner.kv_pool)
    util, total = first["gpu_memory_utilization"], first["total_bytes"]
    assert (
        first["blocks"] == runner.kv.num_blocks == min(first["blocks_needed"], first["blocks_memory_allows"])
    )
    assert first["total_bytes"] == torch.cuda.get_device_properties(0).total_memory
    assert first["activation_peak_bytes"] > 0
    assert first["blocks_memory_allows"] * first["bytes_per_block"] <= util * total - (
        total - first["free_bytes"]
    )
    # a second generate() lets the first pool go before measuring: the same memory is free again
    runner.generate(prompts, MAX_TOKENS)
    assert abs(runner.kv_pool["free_bytes"] - first["free_bytes"]) <= 64 << 20


@on_cuda
def test_cuda_utilization_too_small_for_one_request_is_an_error(cuda_pair, pair, prompts):
    from alcheck.errors import AlcheckError

    model, head = cuda_pair
    with pytest.raises(AlcheckError, match="--gpu-memory-utilization"):
        run_spec(model, head, pair[0].eos_token_ids, prompts, k=3, gpu_memory_utilization=1e-6)


# -- flash-attn ---------------------------------------------------------------------------------


@on_cuda
@needs_flash
def test_flash_attn_paged_forward_matches_torch_path(cuda_pair, prompts):
    model = copy.deepcopy(cuda_pair[0]).half()
    logits = {
        kernel: _prefill_logits(model, prompts, 256, kernel, torch.float16)
        for kernel in ("torch", "flash-attn")
    }
    scale = logits["torch"].abs().max().item()
    assert (logits["flash-attn"] - logits["torch"]).abs().max().item() <= 2e-2 * scale


@on_cuda
@needs_flash
def test_flash_attn_speculative_run_fp16(cuda_pair, pair, prompts):
    model, head = (copy.deepcopy(m).half() for m in cuda_pair)
    base, runner = run_spec(model, None, pair[0].eos_token_ids, prompts, k=0, block_size=256)
    assert runner.attention == "flash-attn"
    results, runner = run_spec(model, head, pair[0].eos_token_ids, prompts, k=3, block_size=256)
    assert runner.attention == "flash-attn"
    identical = sum(r.output_ids == b.output_ids for r, b in zip(results, base))
    print(f"fp16 flash-attn lossless rate: {identical}/{len(base)}")
    for r, b in zip(results, base):
        assert r.output_ids[:1] == b.output_ids[:1]  # same prefill token
        assert sum(r.accepted_per_pos) == r.accepted and r.drafted == 3 * r.steps
