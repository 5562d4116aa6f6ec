"""Streaming loading (issue 12): tensors go from memory-mapped shards straight into parameters
allocated in the target dtype on the target device, fused per layer as they arrive.

- Correct: a sharded Llama-3.1-shaped checkpoint (GQA 4:1, llama3 RoPE scaling, bf16 on disk,
  3 shards; made small here) loads into exactly the weights the previous loader produced (whole
  state dict -> fused copies -> float32 module -> cast; rebuilt in this file as the oracle), and
  its logits equal transformers' LlamaForCausalLM on the same files.
- Lean: a subprocess loading a checkpoint of a few hundred MB stays under the issue's bound on
  peak RSS beyond its baseline: weights in their dtype + largest shard + one layer (CPU);
  largest shard + one layer (CUDA, `gpu` marker).
"""

from __future__ import annotations

import gc
import math
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import paged_batch

from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache
from alcheck.models.loading import load_target_model, model_config, read_config
from alcheck.testing.tiny import LLAMA31_8B_CONFIG, llama_tensor_shapes, make_sharded_llama

SMALL_31 = dict(
    LLAMA31_8B_CONFIG,
    hidden_size=128,
    intermediate_size=352,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=2,
    vocab_size=1000,
    rope_scaling=dict(LLAMA31_8B_CONFIG["rope_scaling"], original_max_position_embeddings=32),
)
BLOCK = 4


@dataclass
class Req:
    request_id: int
    num_computed_tokens: int = 0


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    out = make_sharded_llama(tmp_path_factory.mktemp("llama31") / "target", SMALL_31, num_shards=3, std=0.08)
    assert len(list(out.glob("model-*.safetensors"))) == 3
    return out


def _config(directory: Path):
    return model_config(read_config(directory, "target"), directory, "target")


def previous_loader(directory: Path, dtype) -> torch.nn.Module:
    """The loader before streaming, as the oracle: every shard into one state dict, q/k/v and
    gate/up concatenated, a float32 module filled with load_state_dict, then cast."""
    from safetensors.torch import load_file

    from alcheck.models.layers import stack_checkpoint
    from alcheck.models.llama import LlamaTarget

    state = {}
    for file in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(file)))
    model = LlamaTarget(_config(directory))
    model.load_state_dict(stack_checkpoint(state), strict=True)
    return model.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_streamed_weights_equal_the_previous_loader(sharded, dtype):
    ours = load_target_model(sharded, _config(sharded), dtype)
    oracle = previous_loader(sharded, dtype)
    ours_params, oracle_params = dict(ours.named_parameters()), dict(oracle.named_parameters())
    assert ours_params.keys() == oracle_params.keys()
    for name, param in ours_params.items():
        assert param.dtype == dtype and param.device.type == "cpu"
        assert torch.equal(param, oracle_params[name]), name
    rotary = ours.model.layers[0].self_attn.rotary
    assert rotary.inv_freq.dtype == torch.float32  # RoPE frequencies stay float32, as in transformers


def _our_logits(model, seqs):
    reqs = [Req(i) for i in range(len(seqs))]
    kv = KVCacheManager(64, BLOCK)
    for r, s in zip(reqs, seqs):
        kv.allocate_slots(r, len(s))
    bind_kv_cache(model.attention_layers, 64, BLOCK, torch.float32, torch.device("cpu"))
    batch = paged_batch(kv, reqs, [0] * len(seqs), [len(s) for s in seqs])
    with torch.no_grad():
        return model.compute_logits(model(torch.tensor([t for s in seqs for t in s]), batch))


def test_streamed_logits_equal_transformers(sharded):
    from transformers import LlamaForCausalLM

    ours = load_target_model(sharded, _config(sharded), torch.float32)
    ref = LlamaForCausalLM.from_pretrained(
        str(sharded), dtype=torch.float32, attn_implementation="eager"
    ).eval()
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, SMALL_31["vocab_size"], (n,), generator=g).tolist() for n in (5, 40)]
    logits = _our_logits(ours, seqs)
    at = 0
    for seq in seqs:
        with torch.no_grad():
            expected = ref(torch.tensor([seq])).logits[0]
        torch.testing.assert_close(logits[at : at + len(seq)], expected, atol=1e-4, rtol=0)
        at += len(seq)
    assert logits.abs().max() > 0.1  # not a degenerate all-zero model


# -- peak host memory ----------------------------------------------------------------------------

# a few hundred MB in bf16: the 8B shapes shrunk so that load + measurement fit in seconds
MEMORY_CONFIG = dict(
    LLAMA31_8B_CONFIG,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    vocab_size=32000,
)


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _load(directory: Path, dtype: str, device: str):
    cfg = model_config(read_config(directory, "target"), directory, "target")
    return load_target_model(directory, cfg, getattr(torch, dtype), device)


def _probe(big: Path, warm: Path, device: str, dtypes: tuple[str, ...], queue) -> None:
    """In a child process: per dtype, the RSS before loading and the peak while loading."""
    try:
        results = {}
        for dtype in dtypes:
            _load(warm, dtype, device)  # lazy imports, allocator and (on CUDA) context set-up: the baseline
            gc.collect()
            baseline = _status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark: the peak is the load's
                f.write("5")
            model = _load(big, dtype, device)
            if device == "cuda":
                torch.cuda.synchronize()
            results[dtype] = {
                "baseline": baseline,
                "peak": _status("VmHWM"),
                "params": sum(p.numel() for p in model.parameters()),
            }
            del model
        queue.put(results)
    except BaseException as exc:  # noqa: BLE001 - report it to the parent
        queue.put({"error": repr(exc)})


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory")
    big = make_sharded_llama(root / "big", MEMORY_CONFIG, num_shards=3)
    warm = make_sharded_llama(root / "warm", SMALL_31, num_shards=2)
    return big, warm


def _layer_bytes_fp32(cfg: dict) -> int:
    one_layer = [
        s for n, s in llama_tensor_shapes(dict(cfg, num_hidden_layers=1)).items() if ".layers.0." in n
    ]
    return sum(math.prod(s) for s in one_layer) * 4


def _measure(big: Path, warm: Path, device: str, *dtypes: str) -> dict:
    """Run _probe in a child: forked on CPU (torch is already imported: seconds, not tens), spawned
    for CUDA (a CUDA context does not survive fork)."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc to reset and read the peak RSS")
    ctx = multiprocessing.get_context("spawn" if device == "cuda" else "fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_probe, args=(big, warm, device, dtypes, queue))
    child.start()
    try:
        results = queue.get(timeout=300)
    finally:
        child.join(timeout=30)
    assert "error" not in results, results
    return results


def _bound(big: Path, dtype: str, weights_on_host: bool) -> tuple[int, int]:
    shapes = llama_tensor_shapes(MEMORY_CONFIG)
    weights = sum(math.prod(s) for s in shapes.values()) * getattr(torch, dtype).itemsize
    largest_shard = max(f.stat().st_size for f in big.glob("model-*.safetensors"))
    return (weights if weights_on_host else 0) + largest_shard + _layer_bytes_fp32(MEMORY_CONFIG), weights


def test_peak_rss_on_cpu_stays_under_the_bound(big_checkpoint):
    big, warm = big_checkpoint
    on_disk = sum(f.stat().st_size for f in big.glob("*.safetensors"))
    assert 200e6 < on_disk < 400e6  # "a few hundred MB"
    results = _measure(big, warm, "cpu", "bfloat16", "float32")
    for dtype, result in results.items():
        bound, weights = _bound(big, dtype, weights_on_host=True)
        grew = result["peak"] - result["baseline"]
        assert result["params"] * getattr(torch, dtype).itemsize == weights
        assert grew <= bound, f"{dtype}: peak grew {grew / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB"
        assert grew >= weights * 0.9, dtype  # the measurement is real: the weights themselves are resident


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_peak_host_rss_with_cuda_stays_under_the_bound(big_checkpoint):
    big, warm = big_checkpoint
    result = _measure(big, warm, "cuda", "bfloat16")["bfloat16"]
    bound, _ = _bound(big, "bfloat16", weights_on_host=False)
    grew = result["peak"] - result["baseline"]
    assert grew <= bound, f"host peak grew {grew / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB"
