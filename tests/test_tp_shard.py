"""Sharded loading (alcheck.tp.shard): each rank's parameters are exactly its slices of the
unsplit model's (q/k/v and gate/up rows, o/down columns, vocabulary rows; norms whole), for
safetensors (sliced reads) and .bin (full read, then narrowed), with uneven splits of the MLP
and the vocabulary; strict loading still checks every tensor's FULL shape. Loading needs no
process group (collectives run only in forward), so these run in-process."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import expect_error
from safetensors.torch import load_file, save_file

from alcheck.models.loading import load_target_model, model_config, read_config
from alcheck.models.sizes import module_bytes
from alcheck.tp.group import TPGroup, split_range


def _cfg(directory):
    return model_config(read_config(directory, "target"), directory, "target")


def _expected_slice(name: str, full: torch.Tensor, rank: int, size: int, cfg) -> torch.Tensor:
    """The rank's part of an unsplit parameter, written out by hand from the Megatron layout."""
    hd = cfg.head_dim
    if name.endswith("qkv_proj.weight"):
        q, k, v = full.split(
            [cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.num_key_value_heads * hd]
        )
        return torch.cat([t.chunk(size)[rank] for t in (q, k, v)])
    if name.endswith("gate_up_proj.weight"):
        gate, up = full.chunk(2)
        a, b = split_range(cfg.intermediate_size, rank, size)
        return torch.cat([gate[a:b], up[a:b]])
    if name.endswith("o_proj.weight"):
        return full.chunk(size, dim=1)[rank]
    if name.endswith("down_proj.weight"):
        a, b = split_range(cfg.intermediate_size, rank, size)
        return full[:, a:b]
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):
        a, b = split_range(cfg.vocab_size, rank, size)
        return full[a:b]
    return full  # norms


UNEVEN = dict(
    hidden_size=48,
    intermediate_size=101,
    num_hidden_layers=2,
    num_attention_heads=12,
    num_key_value_heads=6,
    vocab_size=301,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    max_position_embeddings=256,
    architectures=["LlamaForCausalLM"],
    model_type="llama",
)


@pytest.fixture(scope="module")
def uneven_dirs(tmp_path_factory):
    """A GQA target whose intermediate size (101) and vocabulary (301) divide by neither 2 nor 3:
    in two safetensors shards, as one .bin file, and with tied embeddings."""
    import shutil

    from alcheck.testing.tiny import make_sharded_llama

    root = tmp_path_factory.mktemp("tp-shard")
    st = make_sharded_llama(root / "st", UNEVEN, num_shards=2, dtype=torch.float32, std=0.2)
    binary = root / "bin"
    binary.mkdir()
    shutil.copy(st / "config.json", binary / "config.json")
    state = {}
    for file in st.glob("*.safetensors"):
        state.update(load_file(str(file)))
    torch.save(state, binary / "pytorch_model.bin")
    tied = make_sharded_llama(
        root / "tied", dict(UNEVEN, tie_word_embeddings=True), num_shards=1, dtype=torch.float32, std=0.2
    )
    return {"safetensors": st, "bin": binary, "tied": tied}


def _copy_with(tmp_path, directory, name, change):
    """A copy of a sharded checkpoint with `change` applied to tensor `name` in its shard."""
    import shutil

    out = tmp_path / "changed"
    shutil.copytree(directory, out)
    shard = out / json.loads((out / "model.safetensors.index.json").read_text())["weight_map"][name]
    state = load_file(str(shard))
    state[name] = change(state[name])
    save_file(state, str(shard))
    return out


@pytest.mark.parametrize("fmt, size", [("safetensors", 2), ("safetensors", 3), ("bin", 3), ("tied", 2)])
def test_each_rank_holds_exactly_its_slices(uneven_dirs, fmt, size):
    directory = uneven_dirs[fmt]
    cfg = _cfg(directory)
    full = dict(load_target_model(directory, cfg).named_parameters())
    total = sum(p.numel() * p.element_size() for p in full.values())
    per_rank = []
    for rank in range(size):
        model = load_target_model(directory, cfg, tp=TPGroup(rank, size, torch.device("cpu")))
        params = dict(model.named_parameters())
        assert params.keys() == full.keys()
        for name, param in params.items():
            assert torch.equal(param, _expected_slice(name, full[name], rank, size, cfg)), (rank, name)
        assert [a.num_kv_heads for a in model.attention_layers] == [
            cfg.num_key_value_heads // size
        ] * cfg.num_hidden_layers
        per_rank.append(module_bytes(model))
    norms = sum(p.numel() * p.element_size() for n, p in full.items() if "norm" in n)
    assert sum(per_rank) == total + (size - 1) * norms
    assert max(per_rank) < total / size * 1.05


def test_full_shapes_are_still_checked(tmp_path, uneven_dirs):
    """A tensor whose full shape disagrees with config.json is refused even though this rank's
    slice of it would fit."""
    name = "model.layers.1.mlp.up_proj.weight"
    bad = _copy_with(
        tmp_path, uneven_dirs["safetensors"], name, lambda t: torch.cat([t, t[:1]])
    )  # a row too many
    expect_error(
        lambda: load_target_model(bad, _cfg(bad), tp=TPGroup(0, 2, torch.device("cpu"))),
        name,
        "(102, 48)",
        "config.json says (101, 48)",
    )


def test_non_finite_values_in_a_rank_slice_are_refused(tmp_path, uneven_dirs):
    name = "model.layers.0.self_attn.k_proj.weight"

    def poison(t):  # the last KV head's rows: rank 1's slice of 2
        t = t.clone()
        t[-1, 0] = float("nan")
        return t

    bad = _copy_with(tmp_path, uneven_dirs["safetensors"], name, poison)
    load_target_model(bad, _cfg(bad), tp=TPGroup(0, 2, torch.device("cpu")))  # rank 0 never reads it
    expect_error(
        lambda: load_target_model(bad, _cfg(bad), tp=TPGroup(1, 2, torch.device("cpu"))), name, "NaN"
    )
