"""Tensor parallelism (alcheck.tp) on CPU: 2 ranks over gloo, spawned ONCE for the model checks.

Oracles are the unsplit model's numbers computed here, in the test process, through the normal
loaders and runner:
- logits at TP=2 equal TP=1 to float32 tolerance (a prefill and a verify step);
- greedy output, per-question steps and accepted counts at TP=2 equal TP=1 exactly, K = 1..5,
  under preemption (few KV blocks of 4 tokens), for an EAGLE-1 and an EAGLE-3 pair, and both
  ranks produce the same results;
- the slot audit counts zero out-of-ownership KV writes;
- each rank's KV cache holds only its own KV heads, and its weight bytes are about half the total
  (exactly: the split tensors halve, the norms are repeated on both ranks).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import paged_batch, run_spec

from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache
from alcheck.tp.launch import run_ranks

KS = [1, 2, 3, 4, 5]
KS_EAGLE3 = [3]
MAX_TOKENS = 32
NUM_BLOCKS = 20  # blocks of 4 tokens: the longest request needs up to 18, so requests get preempted


class _Req:
    def __init__(self, request_id):
        self.request_id, self.num_computed_tokens = request_id, 0


def _logits(model, seqs, drafts):
    """Logits of a prefill over seqs, then of a verify step feeding drafts[b] after seq b."""
    reqs = [_Req(i) for i in range(len(seqs))]
    kv = KVCacheManager(64, 4)
    for r, s, d in zip(reqs, seqs, drafts):
        kv.allocate_slots(r, len(s) + len(d))
    bind_kv_cache(model.attention_layers, 64, 4, torch.float32, torch.device("cpu"))
    with torch.inference_mode():
        batch = paged_batch(kv, reqs, [0] * len(seqs), [len(s) for s in seqs])
        prefill = model.compute_logits(model(torch.tensor([t for s in seqs for t in s]), batch))
        batch = paged_batch(kv, reqs, [len(s) for s in seqs], [len(d) for d in drafts])
        verify = model.compute_logits(model(torch.tensor([t for d in drafts for t in d]), batch))
    return prefill, verify


def _key(r):
    return (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason)


def _runs(target, head, prompts, ks):
    """{K: (result keys, preemptions, slot violations, KV heads in the target's cache)}."""
    out = {}
    for k in ks:
        results, runner = run_spec(
            target.model,
            head,
            target.eos_token_ids,
            prompts,
            max_tokens=MAX_TOKENS,
            k=k,
            num_blocks=NUM_BLOCKS,
            audit_slots=True,
        )
        out[k] = (
            [_key(r) for r in results],
            sum(r.preemptions for r in results),
            runner.auditor.violations,
            runner.kv_cache.shape[-2],
        )
    return out


def _rank_checks(tp, spec):
    """Everything the model tests need, on one rank; rank 0's dict comes back."""
    import torch.distributed as dist

    from alcheck.methods.pair import PairPlan, load_pair
    from alcheck.models.sizes import module_bytes

    torch.set_num_threads(1)

    def pair(target_dir, draft_dir, method):
        loaded = load_pair(
            PairPlan(Path(target_dir), Path(draft_dir), method, "float32"), str(tp.device), tp=tp
        )
        return loaded.target, loaded.head

    target, head = pair(spec["target"], spec["eagle"], "eagle")
    out = {
        "logits": _logits(target.model, spec["seqs"], spec["drafts"]),
        "eagle": _runs(target, head, spec["prompts"], KS),
        "weight_bytes": module_bytes(target.model),
        "kv_heads": [a.num_kv_heads for a in target.model.attention_layers],
    }
    out["uneven_logits"] = _logits(_uneven_model(spec["uneven"], tp), *_in_vocab(spec, 301))
    target3, head3 = pair(spec["target3"], spec["eagle3"], "eagle3")
    out["eagle3"] = _runs(target3, head3, spec["prompts3"], KS_EAGLE3)
    # a draft model (the target itself) is loaded whole on every rank beside the split target
    out["draft_model"] = _runs(*pair(spec["target"], spec["target"], "draft_model"), spec["prompts"], [3])
    everyone = [None] * tp.size
    dist.all_gather_object(everyone, {k: v for k, v in out.items() if not k.endswith("logits")})
    out["all_ranks"] = everyone
    return out


def _in_vocab(spec, vocab):
    return [[t % vocab for t in s] for s in spec["seqs"]], [[t % vocab for t in d] for d in spec["drafts"]]


def _uneven_model(directory, tp=None):
    from alcheck.models.loading import load_target_model, model_config, read_config

    cfg = model_config(read_config(Path(directory), "target"), Path(directory), "target")
    return load_target_model(Path(directory), cfg, tp=tp)


@pytest.fixture(scope="module")
def uneven_dir(tmp_path_factory):
    """Vocabulary 301 and intermediate size 101: ranks hold parts that differ by one row."""
    from alcheck.testing.tiny import make_sharded_llama

    config = dict(
        hidden_size=64,
        intermediate_size=101,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=301,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=256,
        architectures=["LlamaForCausalLM"],
        model_type="llama",
    )
    return make_sharded_llama(
        tmp_path_factory.mktemp("tp-uneven") / "target", config, num_shards=2, dtype=torch.float32, std=0.2
    )


@pytest.fixture(scope="module")
def eagle3_dirs(tmp_path_factory):
    from alcheck.testing.tiny import damp_target_layers, make_tiny_eagle3, make_tiny_target

    root = tmp_path_factory.mktemp("tp-eagle3")
    target = make_tiny_target(root / "target", num_layers=4, unit_rms_embeddings=True)
    damp_target_layers(target, first=1, factor=0.05)
    # the speculators format ships the embedding: each rank gathers the split one to compare it
    head = make_tiny_eagle3(
        root / "eagle3",
        target,
        fmt="speculators",
        norm_before_residual=True,
        copy_target_layer=0,
        aux_layer_ids=(1, 2, 3),
    )
    return target, head


@pytest.fixture(scope="module")
def spec(pair, pair_dirs, eagle3_dirs, uneven_dir):
    vocab = pair[0].model.config.vocab_size
    rng = random.Random(1)
    prompts = [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(5)]
    return {
        "target": str(pair_dirs[0]),
        "eagle": str(pair_dirs[1]),
        "prompts": prompts,
        "seqs": prompts[:3],
        "drafts": [[rng.randrange(vocab) for _ in range(4)] for _ in range(3)],
        "uneven": str(uneven_dir),
        "target3": str(eagle3_dirs[0]),
        "eagle3": str(eagle3_dirs[1]),
        "prompts3": prompts[:4],
    }


@pytest.fixture(scope="module")
def tp2(spec):
    return run_ranks(2, _rank_checks, spec, start_method="fork")


@pytest.fixture(scope="module")
def tp1_eagle3(spec, eagle3_dirs):
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_target

    target = load_target(spec["target3"])
    return target, load_eagle3(spec["eagle3"], target)


def test_logits_equal_the_unsplit_model(tp2, pair, spec):
    want_prefill, want_verify = _logits(pair[0].model, spec["seqs"], spec["drafts"])
    got_prefill, got_verify = tp2["logits"]
    assert got_prefill.shape == want_prefill.shape and got_verify.shape == want_verify.shape
    torch.testing.assert_close(got_prefill, want_prefill, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_verify, want_verify, rtol=1e-5, atol=1e-5)
    assert want_verify.std() > 0.1  # not a degenerate model


def test_logits_with_uneven_vocab_and_mlp_splits(tp2, uneven_dir, spec):
    want_prefill, want_verify = _logits(_uneven_model(uneven_dir), *_in_vocab(spec, 301))
    got_prefill, got_verify = tp2["uneven_logits"]
    assert want_prefill.shape[-1] == 301
    torch.testing.assert_close(got_prefill, want_prefill, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_verify, want_verify, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_results_equal_tp1_exactly(tp2, pair, tp1_eagle3, spec, method):
    target, head = pair if method == "eagle" else tp1_eagle3
    prompts, ks = (spec["prompts"], KS) if method == "eagle" else (spec["prompts3"], KS_EAGLE3)
    want = _runs(target, head, prompts, ks)
    for k in ks:
        got_keys, got_preempted, violations, kv_heads = tp2[method][k]
        want_keys, want_preempted, want_violations, full_kv_heads = want[k]
        assert want_preempted > 0 and want_violations == 0  # the reference run is a real preemption test
        assert got_keys == want_keys, f"K={k}: TP=2 results differ from TP=1"
        assert got_preempted == want_preempted
        assert violations == 0, f"K={k}: {violations} KV writes outside the request's blocks"
        assert kv_heads * 2 == full_kv_heads  # each rank's cache holds its own KV heads only
    assert any(acc > 0 for k in ks for (_, _, acc, _, _) in want[k][0])  # drafts do get accepted


def test_a_draft_model_beside_a_split_target_equals_tp1(tp2, pair, spec):
    from alcheck.methods.draft_model import DRAFT_MODEL

    target = pair[0]
    want = _runs(target, DRAFT_MODEL.load(spec["target"], target, torch.float32, "cpu"), spec["prompts"], [3])
    got_keys, got_preempted, violations, _ = tp2["draft_model"][3]
    assert got_keys == want[3][0] and got_preempted == want[3][1] > 0 and violations == 0
    assert all(acc == 3 * steps for (_, steps, acc, _, _) in got_keys)  # the target drafts for itself


def test_ranks_agree(tp2):
    first, second = tp2["all_ranks"]
    assert first == second


def test_each_rank_holds_half_the_weights(tp2, pair):
    from alcheck.models.sizes import module_bytes

    full = pair[0].model
    total = module_bytes(full)
    norms = sum(p.numel() * p.element_size() for n, p in full.named_parameters() if "norm" in n)
    first, second = (r["weight_bytes"] for r in tp2["all_ranks"])
    assert first + second == total + norms  # split tensors halve; only the norms are on both ranks
    assert max(first, second) < 0.51 * total
    assert tp2["kv_heads"] == [a.num_kv_heads // 2 for a in full.attention_layers]
