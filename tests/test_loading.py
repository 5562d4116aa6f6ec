"""Checkpoint loading in the real on-disk formats, its one-line errors, and oracle 4.

Formats: sharded safetensors, single and sharded `.bin` targets, EAGLE-1 heads as `.bin` and
safetensors. Errors: AlcheckError, one line, naming the file (or folder) and the fix.
Oracle 4: the EAGLE-1 head's draft logits for whole sequences equal a from-scratch float64
implementation written here from EAGLE-NOTES section 2 (no KV cache, everything recomputed),
and the runner's chained drafts equal that implementation's greedy chain on the real target
features (EAGLE-NOTES section 4).
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import time

import pytest
import torch
from conftest import expect_error, paged_batch, run_spec

from alcheck.kv.manager import KVCacheManager
from alcheck.models.attention import bind_kv_cache
from alcheck.models.loading import load_eagle, load_target


def _copy(src, dst) -> pathlib.Path:
    shutil.copytree(src, dst)
    return pathlib.Path(dst)


def _edit_json(file, **changes):
    raw = json.loads(file.read_text())
    raw.update(changes)
    file.write_text(json.dumps(raw))


def _state(module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in module.state_dict().items()}


def _same_weights(a, b):
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


@pytest.fixture(scope="module")
def target(random_dirs):
    return load_target(str(random_dirs[0]))


@pytest.fixture(scope="module")
def head_state(random_dirs):
    return torch.load(random_dirs[1] / "pytorch_model.bin", weights_only=True)


# -- formats -----------------------------------------------------------------------------------


def test_sharded_safetensors_target(tmp_path, target):
    from alcheck.testing.tiny import make_tiny_target

    out = make_tiny_target(tmp_path / "sharded", num_layers=2, max_shard_size="50KB")  # same seed
    assert (out / "model.safetensors.index.json").is_file() and len(list(out.glob("model-*.safetensors"))) > 1
    _same_weights(load_target(str(out)).model, target.model)


def _to_bin(src: pathlib.Path, dst: pathlib.Path, shards: int) -> pathlib.Path:
    """Re-save a safetensors target as pytorch_model.bin (or index-sharded .bin files).
    (transformers 5 ignores save_pretrained(safe_serialization=False), so write them by hand.)"""
    from safetensors.torch import load_file

    out = _copy(src, dst)
    state = load_file(str(out / "model.safetensors"))
    (out / "model.safetensors").unlink()
    if shards == 1:
        torch.save(state, out / "pytorch_model.bin")
        return out
    keys, weight_map = sorted(state), {}
    per = math.ceil(len(keys) / shards)
    for i in range(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {k: state[k] for k in keys[i * per : (i + 1) * per]}
        torch.save(part, out / name)
        weight_map.update(dict.fromkeys(part, name))
    (out / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return out


@pytest.mark.parametrize("shards", [1, 3])
def test_bin_target(tmp_path, random_dirs, target, shards):
    out = _to_bin(random_dirs[0], tmp_path / "bin", shards)
    assert not list(out.glob("*.safetensors"))
    loaded = load_target(str(out))
    _same_weights(loaded.model, target.model)
    assert loaded.eos_token_ids == target.eos_token_ids


def test_eagle_bin_and_safetensors_agree(tmp_path, random_dirs, target, head_state):
    from safetensors.torch import save_file

    from_bin = load_eagle(str(random_dirs[1]), target)
    out = tmp_path / "eagle-st"
    out.mkdir()
    shutil.copy(random_dirs[1] / "config.json", out / "config.json")
    save_file(head_state, str(out / "model.safetensors"))
    from_st = load_eagle(str(out), target)
    _same_weights(from_bin, from_st)
    assert torch.equal(from_bin.fc.bias, head_state["fc.bias"])  # "bias": true in config.json
    assert not hasattr(from_bin.layers[0], "input_layernorm")  # EAGLE-1 layer 0 has none


def test_tied_target_has_no_lm_head_tensor(tmp_path):
    from safetensors.torch import load_file

    from alcheck.testing.tiny import make_tiny_target

    out = make_tiny_target(tmp_path / "tied", num_layers=1, tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(str(out / "model.safetensors"))
    model = load_target(str(out)).model
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


# -- errors --------------------------------------------------------------------------------------


def test_missing_config(tmp_path, random_dirs):
    out = _copy(random_dirs[0], tmp_path / "t")
    (out / "config.json").unlink()
    expect_error(lambda: load_target(str(out)), out / "config.json", "missing")


def test_invalid_config_json(tmp_path, random_dirs):
    out = _copy(random_dirs[0], tmp_path / "t")
    (out / "config.json").write_text("{not json")
    expect_error(lambda: load_target(str(out)), out / "config.json")


def test_missing_weights(tmp_path, random_dirs):
    out = _copy(random_dirs[0], tmp_path / "t")
    (out / "model.safetensors").unlink()
    expect_error(lambda: load_target(str(out)), out, "model.safetensors", "pytorch_model.bin")


def test_missing_shard(tmp_path):
    from alcheck.testing.tiny import make_tiny_target

    out = make_tiny_target(tmp_path / "sharded", num_layers=1, max_shard_size="50KB")
    victim = sorted(out.glob("model-*.safetensors"))[1]
    victim.unlink()
    expect_error(lambda: load_target(str(out)), victim)


def test_non_llama_config(tmp_path, random_dirs):
    out = _copy(random_dirs[0], tmp_path / "t")
    _edit_json(out / "config.json", model_type="gpt2", architectures=["GPT2LMHeadModel"])
    expect_error(lambda: load_target(str(out)), out / "config.json", "gpt2")


def test_auto_map_refused(tmp_path, random_dirs):
    out = _copy(random_dirs[0], tmp_path / "t")
    _edit_json(out / "config.json", auto_map={"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})
    expect_error(lambda: load_target(str(out)), out / "config.json", "auto_map")


def test_draft_auto_map_refused(tmp_path, random_dirs, target):
    out = _copy(random_dirs[1], tmp_path / "e")
    _edit_json(out / "config.json", auto_map={"AutoModel": "x.Y"})
    expect_error(lambda: load_eagle(str(out), target), out / "config.json", "auto_map")


@pytest.mark.parametrize("field, value", [("hidden_size", 32), ("vocab_size", 1000)])
def test_draft_target_mismatch(tmp_path, random_dirs, target, field, value):
    out = _copy(random_dirs[1], tmp_path / "e")
    _edit_json(out / "config.json", **{field: value})
    expect_error(
        lambda: load_eagle(str(out), target),
        out / "config.json",
        random_dirs[0] / "config.json",
        field,
        value,
    )


class Evil:
    """Unpickling this would run code (create a marker file)."""

    marker: pathlib.Path

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def _evil_bin(file: pathlib.Path, state: dict, marker: pathlib.Path):
    evil = Evil()
    evil.marker = marker
    torch.save({**state, "payload": evil}, file)


def test_pickle_needing_code_is_refused_for_draft(tmp_path, random_dirs, target, head_state):
    out = _copy(random_dirs[1], tmp_path / "e")
    marker = tmp_path / "pwned"
    _evil_bin(out / "pytorch_model.bin", head_state, marker)
    expect_error(lambda: load_eagle(str(out), target), out / "pytorch_model.bin", "code execution")
    assert not marker.exists()


def test_pickle_needing_code_is_refused_for_target(tmp_path, random_dirs):
    out = _to_bin(random_dirs[0], tmp_path / "t", 1)
    marker = tmp_path / "pwned"
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    _evil_bin(out / "pytorch_model.bin", state, marker)
    expect_error(lambda: load_target(str(out)), out / "pytorch_model.bin", "code execution")
    assert not marker.exists()


def test_bin_with_non_tensors_refused(tmp_path, random_dirs, target, head_state):
    out = _copy(random_dirs[1], tmp_path / "e")
    torch.save({**head_state, "step": 3}, out / "pytorch_model.bin")
    expect_error(lambda: load_eagle(str(out), target), out / "pytorch_model.bin")


def test_missing_head_tensor(tmp_path, random_dirs, target, head_state):
    out = _copy(random_dirs[1], tmp_path / "e")
    torch.save(
        {k: v for k, v in head_state.items() if k != "layers.0.mlp.up_proj.weight"}, out / "pytorch_model.bin"
    )
    expect_error(lambda: load_eagle(str(out), target), out, "layers.0.mlp.up_proj.weight")


def test_head_without_fc_is_not_eagle1(tmp_path, random_dirs, target, head_state):
    out = _copy(random_dirs[1], tmp_path / "e")
    torch.save({k: v for k, v in head_state.items() if not k.startswith("fc.")}, out / "pytorch_model.bin")
    expect_error(lambda: load_eagle(str(out), target), out, "fc.weight")


def test_wrong_tensor_shape(tmp_path, random_dirs, target, head_state):
    out = _copy(random_dirs[1], tmp_path / "e")
    bad = dict(head_state, **{"layers.0.mlp.down_proj.weight": torch.zeros(3, 3)})
    torch.save(bad, out / "pytorch_model.bin")
    expect_error(lambda: load_eagle(str(out), target), out, "layers.0.mlp.down_proj.weight", "(3, 3)")


def test_nonexistent_path(tmp_path, target):
    missing = tmp_path / "nope" / "model"
    expect_error(lambda: load_target(str(missing)), missing)
    expect_error(lambda: load_eagle("./no-such-head", target), "no-such-head")


def test_file_instead_of_folder(random_dirs):
    file = random_dirs[0] / "config.json"
    expect_error(lambda: load_target(str(file)), file, "folder")


def test_hub_id_offline_fails_fast(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import time
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    start = time.monotonic()
    expect_error(
        lambda: load_target("no-such-org/no-such-model"),
        "no-such-org/no-such-model",
        "download it",
        "pass the local folder",
    )
    assert time.monotonic() - start < 5


# -- oracle 4: the EAGLE-1 head against a from-scratch implementation ---------------------------


class ScratchEagle:
    """EAGLE-NOTES section 2, float64, no cache: every call recomputes the whole sequence.

    draft position p: x = fc(cat(embed(x_{p+1}), h_p)); one Llama layer WITHOUT input_layernorm
    (attention with plain RoPE at position p, GQA, causal); post_attention_layernorm + SwiGLU MLP;
    no final norm; logits = the target's lm_head on the raw output.
    """

    def __init__(self, head_dir: pathlib.Path, target_dir: pathlib.Path):
        from safetensors.torch import load_file

        self.cfg = json.loads((head_dir / "config.json").read_text())
        w = torch.load(head_dir / "pytorch_model.bin", weights_only=True)
        self.w = {k: v.double() for k, v in w.items()}
        t = {}
        for f in target_dir.glob("*.safetensors"):
            t.update(load_file(str(f)))
        self.embed = t["model.embed_tokens.weight"].double()  # the target's, not the head's copy
        self.lm_head = t.get("lm_head.weight", t["model.embed_tokens.weight"]).double()
        self.heads, self.kv_heads = self.cfg["num_attention_heads"], self.cfg["num_key_value_heads"]
        self.dim = self.cfg["hidden_size"] // self.heads

    def _lin(self, name, x):
        out = x @ self.w[name + ".weight"].T
        return out + self.w[name + ".bias"] if name + ".bias" in self.w else out

    def _rope(self, x):  # x [T, heads, dim], positions 0..T-1
        half = self.dim // 2
        inv = self.cfg["rope_theta"] ** (-torch.arange(half, dtype=torch.float64) * 2 / self.dim)
        ang = torch.arange(x.shape[0], dtype=torch.float64)[:, None] * inv[None]
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def hidden(self, tokens: list[int], features: torch.Tensor) -> torch.Tensor:
        """tokens x_1..x_T, features h_0..h_{T-1} -> draft outputs [T, H] (positions 0..T-1)."""
        n = len(tokens)
        x = self._lin("fc", torch.cat([self.embed[tokens], features.double()], dim=-1))
        q = self._rope(self._lin("layers.0.self_attn.q_proj", x).view(n, self.heads, self.dim))
        k = self._rope(self._lin("layers.0.self_attn.k_proj", x).view(n, self.kv_heads, self.dim))
        v = self._lin("layers.0.self_attn.v_proj", x).view(n, self.kv_heads, self.dim)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.dim)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, -1)
        x = x + self._lin("layers.0.self_attn.o_proj", attn)
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        y = y * self.w["layers.0.post_attention_layernorm.weight"]
        gate = self._lin("layers.0.mlp.gate_proj", y)
        mlp = self._lin(
            "layers.0.mlp.down_proj", gate * torch.sigmoid(gate) * self._lin("layers.0.mlp.up_proj", y)
        )
        return x + mlp

    def logits(self, hidden):
        return hidden @ self.lm_head.T

    def chain(self, tokens: list[int], features: torch.Tensor, k: int) -> list[int]:
        """Greedy chain drafting by full recomputation: each draft appends (token, own output)."""
        tokens, features, drafts = list(tokens), features.double(), []
        for _ in range(k):
            out = self.hidden(tokens, features)
            drafts.append(int(self.logits(out[-1]).argmax()))
            tokens.append(drafts[-1])
            features = torch.cat([features, out[-1:]], dim=0)
        return drafts


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, random_dirs, head_state):
    """The random head (fc bias on) with its embed_tokens copy scrambled: only the target's counts."""
    out = _copy(random_dirs[1], tmp_path_factory.mktemp("scrambled") / "eagle")
    state = dict(head_state, **{"embed_tokens.weight": torch.randn_like(head_state["embed_tokens.weight"])})
    torch.save(state, out / "pytorch_model.bin")
    return out


def _close(got, ref, rel=1e-5):
    """float32 against float64: the random head's logits reach ~100, so compare to the scale."""
    err, scale = (got.double() - ref).abs().max().item(), ref.abs().max().item()
    assert err <= rel * scale, f"max error {err:.3g} vs scale {scale:.3g}"


def _load_scrambled(head_dir, target):
    """alcheck uses the target's embedding, and says so when the head's copy differs."""
    from alcheck.models.loading import EmbeddingMismatchWarning

    with pytest.warns(EmbeddingMismatchWarning, match="uses the target's"):
        return load_eagle(str(head_dir), target)


def test_head_logits_match_scratch_implementation(head_dir, random_dirs, target):
    head = _load_scrambled(head_dir, target)
    scratch = ScratchEagle(head_dir, random_dirs[0])
    g = torch.Generator().manual_seed(5)
    vocab, hidden = target.model.config.vocab_size, target.model.config.hidden_size
    lengths = [1, 3, 4, 9, 17]
    tokens = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
    features = [torch.randn(n, hidden, generator=g) for n in lengths]

    class Req:
        def __init__(self, rid):
            self.request_id, self.num_computed_tokens = rid, 0

    reqs = [Req(i) for i in range(len(lengths))]
    kv = KVCacheManager(32, 4)
    for r, n in zip(reqs, lengths):
        kv.allocate_slots(r, n)
    bind_kv_cache(head.attention_layers, 32, 4, torch.float32, torch.device("cpu"))
    batch = paged_batch(kv, reqs, [0] * len(reqs), lengths)
    ids = torch.tensor([t for seq in tokens for t in seq])
    with torch.no_grad():
        out = head(target.model.embed(ids), torch.cat(features), batch)
        logits = target.model.compute_logits(out)
    at = 0
    for seq, feat in zip(tokens, features):
        n = len(seq)
        ref = scratch.hidden(seq, feat)
        _close(out[at : at + n], ref)
        _close(logits[at : at + n], scratch.logits(ref))
        at += n


def test_runner_drafts_match_scratch_chain(head_dir, random_dirs, target):
    """Every proposal of the paged runner (prefill and each step, K=3) equals the from-scratch
    chain over the committed tokens with the target's final-norm hidden states as features."""
    from transformers import LlamaForCausalLM

    from alcheck.runner.proposers.eagle import EagleProposer

    head = _load_scrambled(head_dir, target)
    scratch = ScratchEagle(head_dir, random_dirs[0])
    ref_target = LlamaForCausalLM.from_pretrained(str(random_dirs[0]), dtype=torch.float32).eval()

    class Recorder(EagleProposer):
        def __init__(self, h):
            super().__init__(h)
            self.seen = []

        def propose(self, runner, reqs, inputs, features, starts, k):
            drafts, dists = super().propose(runner, reqs, inputs, features, starts, k)
            self.seen += [(list(r.token_ids), d) for r, d in zip(reqs, drafts.tolist())]
            return drafts, dists

    g = torch.Generator().manual_seed(9)
    vocab = target.model.config.vocab_size
    prompts = [torch.randint(5, vocab, (n,), generator=g).tolist() for n in (2, 6, 13)]
    recorder = Recorder(head)
    run_spec(target.model, head, [], prompts, max_tokens=14, k=3, proposer=recorder)
    assert len(recorder.seen) >= 3 * 3
    for committed, drafts in recorder.seen:
        with torch.no_grad():
            feats = ref_target.model(torch.tensor([committed])).last_hidden_state[0]
        # draft position p pairs token x_{p+1} with h_p: tokens x_1..x_{n-1}, features h_0..h_{n-2}
        assert drafts == scratch.chain(committed[1:], feats[:-1], 3), committed
