"""CUDA checks (marked `gpu`; skipped cleanly without a GPU).

- float32 on CUDA through the torch paged path (block sizes 4 and 256): speculative output for
  K = 0, 3, 5 and the contiguous runner equal the CPU target-only greedy output.
- flash-attn (when importable; its kernels take fp16/bf16 only and block sizes that are
  multiples of 256): one paged batch of different-length sequences gives the torch path's logits,
  and a short fp16 speculative run completes on it with consistent counts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch

from conftest import MAX_TOKENS, paged_batch, run_spec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _flash_available() -> bool:
    from alcheck.models import attention

    return attention.flash_attn_varlen_func is not None


needs_flash = pytest.mark.skipif(not _flash_available(), reason="flash-attn not installed")


@pytest.fixture(scope="module")
def cuda_pair(pair):
    target, head = pair
    return copy.deepcopy(target.model).cuda(), copy.deepcopy(head).cuda()


@pytest.fixture
def torch_backend(monkeypatch):
    """Force the torch paged path on CUDA (flash-attn has no float32 kernels)."""
    from alcheck.engine import runner as runner_module

    monkeypatch.setattr(runner_module, "pick_backend", lambda device, block_size: "torch")


@pytest.mark.parametrize("block_size", [4, 256])
@pytest.mark.parametrize("k", [0, 3, 5])
def test_cuda_float32_equals_cpu_greedy(cuda_pair, pair, prompts, greedy, torch_backend, k, block_size):
    model, head = cuda_pair
    results, runner = run_spec(model, head, pair[0].eos_token_ids, prompts, k=k, block_size=block_size)
    assert runner.backend == "torch" and runner.kv_cache.is_cuda
    for got, want in zip(results, greedy):
        assert (got.output_ids, got.finish_reason) == (want.output_ids, want.finish_reason)
    assert all(len(r.output_ids) <= MAX_TOKENS for r in results)


def test_cuda_contiguous_equals_cpu_greedy(cuda_pair, pair, prompts, greedy):
    from alcheck.engine.contiguous import generate_contiguous

    model, head = cuda_pair
    results = generate_contiguous(model, head, pair[0].eos_token_ids, prompts, MAX_TOKENS, 3)
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]


@dataclass
class _Req:
    request_id: int
    num_computed_tokens: int = 0


@needs_flash
def test_flash_attn_paged_forward_matches_torch_path(cuda_pair, prompts):
    from alcheck.kv.manager import KVCacheManager
    from alcheck.models.attention import bind_kv_cache

    model = copy.deepcopy(cuda_pair[0]).half()
    reqs = [_Req(i) for i in range(len(prompts))]
    kv = KVCacheManager(len(prompts) + 1, 256)
    for r, p in zip(reqs, prompts):
        assert kv.allocate_slots(r, len(p)) is not None
    ids = torch.tensor([t for p in prompts for t in p], device="cuda")
    lens = [len(p) for p in prompts]
    logits = {}
    for backend in ("torch", "flash-attn"):
        bind_kv_cache(model.attention_layers, len(prompts) + 1, 256, torch.float16, torch.device("cuda"))
        batch = paged_batch(kv, reqs, [0] * len(reqs), lens, 256, backend, "cuda")
        with torch.no_grad():
            logits[backend] = model.compute_logits(model(ids, batch)).float()
    scale = logits["torch"].abs().max().item()
    assert (logits["flash-attn"] - logits["torch"]).abs().max().item() <= 2e-2 * scale


@needs_flash
def test_flash_attn_speculative_run_fp16(cuda_pair, pair, prompts):
    model, head = (copy.deepcopy(m).half() for m in cuda_pair)
    base, runner = run_spec(model, None, pair[0].eos_token_ids, prompts, k=0, block_size=256)
    assert runner.backend == "flash-attn"
    results, runner = run_spec(model, head, pair[0].eos_token_ids, prompts, k=3, block_size=256)
    assert runner.backend == "flash-attn"
    identical = sum(r.output_ids == b.output_ids for r, b in zip(results, base))
    print(f"fp16 flash-attn lossless rate: {identical}/{len(base)}")
    for r, b in zip(results, base):
        assert r.output_ids[:1] == b.output_ids[:1]  # same prefill token
        assert sum(r.accepted_per_pos) == r.accepted and r.drafted == 3 * r.steps
