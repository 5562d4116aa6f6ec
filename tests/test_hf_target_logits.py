"""Oracle 1 for targets run through transformers' modeling code (models/hf_target.py): the logits
equal transformers' own AutoModelForCausalLM forward, float32, for Qwen2 (q/k/v bias), Qwen3
(q/k norm, head_dim != hidden / heads), Qwen3-MoE (routed experts) and Mistral.

As tests/test_model_vs_hf.py does for the native Llama: sequences of different lengths share one
paged forward with block size 4 and interleaved block tables, then decode continues through the
cache in chunks of 1 and 3 tokens; every position's logits must match the reference's
full-sequence logits. The EAGLE-3 features (inputs of layers 1..3) must equal transformers'
hidden_states[i], and the adapter must match the native Llama target on a Llama checkpoint.
"""

from __future__ import annotations

import pytest
import torch
from arch_pairs import ARCHS, arch_pair  # noqa: F401 - fixture
from conftest import paged_batch
from test_model_vs_hf import BLOCK, LENGTHS, Req, _allocate_interleaved, decode_through_cache

from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache

ATOL = 1e-4
MAX_DIFFS: dict[str, float] = {}  # what each architecture reached (printed with -s)


@pytest.fixture(scope="module", params=ARCHS)
def models(request, arch_pair):  # noqa: F811 - the fixture above
    from transformers import AutoModelForCausalLM

    from alcheck.models.loading import load_target

    directory = arch_pair(request.param)["target"]
    ours = load_target(str(directory)).model
    ref = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(11)
    seqs = [torch.randint(0, ours.config.vocab_size, (n,), generator=g).tolist() for n in LENGTHS]
    with torch.no_grad():
        outs = [ref(torch.tensor([s]), output_hidden_states=True) for s in seqs]
    return request.param, ours, ref, seqs, outs, directory


def _setup(model, reqs):
    kv = KVCacheManager(64, BLOCK)
    _allocate_interleaved(kv, reqs, LENGTHS)
    bind_kv_cache(model.attention_layers, 64, BLOCK, torch.float32, torch.device("cpu"))
    return kv


def _close(arch, got, want):
    MAX_DIFFS[arch] = max(MAX_DIFFS.get(arch, 0.0), float((got - want).abs().max()))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_runs_transformers_code(models):
    arch, ours, ref, _, _, _ = models
    assert type(ours).__name__ == "HFTarget"
    assert type(ours.model).__name__ == type(ref.model).__name__  # transformers' own decoder class
    assert ours.config._attn_implementation == "alcheck_paged"


def test_one_paged_batch_matches_transformers(models):
    arch, ours, _, seqs, outs, _ = models
    reqs = [Req(i) for i in range(len(seqs))]
    kv = _setup(ours, reqs)
    batch = paged_batch(kv, reqs, [0] * len(seqs), LENGTHS)
    aux = (1, 2, 3)
    with torch.no_grad():
        hidden, features = ours(torch.tensor([t for s in seqs for t in s]), batch, aux_layers=aux)
        logits = ours.compute_logits(hidden)
    at = 0
    for seq, out in zip(seqs, outs):
        n = len(seq)
        _close(arch, logits[at : at + n], out.logits[0])
        # EAGLE-3 features: the residual streams entering layers 1, 2, 3 (hidden_states[i])
        want = torch.cat([out.hidden_states[i][0] for i in aux], dim=-1)
        # residual streams reach ~300 here: float32 rounding is relative to the stream's scale, and
        # transformers' own float32 forward is up to 1.6e-6 of it from its float64 one (qwen3)
        scale = float(want.abs().max())
        torch.testing.assert_close(features[at : at + n], want, atol=max(ATOL, 2e-6 * scale), rtol=1e-5)
        at += n


def test_decode_through_cache_matches_transformers(models):
    arch, ours, _, seqs, outs, _ = models
    reqs = [Req(i) for i in range(len(seqs))]
    kv = _setup(ours, reqs)
    expected = [out.logits[0] for out in outs]
    assert (
        decode_through_cache(ours, kv, reqs, seqs, expected, lambda got, want: _close(arch, got, want)) >= 5
    )


def test_the_architecture_is_real(models):
    """What makes each architecture differ from Llama is there and changes the logits."""
    arch, ours, ref, seqs, outs, _ = models
    names = dict(ours.named_parameters())
    layer = "model.layers.1."
    if arch == "qwen2":
        assert layer + "self_attn.q_proj.bias" in names and layer + "self_attn.o_proj.bias" not in names
        victim = layer + "self_attn.k_proj.bias"
    elif arch in ("qwen3", "qwen3_moe"):
        assert ours.attention_layers[0].head_dim * ours.config.num_attention_heads != ours.config.hidden_size
        victim = layer + "self_attn.k_norm.weight"
    else:  # mistral: Llama's layout, its difference is the window (test_hf_target_window.py)
        return
    if arch == "qwen3_moe":
        experts = names[layer + "mlp.experts.gate_up_proj"]
        assert experts.shape[0] == ref.config.num_experts == 4
    # perturbing that tensor in the reference moves its logits far beyond the tolerance
    with torch.no_grad():
        param = dict(ref.named_parameters())[victim]
        saved = param.clone()
        param.mul_(1.5)
        moved = ref(torch.tensor([seqs[-1]])).logits[0]
        param.copy_(saved)
    assert (moved - outs[-1].logits[0]).abs().max() > 100 * ATOL


def test_adapter_equals_native_llama(tmp_path):
    """The same Llama checkpoint through the adapter and through alcheck's own model."""
    from alcheck.models.hf_loading import build_transformers, load_transformers
    from alcheck.models.llama_loading import load_llama
    from alcheck.models.loading import read_config
    from alcheck.models.targets import TargetKind, _hf_check
    from alcheck.testing.tiny import make_tiny_target

    directory = make_tiny_target(tmp_path / "llama", num_layers=2, init_std=0.3)
    raw = read_config(directory, "target")
    native = load_llama(directory, raw)
    kind = TargetKind(
        "llama",
        ("LlamaForCausalLM",),
        load_transformers,
        build_transformers,
        _hf_check,
        "transformers",
        "LlamaConfig",
        "LlamaForCausalLM",
    )
    adapted = kind.load(directory, raw, torch.float32, "cpu")
    seq = torch.randint(0, raw["vocab_size"], (23,), generator=torch.Generator().manual_seed(3))
    reqs = [Req(0)]
    outs = []
    for model in (native, adapted):
        kv = KVCacheManager(16, BLOCK)
        assert kv.allocate_slots(reqs[0], len(seq)) is not None
        bind_kv_cache(model.attention_layers, 16, BLOCK, torch.float32, torch.device("cpu"))
        with torch.no_grad():
            outs.append(model.compute_logits(model(seq, paged_batch(kv, reqs, [0], [len(seq)]))))
        reqs[0].num_computed_tokens = 0
    torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=0)
    from alcheck.models.targets import parameter_count

    assert parameter_count(raw, directory) == sum(p.numel() for p in native.parameters())


def test_parameter_count_from_config(models):
    """What a memory check before loading counts equals what loads (experts and ties included)."""
    from alcheck.models.loading import read_config
    from alcheck.models.targets import parameter_count

    arch, ours, ref, _, _, directory = models
    loaded = sum(p.numel() for p in ours.parameters())
    assert loaded == sum(p.numel() for p in ref.parameters())
    assert parameter_count(read_config(directory, "target"), directory) == loaded


def teardown_module(module):
    if MAX_DIFFS:
        print(
            "\nmax |logit difference| vs transformers:", {k: f"{v:.2e}" for k, v in sorted(MAX_DIFFS.items())}
        )
