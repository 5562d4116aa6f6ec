"""Oracle 1: our paged Llama target == transformers' LlamaForCausalLM (float32, atol 1e-4).

Tiny random GQA checkpoints (4 heads / 2 KV heads, 2 layers) with and without llama3 rope
scaling, tied and untied embeddings, loaded through alcheck's loader. Several sequences of
different lengths share ONE paged forward with block size 4 and interleaved (non-contiguous)
block tables; then decode continues through the cache in chunks of 1 and 3 tokens per request
(as verification does) and every position's logits must match HF's full-sequence logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conftest import paged_batch

from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache

ATOL = 1e-4
INIT_STD = 0.3  # logits up to ~8; at 0.5 (logits ~15) float32 noise alone reaches 1.2e-4
BLOCK = 4
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,  # small, so scaled, smoothed and plain bands all occur
}
LENGTHS = [1, 4, 5, 11, 17, 30]  # block boundaries hit from both sides


@dataclass
class Req:
    request_id: int
    num_computed_tokens: int = 0


@pytest.fixture(
    scope="module",
    params=[(False, False), (False, True), (True, False), (True, True)],
    ids=["plain-untied", "plain-tied", "llama3-untied", "llama3-tied"],
)
def models(request, tmp_path_factory):
    from transformers import LlamaForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny import make_tiny_target

    scaled, tied = request.param
    out = make_tiny_target(
        tmp_path_factory.mktemp("hf") / "target",
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        rope_scaling=LLAMA3 if scaled else None,
        tie_word_embeddings=tied,
        seed=7,
        init_std=INIT_STD,
    )
    ours = load_target(str(out)).model
    ref = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager").eval()
    seqs = _sequences(ours.config.vocab_size)
    with torch.no_grad():  # HF's full-sequence outputs, one sequence at a time, no padding
        outs = [ref(torch.tensor([s]), output_hidden_states=True) for s in seqs]
    expected = [(o.logits[0], o.hidden_states[-1][0]) for o in outs]
    return ours, ref, out, scaled, tied, seqs, expected


def _sequences(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in LENGTHS]


def _hf_logits(ref, seq) -> torch.Tensor:
    with torch.no_grad():
        return ref(torch.tensor([seq])).logits[0]


def _allocate_interleaved(kv: KVCacheManager, reqs: list[Req], lengths: list[int]):
    """Grow every request one block at a time, round robin, so block tables interleave."""
    for start in range(0, max(lengths), BLOCK):
        for req, n in zip(reqs, lengths):
            if n > start:
                req.num_computed_tokens = start
                assert kv.allocate_slots(req, min(BLOCK, n - start)) is not None
    for req in reqs:
        req.num_computed_tokens = 0


def _setup(model, reqs, lengths):
    kv = KVCacheManager(64, BLOCK)
    _allocate_interleaved(kv, reqs, lengths)
    bind_kv_cache(model.attention_layers, 64, BLOCK, torch.float32, torch.device("cpu"))
    return kv


def test_one_paged_batch_matches_hf(models):
    ours, _, _, _, _, seqs, expected = models
    reqs = [Req(i) for i in range(len(seqs))]
    kv = _setup(ours, reqs, LENGTHS)
    tables = [kv.block_ids(r.request_id) for r in reqs]
    assert any(t != list(range(t[0], t[0] + len(t))) for t in tables), "block tables should interleave"
    batch = paged_batch(kv, reqs, [0] * len(seqs), LENGTHS)
    with torch.no_grad():
        hidden = ours(torch.tensor([t for s in seqs for t in s]), batch)
        logits = ours.compute_logits(hidden)
    at = 0
    for seq, (ref_logits, ref_hidden) in zip(seqs, expected):
        n = len(seq)
        torch.testing.assert_close(logits[at : at + n], ref_logits, atol=ATOL, rtol=0)
        # the EAGLE feature: hidden state after the final RMSNorm
        torch.testing.assert_close(hidden[at : at + n], ref_hidden, atol=ATOL, rtol=0)
        at += n


def test_decode_through_cache_matches_hf(models):
    """Prefill different prefixes, then chunks of 1 and 3 tokens (verification-shaped) per step."""
    ours, _, _, _, _, seqs, expected = models
    reqs = [Req(i) for i in range(len(seqs))]
    kv = _setup(ours, reqs, LENGTHS)
    check = lambda got, want: torch.testing.assert_close(got, want, atol=ATOL, rtol=0)  # noqa: E731
    assert decode_through_cache(ours, kv, reqs, seqs, [e[0] for e in expected], check) >= 5


def decode_through_cache(model, kv, reqs, seqs, expected_logits, check) -> int:
    """Prefill half of each sequence in one paged forward, then chunks of 1, 3, 1, 3 ... tokens
    per request; check(got, want) every chunk's logits against the full-sequence ones. Returns
    the number of forwards."""
    done, steps = [0] * len(seqs), 0
    while any(d < len(s) for d, s in zip(done, seqs)):
        size = None if steps == 0 else (1 if steps % 2 else 3)
        live = [i for i, (d, s) in enumerate(zip(done, seqs)) if d < len(s)]
        lens = [
            max(1, len(seqs[i]) // 2) if size is None else min(size, len(seqs[i]) - done[i]) for i in live
        ]
        starts = [done[i] for i in live]
        batch = paged_batch(kv, [reqs[i] for i in live], starts, lens)
        ids = torch.tensor([t for i, s, n in zip(live, starts, lens) for t in seqs[i][s : s + n]])
        with torch.no_grad():
            logits = model.compute_logits(model(ids, batch))
        at = 0
        for i, s, n in zip(live, starts, lens):
            check(logits[at : at + n], expected_logits[i][s : s + n])
            at += n
            done[i] = s + n
        steps += 1
    return steps


def test_config_variant_is_real(models):
    """The variant under test really is what it says: tied weights shared, llama3 scaling active."""
    from transformers import LlamaConfig, LlamaForCausalLM

    ours, ref, out, scaled, tied, seqs, expected = models
    assert ours.config.num_key_value_heads == 2 and ours.config.num_attention_heads == 4
    shared = ours.lm_head.weight.data_ptr() == ours.model.embed_tokens.weight.data_ptr()
    assert shared == tied
    if not scaled:
        assert ours.config.rope_scaling is None
        return
    assert ours.config.rope_scaling["rope_type"] == "llama3"
    cfg = LlamaConfig.from_pretrained(str(out))
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_parameters["rope_theta"]}
    plain = LlamaForCausalLM.from_pretrained(str(out), config=cfg, dtype=torch.float32).eval()
    # without the scaling the reference would differ far beyond the tolerance
    assert (_hf_logits(plain, seqs[-1]) - expected[-1][0]).abs().max() > 100 * ATOL
