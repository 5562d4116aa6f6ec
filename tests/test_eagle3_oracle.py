"""EAGLE-3 oracles (issue 11): a from-scratch chain implementation with no KV cache.

`ScratchEagle3` is written here from EAGLE3-NOTES sections 2-4, in float64, sharing no code
with alcheck: it reads config.json and pytorch_model.bin itself, takes the target's auxiliary
states from transformers' `output_hidden_states` (entry i < L = the input of layer i), and
recomputes the target and every draft row from scratch at every step. The paged runner must give
exactly its per-question steps, accepted counts and tokens, K = 1..5; its output must equal
target-only greedy decoding; and each classic EAGLE-3 bug, injected into alcheck, must break that
equality and move AL.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import run_contiguous
from eagle3_bugs import BUGS, PostNormFeedback
from eagle3_pair import MAX_TOKENS, build_pair, key, make_prompts, pooled

from alcheck.methods.table import proposer_for
from alcheck.models.eagle3_loading import load_eagle3
from alcheck.models.loading import load_target
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner
from alcheck.runner.proposers.eagle3 import Eagle3Proposer

KS = [1, 2, 3, 4, 5]


class ScratchEagle3:
    def __init__(self, head_dir, hf_target):
        raw = json.loads((head_dir / "config.json").read_text())
        state = torch.load(head_dir / "pytorch_model.bin", weights_only=True)
        self.w = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
        self.hf = hf_target
        self.embed = hf_target.model.embed_tokens.weight.double()
        self.layers = sorted(raw["eagle_aux_hidden_state_layer_ids"])
        self.heads, self.kv_heads = raw["num_attention_heads"], raw["num_key_value_heads"]
        self.head_dim = raw["hidden_size"] // self.heads
        self.theta = raw.get("rope_theta", 10000.0)
        self.eps = raw["rms_norm_eps"]
        self.norm_before_residual = raw.get("norm_before_residual", False)
        self.draft_to_target = torch.arange(len(self.w["d2t"])) + self.w["d2t"]

    def rms(self, x, name):
        return self.w[name] * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def rope(self, x, pos):  # x [T, heads, d]
        d = x.shape[-1]
        inv = 1.0 / self.theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = pos.double()[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
        rot = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
        return x * cos + rot * sin

    def layer(self, tokens, hidden, pos):
        """Rows in position order, causal: the pre-norm output y of every row."""
        m = "midlayer."
        h_norm = self.rms(hidden, m + "hidden_norm.weight")
        x = torch.cat([self.rms(self.embed[tokens], m + "input_layernorm.weight"), h_norm], -1)
        t = len(tokens)
        q = (x @ self.w[m + "self_attn.q_proj.weight"].T).view(t, self.heads, self.head_dim)
        k = (x @ self.w[m + "self_attn.k_proj.weight"].T).view(t, self.kv_heads, self.head_dim)
        v = (x @ self.w[m + "self_attn.v_proj.weight"].T).view(t, self.kv_heads, self.head_dim)
        q, k = self.rope(q, pos), self.rope(k, pos)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(pos[None, :, None] < pos[None, None, :], float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(t, -1)
        y = (h_norm if self.norm_before_residual else hidden) + attn @ self.w[m + "self_attn.o_proj.weight"].T
        z = self.rms(y, m + "post_attention_layernorm.weight")
        gate, up = z @ self.w[m + "mlp.gate_proj.weight"].T, z @ self.w[m + "mlp.up_proj.weight"].T
        return y + (torch.nn.functional.silu(gate) * up) @ self.w[m + "mlp.down_proj.weight"].T

    def draft(self, y) -> int:
        logits = self.rms(y, "norm.weight") @ self.w["lm_head.weight"].T
        d = int(logits.argmax())
        return int(self.draft_to_target[d])  # d + d2t[d]: a target id

    def target_pass(self, tokens):
        with torch.no_grad():
            out = self.hf(torch.tensor([tokens]), output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i][0] for i in self.layers], -1)  # inputs of those layers
        return out.logits[0].argmax(-1).tolist(), aux

    def chain(self, tokens, aux, k) -> list[int]:
        """K drafts after committed tokens x_0..x_{M-1}, every draft row recomputed: rows
        p = 0..M-2 pair x_{p+1} with fc(aux_p) at position p; chained rows feed back the pre-norm y."""
        rows_tok = list(tokens[1:])
        rows_hidden = aux[: len(tokens) - 1] @ self.w["fc.weight"].T
        drafts = []
        for _ in range(k):
            pos = torch.arange(len(rows_tok))
            y = self.layer(torch.tensor(rows_tok), rows_hidden, pos)
            drafts.append(self.draft(y[-1]))
            rows_tok.append(drafts[-1])
            rows_hidden = torch.cat([rows_hidden, y[-1:]])
        return drafts

    def generate(self, prompt, max_tokens, k, eos):
        tokens, out = list(prompt), []
        steps = accepted = 0
        per_pos = [0] * k

        def commit(new):
            for t in new:
                tokens.append(t)
                out.append(t)
                if t in eos:
                    return "eos"
                if len(out) >= max_tokens:
                    return "length"
            return None

        greedy, aux = self.target_pass(prompt)  # the whole target recomputed on every pass
        finish = commit([greedy[-1]])
        while finish is None:
            drafts = self.chain(tokens, aux, k)
            greedy, aux = self.target_pass(
                tokens + drafts
            )  # verification; its prefix rows feed the next chain
            verify = greedy[len(tokens) - 1 :]
            a = 0
            while a < k and drafts[a] == verify[a]:
                a += 1
            steps, accepted = steps + 1, accepted + a
            for i in range(a):
                per_pos[i] += 1
            finish = commit(drafts[:a] + [verify[a]])
        return (out, steps, accepted, per_pos, finish)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("eagle3"))


@pytest.fixture(scope="module")
def target(dirs):
    return load_target(str(dirs["target"]))


@pytest.fixture(scope="module")
def heads(dirs, target):
    return {name: load_eagle3(str(dirs[name]), target) for name in ("eagle", "speculators", "plain")}


@pytest.fixture(scope="module")
def prompts(target):
    return make_prompts(target.model.config.vocab_size, n=6)


@pytest.fixture(scope="module")
def greedy(target, prompts):
    return PagedRunner(target.model, None, target.eos_token_ids, RunnerConfig(0, block_size=4)).generate(
        prompts, MAX_TOKENS
    )


@pytest.fixture(scope="module")
def oracle(dirs):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(str(dirs["target"]), dtype=torch.float64).eval()
    eos = set(json.loads((dirs["target"] / "generation_config.json").read_text())["eos_token_id"])
    cache = {}

    def get(name, k, prompts):
        if (name, k) not in cache:
            scratch = ScratchEagle3(dirs[name], hf)
            cache[name, k] = [scratch.generate(p, MAX_TOKENS, k, eos) for p in prompts]
        return cache[name, k]

    return get


def run(target, head, prompts, k, proposer=None, **cfg):
    cfg.setdefault("block_size", 4)
    runner = PagedRunner(
        target.model,
        proposer or proposer_for(head),
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, **cfg),
    )
    return runner.generate(prompts, MAX_TOKENS)


@pytest.mark.parametrize("name, k", [*(("eagle", k) for k in KS), ("plain", 1), ("plain", 3)])
def test_paged_runner_equals_the_scratch_chain(target, heads, prompts, oracle, greedy, name, k):
    results = run(target, heads[name], prompts, k)
    expected = oracle(name, k, prompts)
    for i, (got, want) in enumerate(zip(results, expected)):
        assert key(got) == want, f"question {i}"
    for got, want in zip(results, greedy):  # lossless: the target-only greedy output
        assert got.output_ids == want.output_ids
    assert 1.0 < pooled(results) < k + 1  # partial acceptance: the pair is a real test
    if name == "eagle" and k >= 2:  # chained drafts are accepted too, so chain bugs show
        assert sum(r.accepted_per_pos[1] for r in results) > 0


@pytest.mark.parametrize("k", [1, 3, 5])
def test_contiguous_and_no_lookahead_runners_equal_the_paged_one(target, heads, prompts, k):
    head = heads["eagle"]
    paged = run(target, head, prompts, k)
    contiguous = run_contiguous(target.model, head, target.eos_token_ids, prompts, MAX_TOKENS, k)
    preempted = run(target, head, prompts, k, num_blocks=30, max_batch_size=3)
    for a, b, c in zip(paged, contiguous, preempted):
        assert key(a) == key(b) == key(c)


def test_both_formats_load_to_identical_tensors_and_runs(target, heads, prompts):
    a, b = heads["eagle"], heads["speculators"]
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name
    assert torch.equal(a.draft_to_target, b.draft_to_target) and a.aux_layers == b.aux_layers
    assert b.embed_tokens is None  # its embedding copy equals the target's, so the target's is used
    for k in (2, 4):
        assert [key(r) for r in run(target, a, prompts, k)] == [key(r) for r in run(target, b, prompts, k)]


def test_draft_distribution_lives_on_mapped_target_ids(target, heads, prompts):
    """At temperature > 0 the proposer returns target-vocabulary distributions: zero outside the
    ids d2t maps to, and equal there to the softmax of the draft logits."""
    head = heads["eagle"]
    captured = {}
    real = Eagle3Proposer.propose

    def spy(self, runner, reqs, inputs, features, starts, k):
        drafts, dists = real(self, runner, reqs, inputs, features, starts, k)
        captured.setdefault("out", (drafts, dists))
        return drafts, dists

    Eagle3Proposer.propose = spy
    try:
        run(target, head, prompts[:3], 3, temperature=0.9, seed=3, draft_sampling="sampled")
    finally:
        Eagle3Proposer.propose = real
    drafts, dists = captured["out"]
    vocab = target.model.config.vocab_size
    assert dists.shape == (3, 3, vocab)
    mapped = torch.zeros(vocab, dtype=torch.bool)
    mapped[head.draft_to_target] = True
    assert torch.allclose(dists.sum(-1), torch.ones(3, 3))
    assert (dists[..., ~mapped] == 0).all() and (dists[..., mapped] > 0).all()
    assert mapped[drafts].all()  # sampled drafts are target ids in the draft vocabulary


# -- bugs the oracle must catch ----------------------------------------------------------------


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_injected_bug_breaks_the_oracle_and_moves_al(
    target, heads, prompts, oracle, greedy, monkeypatch, bug
):
    k = 3
    head = heads["eagle"]
    proposer = None
    if BUGS[bug] is PostNormFeedback:
        proposer = PostNormFeedback(head)
    else:
        monkeypatch.setattr(*BUGS[bug], raising=False)  # d2t: a buffer, not a class attribute
    results = run(target, head, prompts, k, proposer=proposer)
    expected = oracle("eagle", k, prompts)
    assert [key(r) for r in results] != list(expected)
    correct_al = (sum(w[1] + w[2] for w in expected)) / sum(w[1] for w in expected)
    assert pooled(results) != correct_al  # the trained demo head shows how much (test_eagle3_demo.py)
    for got, want in zip(results, greedy):  # verification still makes the output lossless
        assert got.output_ids == want.output_ids
