"""The built-in runners under --method mtp against an independent oracle (float32 CPU).

The oracle shares nothing with the proposer or the runners. The trunk is transformers' own
Qwen2ForCausalLM run from scratch over the whole sequence at every step (no KV cache); a forward
hook takes its last layer's output (before the final norm). The MTP layer is written out below in
plain torch from the checkpoint's tensors (RMSNorms, q/k/v with bias, RoPE, grouped-query causal
attention, SwiGLU MLP), also recomputed from scratch over every row:

    row p (p < n): trunk state h_p and token x_{p+1} (its embedding zero at position 0)
    draft row n-1+j: the row before's MTP output and draft j

with layer 0 for every draft (vLLM 0.32's rule). Per question, steps, accepted and
accepted_per_pos must equal the runner's, K=1..5, on a one-layer and a two-layer MTP target.
"""

from __future__ import annotations

import json

import pytest
import torch
from chain_oracle import greedy_chain, lossless_p_value, method_rows, random_prompts

from alcheck import paths
from alcheck.runner.config import RunnerConfig

MAX_TOKENS = 20


@pytest.fixture(scope="module")
def mtp_targets(tmp_path_factory):
    """num_mtp_layers -> dict(folder, alcheck Target, transformers trunk, MTP tensors, config)."""
    from safetensors.torch import load_file
    from transformers import Qwen2ForCausalLM

    from alcheck.models.loading import load_target
    from alcheck.testing.tiny_mtp import make_tiny_mimo_target

    cache = {}

    def get(layers):
        if layers not in cache:
            if layers == "demo":  # the shipped demo MTP target (alcheck-demo-mimo), trained
                folder = paths.DEMO_MTP_DIR
            else:
                root = tmp_path_factory.mktemp(f"mtp{layers}")
                folder = make_tiny_mimo_target(root / "t", layers, seed=layers)
            trunk = Qwen2ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
            cache[layers] = dict(
                folder=folder,
                target=load_target(str(folder)),
                trunk=trunk,
                state={n: t.float() for n, t in load_file(str(folder / "model.safetensors")).items()},
                raw=json.loads((folder / "config.json").read_text()),
            )
        return cache[layers]

    return get


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    freqs = positions[:, None].float() * inv[None]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos[:, None] + half * sin[:, None]


def mtp_layer(s: dict, raw: dict, hidden, tokens):
    """MTP layer 0 over rows 0..n-1 (hidden [n, H], tokens [n]) from scratch -> outputs [n, H]."""
    p, eps = "model.mtp_layers.0.", raw["rms_norm_eps"]
    n, heads, kv = len(tokens), raw["num_attention_heads"], raw["num_key_value_heads"]
    d = raw["hidden_size"] // heads
    positions = torch.arange(n)
    e = s["model.embed_tokens.weight"][torch.tensor(tokens)]
    e = torch.where(positions[:, None] == 0, torch.zeros_like(e), e)
    x = torch.cat(
        [_rms(hidden, s[p + "hidden_layernorm.weight"], eps), _rms(e, s[p + "token_layernorm.weight"], eps)],
        -1,
    )
    x = x @ s[p + "input_proj.weight"].T
    a = _rms(x, s[p + "input_layernorm.weight"], eps)

    def proj(name, count):
        w = p + f"self_attn.{name}_proj."
        return (a @ s[w + "weight"].T + s[w + "bias"]).view(n, count, d)

    theta = (raw.get("rope_parameters") or {}).get("rope_theta") or raw.get("rope_theta")
    q, k, v = _rope(proj("q", heads), positions, theta), _rope(proj("k", kv), positions, theta), proj("v", kv)
    k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / d**0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, heads * d)
    x = x + out @ s[p + "self_attn.o_proj.weight"].T
    m = _rms(x, s[p + "post_attention_layernorm.weight"], eps)
    gate, up = m @ s[p + "mlp.gate_proj.weight"].T, m @ s[p + "mlp.up_proj.weight"].T
    x = x + (torch.nn.functional.silu(gate) * up) @ s[p + "mlp.down_proj.weight"].T
    return _rms(x, s[p + "final_layernorm.weight"], eps)


@torch.no_grad()
def _trunk(trunk, tokens):
    """(greedy next token after every prefix, last layer's output before the final norm)."""
    seen = {}
    hook = trunk.model.layers[-1].register_forward_hook(
        lambda m, i, o: seen.update(h=o[0] if isinstance(o, tuple) else o)
    )
    logits = trunk(torch.tensor([tokens])).logits[0]
    hook.remove()
    return logits.argmax(-1).tolist(), seen["h"][0]


def oracle_rows(f, eos, prompt, k):
    """{steps, accepted, accepted_per_pos, output}: MTP layer 0 drafts K tokens from the trunk's
    states, each draft's output the next row's state, in the shared loop."""
    s, raw = f["state"], f["raw"]
    head = s.get("lm_head.weight", s["model.embed_tokens.weight"])

    @torch.no_grad()
    def propose(tokens, k):
        _, h = _trunk(f["trunk"], tokens)
        rows_h, rows_x = list(h[: len(tokens) - 1]), tokens[1:]
        draft = []
        for _ in range(k):
            last = mtp_layer(s, raw, torch.stack(rows_h), rows_x)[-1]
            draft.append(int((last @ head.T).argmax()))
            rows_h, rows_x = [*rows_h, last], [*rows_x, draft[-1]]
        return draft

    return greedy_chain(prompt, eos, k, MAX_TOKENS, lambda tokens: _trunk(f["trunk"], tokens)[0], propose)


def runner_rows(target, folder, prompts, k, runner="paged", **cfg):
    from alcheck.methods.mtp import MTP_METHOD

    return method_rows(MTP_METHOD, folder, target, prompts, k, MAX_TOKENS, runner, **cfg)


@pytest.mark.parametrize("layers", [1, 2])
def test_runner_rows_equal_the_oracle(mtp_targets, layers):
    f = mtp_targets(layers)
    target = f["target"]
    eos = frozenset(target.eos_token_ids)
    prompts = random_prompts(target.model.config.vocab_size, seed=layers)
    accepted = rejected = 0
    for k in range(1, 6):
        got = runner_rows(target, f["folder"], prompts, k, audit_slots=True)
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            assert row == oracle_rows(f, eos, prompt, k), f"{layers} MTP layers, K={k}, prompt {i}"
            accepted += row["accepted"]
            rejected += row["steps"] - row["accepted_per_pos"][-1]
    assert accepted > 0 and rejected > 0  # the MTP layer's drafts were accepted, and rejected


def test_the_demo_mtp_target_equals_the_oracle_on_mt_bench(mtp_targets):
    """The shipped, trained demo MTP target on the first MT-Bench questions (as `alcheck run`
    prompts them), K=1..3: the runner's rows are the oracle's, and its drafts are often accepted."""
    from alcheck.prompts.dataset import validate_jsonl
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol

    f = mtp_targets("demo")
    target = f["target"]
    eos = frozenset(target.eos_token_ids)
    protocol = get_protocol("vllm-example")
    questions = validate_jsonl(paths.MT_BENCH_FILE)[:3]
    prompts = [build_prompt_ids(target.tokenizer, protocol, q.turns[:1]) for q in questions]
    steps = accepted = 0
    for k in range(1, 4):
        got = runner_rows(target, f["folder"], prompts, k)
        for i, (prompt, row) in enumerate(zip(prompts, got)):
            assert row == oracle_rows(f, eos, prompt, k), f"demo MTP target, K={k}, question {i}"
            steps, accepted = steps + row["steps"], accepted + row["accepted"]
    assert accepted / steps > 0.3  # trained: its drafts are accepted often


def test_every_runner_and_batching_gives_the_same_rows(mtp_targets):
    """The contiguous and static runners, and small batches with a tight pool, give the paged rows."""
    f = mtp_targets(1)
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=2)
    want = runner_rows(target, f["folder"], prompts, 3)
    assert runner_rows(target, f["folder"], prompts, 3, "contiguous") == want
    assert runner_rows(target, f["folder"], prompts, 3, "static") == want
    assert runner_rows(target, f["folder"], prompts, 3, max_batch_size=2, num_blocks=20) == want


def test_no_kv_lookahead_reproduces_the_bug_for_the_mtp_layer(mtp_targets):
    """Without lookahead slots the MTP layer's own KV writes past the allocated blocks land in
    block 0 (the audit counts them) and corrupt some request's KV."""
    from alcheck.methods.mtp import MTP_METHOD
    from alcheck.runner.paged import PagedRunner

    f = mtp_targets(1)
    target = f["target"]
    prompts = random_prompts(target.model.config.vocab_size, n=6, seed=3)
    want = runner_rows(target, f["folder"], prompts, 4)
    head = MTP_METHOD.load(f["folder"], target, torch.float32, "cpu")
    config = RunnerConfig(num_spec_tokens=4, block_size=4, kv_lookahead=False, audit_slots=True)
    runner = PagedRunner(target.model, MTP_METHOD.proposer(head), target.eos_token_ids, config)
    got = runner.generate(prompts, MAX_TOKENS)
    assert runner.slot_violations > 0
    assert [(r.steps, r.accepted) for r in got] != [(w["steps"], w["accepted"]) for w in want]


@pytest.mark.parametrize("runner", ["paged", "static"])
def test_sampling_is_lossless(mtp_targets, runner):
    """At temperature 1 the runner's outputs (one-hot MTP drafts) pass the two-sample test against
    target-only samples (p >= 0.01)."""
    from alcheck.methods.mtp import MTP_METHOD

    f = mtp_targets(1)
    prompts = random_prompts(f["target"].model.config.vocab_size, n=6, seed=4)
    p, line = lossless_p_value(MTP_METHOD, f["folder"], f["target"], prompts, MAX_TOKENS, runner)
    assert p >= 0.01, line
