"""Strict loading (issue 9): no silent wrong numbers from broken checkpoints.

- non-finite weights, in the target or the head, exit 2 naming the file and the tensor; so do
  values that overflow the requested dtype;
- non-finite target logits stop the runner, naming the step and the request (the question, in a run);
- EAGLE-1 `fc.bias`: the file decides; a config that says otherwise exits 2 naming both files;
- every tensor in a checkpoint is used or on a named allow-list; the head's `embed_tokens` copy is
  compared with the target's embedding and a difference warns (alcheck uses the target's);
- the remaining tracebacks are one-line errors: malformed generation_config.json, an index without
  weight_map, random bytes as pytorch_model.bin.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import expect_error
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from alcheck.models.loading import EmbeddingMismatchWarning, load_eagle, load_target


def copy_dir(src, dst) -> Path:
    shutil.copytree(src, dst)
    return Path(dst)


def edit_json(file: Path, drop=(), **changes):
    raw = json.loads(file.read_text())
    for key in drop:
        raw.pop(key, None)
    raw.update(changes)
    file.write_text(json.dumps(raw))


def rewrite_target(src: Path, dst: Path, edit) -> Path:
    """A copy of a single-file safetensors target whose tensors went through edit(state)."""
    out = copy_dir(src, dst)
    state = load_file(str(out / "model.safetensors"))
    edit(state)
    save_file(state, str(out / "model.safetensors"))
    return out


def rewrite_head(src: Path, dst: Path, edit) -> Path:
    out = copy_dir(src, dst)
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    edit(state)
    torch.save(state, out / "pytorch_model.bin")
    return out


@pytest.fixture(scope="module")
def target(random_dirs):
    return load_target(str(random_dirs[0]))


# -- non-finite weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [
        ("model.layers.1.self_attn.k_proj.weight", float("nan")),  # lands inside the fused qkv weight
        ("model.norm.weight", float("inf")),
        ("lm_head.weight", float("-inf")),
    ],
)
def test_non_finite_target_tensor_is_named(tmp_path, random_dirs, name, value):
    def poison(state):
        state[name][0, ...] = value

    out = rewrite_target(random_dirs[0], tmp_path / "t", poison)
    kind = "NaN" if value != value else "infinite"
    expect_error(lambda: load_target(str(out)), name, out / "model.safetensors", kind)


def test_all_nan_target_names_the_first_tensor_in_file_order(tmp_path, random_dirs):
    def poison(state):
        for tensor in state.values():
            tensor.fill_(float("nan"))

    out = rewrite_target(random_dirs[0], tmp_path / "t", poison)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        first = next(iter(f.keys()))
    message = expect_error(lambda: load_target(str(out)), first, "NaN")
    assert message.count("tensor ") == 1


def test_nan_in_a_later_shard_names_that_shard(tmp_path):
    from alcheck.testing.tiny import make_tiny_target

    out = make_tiny_target(tmp_path / "sharded", num_layers=2, max_shard_size="50KB")
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.1.mlp.up_proj.weight"
    shard = out / index[name]
    assert shard != sorted(out.glob("model-*.safetensors"))[0]
    state = load_file(str(shard))
    state[name][3, 5] = float("nan")
    save_file(state, str(shard), metadata={"format": "pt"})
    expect_error(lambda: load_target(str(out)), name, shard)


def test_value_that_overflows_the_dtype_is_named(tmp_path, random_dirs):
    def big(state):
        state["model.layers.0.mlp.down_proj.weight"][0, 0] = 1e6  # finite in float32, inf in float16

    out = rewrite_target(random_dirs[0], tmp_path / "t", big)
    load_target(str(out))  # float32 is fine
    expect_error(
        lambda: load_target(str(out), dtype=torch.float16),
        "model.layers.0.mlp.down_proj.weight",
        "overflows float16",
        "bfloat16",
    )


@pytest.mark.parametrize("name", ["layers.0.mlp.gate_proj.weight", "fc.bias", "embed_tokens.weight"])
def test_non_finite_head_tensor_is_named(tmp_path, random_dirs, target, name):
    def poison(state):
        state[name].view(-1)[-1] = float("nan")

    out = rewrite_head(random_dirs[1], tmp_path / "e", poison)
    expect_error(lambda: load_eagle(str(out), target), name, out / "pytorch_model.bin", "NaN")


# -- the runner's guard on the target's logits ----------------------------------------------------


def _poisoned_forward(model, call: int, rows: slice):
    """The target's forward returns NaN hidden states (so NaN logits) in `rows` on its `call`-th
    invocation (1 = the prefill). The draft head's own passes do not go through it."""
    original, calls = model.forward, [0]

    def forward(*args, **kwargs):
        calls[0] += 1
        out = original(*args, **kwargs)
        if calls[0] == call:
            hidden = out[0] if isinstance(out, tuple) else out
            hidden[rows] = float("nan")
        return out

    return forward


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    # the CPU prefills each of the 3 prompts in a forward of its own (runner/prompt_cache.py):
    # call 2 is request 1's prefill, call 5 the second verification step
    "call, where",
    [(2, "the prefill of request 1"), (5, "verification step 2 of request 0")],
)
def test_runner_stops_on_non_finite_logits(pair, prompts, monkeypatch, temperature, call, where):
    from conftest import run_spec

    from alcheck.runner.paged import NonFiniteLogits

    target, head = pair
    batch = prompts[:3]
    # every row of the poisoned call: a step's NaN names the first running request
    monkeypatch.setattr(target.model, "forward", _poisoned_forward(target.model, call, slice(None)))
    with pytest.raises(NonFiniteLogits) as info:
        run_spec(target.model, head, target.eos_token_ids, batch, k=2, temperature=temperature)
    message = str(info.value)
    assert "\n" not in message
    assert where in message, message
    assert info.value.exit_code == 2


def test_run_with_overflowing_float16_target_exits_2_naming_the_question(tmp_path, random_dirs):
    """Finite weights whose float16 logits overflow: `alcheck run` exits 2 and names the question."""
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    def scale(state):
        state["model.norm.weight"].fill_(200.0)
        state["lm_head.weight"].mul_(400.0).clamp_(-6e4, 6e4)  # each finite in float16, their products not

    out = rewrite_target(random_dirs[0], tmp_path / "t", scale)
    head = copy_dir(random_dirs[1], tmp_path / "e")
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(out),
            "--draft",
            str(head),
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "4",
            "--device",
            "cpu",
            "--dtype",
            "float16",
            "--reference",
            "none",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "not finite" in result.output and "question" in result.output and "K=1" in result.output
    assert "Traceback" not in result.output


# -- EAGLE-1 fc.bias: the file decides ------------------------------------------------------------


def test_bias_key_absent_and_file_has_fc_bias_uses_it(tmp_path, random_dirs, target):
    out = copy_dir(random_dirs[1], tmp_path / "e")
    edit_json(out / "config.json", drop=["bias"])
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    head = load_eagle(str(out), target)
    assert head.fc.bias is not None and torch.equal(head.fc.bias, state["fc.bias"])


def test_bias_key_absent_and_no_fc_bias_means_no_bias(tmp_path, random_dirs, target):
    out = rewrite_head(random_dirs[1], tmp_path / "e", lambda s: s.pop("fc.bias"))
    edit_json(out / "config.json", drop=["bias"])
    assert load_eagle(str(out), target).fc.bias is None


def test_config_bias_false_but_file_has_fc_bias(tmp_path, random_dirs, target):
    out = copy_dir(random_dirs[1], tmp_path / "e")
    edit_json(out / "config.json", bias=False)
    expect_error(
        lambda: load_eagle(str(out), target),
        out / "config.json",
        out / "pytorch_model.bin",
        '"bias": false',
        "fc.bias",
    )


def test_config_bias_true_but_file_lacks_fc_bias(tmp_path, random_dirs, target):
    out = rewrite_head(random_dirs[1], tmp_path / "e", lambda s: s.pop("fc.bias"))
    expect_error(
        lambda: load_eagle(str(out), target),
        out / "config.json",
        out / "pytorch_model.bin",
        '"bias": true',
        "fc.bias",
    )


# -- strict: every tensor used or allowed ---------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        "layers.0.input_layernorm.weight",
        "layers.1.self_attn.q_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "lm_head.weight",
    ],
)
def test_unexpected_head_tensor_exits_2(tmp_path, random_dirs, target, extra):
    def add(state):
        state[extra] = torch.ones(64)

    out = rewrite_head(random_dirs[1], tmp_path / "e", add)
    expect_error(lambda: load_eagle(str(out), target), "unexpected tensor", extra, out / "pytorch_model.bin")


def test_unexpected_target_tensor_exits_2(tmp_path, random_dirs):
    out = rewrite_target(
        random_dirs[0], tmp_path / "t", lambda s: s.update({"model.layers.0.extra.weight": torch.ones(3)})
    )
    expect_error(
        lambda: load_target(str(out)),
        "unexpected tensor",
        "model.layers.0.extra.weight",
        out / "model.safetensors",
    )


def test_stray_fc_bias_with_bias_false_config_exits_2(tmp_path, random_dirs, target):
    out = copy_dir(random_dirs[1], tmp_path / "e")
    edit_json(out / "config.json", bias=False)
    expect_error(lambda: load_eagle(str(out), target), "fc.bias")


def test_allow_listed_target_tensors_load(tmp_path, random_dirs, target):
    """Old exports keep rotary_emb.inv_freq; tied checkpoints may still store lm_head.weight."""

    def add(state):
        state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)

    out = rewrite_target(random_dirs[0], tmp_path / "t", add)
    loaded = load_target(str(out)).model
    for (name, a), (_, b) in zip(loaded.state_dict().items(), target.model.state_dict().items()):
        assert torch.equal(a, b), name


def test_tied_target_may_store_lm_head(tmp_path):
    from alcheck.testing.tiny import make_tiny_target

    out = make_tiny_target(tmp_path / "tied", num_layers=1, tie_word_embeddings=True)
    state = load_file(str(out / "model.safetensors"))
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(out / "model.safetensors"))
    model = load_target(str(out)).model
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_head_with_model_prefix_loads(tmp_path, random_dirs, target):
    reference = load_eagle(str(random_dirs[1]), target)

    def prefix(state):
        for name in list(state):
            state["model." + name] = state.pop(name)

    head = load_eagle(str(rewrite_head(random_dirs[1], tmp_path / "e", prefix)), target)
    for (name, a), (_, b) in zip(head.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), name


# -- the head's embedding copy ----------------------------------------------------------------------


def test_embedding_copy_in_another_dtype_does_not_warn(tmp_path, random_dirs, target):
    """EAGLE-1 heads ship the target's embedding rounded to their own dtype: no warning."""
    out = rewrite_head(
        random_dirs[1],
        tmp_path / "e",
        lambda s: s.update({"embed_tokens.weight": s["embed_tokens.weight"].to(torch.bfloat16)}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_eagle(str(out), target)


def test_different_embedding_copy_warns_once_and_the_targets_is_used(tmp_path, random_dirs, target):
    g = torch.Generator().manual_seed(0)

    def scramble(state):
        emb = state["embed_tokens.weight"]
        emb[5:9] += 0.1 * torch.randn(emb[5:9].shape, generator=g)  # 4 rows trained for "another target"

    out = rewrite_head(random_dirs[1], tmp_path / "e", scramble)
    with pytest.warns(EmbeddingMismatchWarning) as record:
        head = load_eagle(str(out), target)
    assert len(record) == 1
    message = str(record[0].message)
    assert "\n" not in message and "4 of 320 rows" in message and str(out / "pytorch_model.bin") in message
    assert "uses the target's" in message
    assert not any("embed" in name for name, _ in head.named_parameters())  # the head holds no embedding


# -- the remaining tracebacks --------------------------------------------------------------------------


def test_malformed_generation_config(tmp_path, random_dirs):
    out = copy_dir(random_dirs[0], tmp_path / "t")
    (out / "generation_config.json").write_text('{"eos_token_id": [1, 2')
    expect_error(lambda: load_target(str(out)), out / "generation_config.json", "not valid JSON")


def test_generation_config_with_a_bad_eos(tmp_path, random_dirs):
    out = copy_dir(random_dirs[0], tmp_path / "t")
    edit_json(out / "generation_config.json", eos_token_id="</s>")
    expect_error(lambda: load_target(str(out)), out / "generation_config.json", "eos_token_id")


def _sharded(tmp_path) -> Path:
    from alcheck.testing.tiny import make_tiny_target

    return make_tiny_target(tmp_path / "sharded", num_layers=1, max_shard_size="50KB")


@pytest.mark.parametrize("index", [{"metadata": {}}, {"weight_map": []}, {"weight_map": {}}, []])
def test_index_without_weight_map(tmp_path, index):
    out = _sharded(tmp_path)
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    expect_error(lambda: load_target(str(out)), out / "model.safetensors.index.json")


def test_index_pointing_outside_the_folder(tmp_path):
    out = _sharded(tmp_path)
    file = out / "model.safetensors.index.json"
    raw = json.loads(file.read_text())
    name = next(iter(raw["weight_map"]))
    raw["weight_map"][name] = "../elsewhere.safetensors"
    file.write_text(json.dumps(raw))
    expect_error(lambda: load_target(str(out)), file, name)


def test_index_naming_a_tensor_no_shard_holds(tmp_path):
    out = _sharded(tmp_path)
    file = out / "model.safetensors.index.json"
    raw = json.loads(file.read_text())
    name = "model.layers.0.mlp.up_proj.weight"
    shard = raw["weight_map"][name]
    state = load_file(str(out / shard))
    del state[name]
    save_file(state, str(out / shard), metadata={"format": "pt"})
    expect_error(lambda: load_target(str(out)), name, file)


def _head_with_bin(tmp_path, random_dirs, data: bytes) -> Path:
    out = copy_dir(random_dirs[1], tmp_path / "e")
    (out / "pytorch_model.bin").write_bytes(data)
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda: os.urandom(4096),
        lambda: b"\x80\x02" + bytes(range(200, 256)) * 40,  # a pickle header, then garbage
        lambda: b"",
    ],
)
def test_random_bytes_are_not_a_checkpoint(tmp_path, random_dirs, target, make):
    out = _head_with_bin(tmp_path, random_dirs, make())
    message = expect_error(
        lambda: load_eagle(str(out), target), out / "pytorch_model.bin", "not a PyTorch checkpoint"
    )
    assert "code execution" not in message


def test_a_zip_that_is_not_a_checkpoint(tmp_path, random_dirs, target):
    out = copy_dir(random_dirs[1], tmp_path / "e")
    with zipfile.ZipFile(out / "pytorch_model.bin", "w") as archive:
        archive.writestr("readme.txt", "hello")
    expect_error(lambda: load_eagle(str(out), target), out / "pytorch_model.bin", "not a PyTorch checkpoint")


def test_legacy_bin_format_loads(tmp_path, random_dirs, target):
    """torch's pre-1.6 (non-zip) format cannot be memory-mapped; it is read whole, still weights_only."""
    reference = load_eagle(str(random_dirs[1]), target)
    out = copy_dir(random_dirs[1], tmp_path / "e")
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    torch.save(state, out / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    head = load_eagle(str(out), target)
    for (name, a), (_, b) in zip(head.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("drop, needle", [("hidden_size", "'hidden_size'"), ("vocab_size", "'vocab_size'")])
def test_config_missing_a_key(tmp_path, random_dirs, drop, needle):
    out = copy_dir(random_dirs[0], tmp_path / "t")
    edit_json(out / "config.json", drop=[drop])
    expect_error(lambda: load_target(str(out)), out / "config.json", needle)


def test_unsupported_rope_scaling(tmp_path, random_dirs):
    out = copy_dir(random_dirs[0], tmp_path / "t")
    edit_json(
        out / "config.json", drop=["rope_parameters"], rope_scaling={"rope_type": "yarn", "factor": 4.0}
    )
    expect_error(lambda: load_target(str(out)), out / "config.json", "yarn")


def test_tensor_in_two_shards(tmp_path):
    out = _sharded(tmp_path)
    file = out / "model.safetensors.index.json"
    weight_map = json.loads(file.read_text())["weight_map"]
    name = "model.norm.weight"
    other = next(s for s in sorted(set(weight_map.values())) if s != weight_map[name])
    state = load_file(str(out / other))
    state[name] = torch.ones(64)
    save_file(state, str(out / other), metadata={"format": "pt"})
    expect_error(lambda: load_target(str(out)), name, "twice")


def test_load_state_dict_checks_every_tensor(tmp_path, random_dirs):
    """The whole-dict helper other loaders (EAGLE-3) use checks finiteness too."""
    from alcheck.models.loading import load_state_dict

    out = rewrite_head(
        random_dirs[1], tmp_path / "e", lambda s: s["layers.0.mlp.up_proj.weight"].fill_(float("inf"))
    )
    expect_error(
        lambda: load_state_dict(out, "draft"),
        "layers.0.mlp.up_proj.weight",
        "infinite",
        out / "pytorch_model.bin",
    )
    state = load_state_dict(random_dirs[1], "draft")
    assert torch.equal(
        state["fc.weight"], torch.load(random_dirs[1] / "pytorch_model.bin", weights_only=True)["fc.weight"]
    )


def test_weights_that_do_not_fit_are_refused_before_allocating(random_dirs, monkeypatch):
    from alcheck.models import strict_load

    allocated = []
    monkeypatch.setattr(strict_load, "_available_ram", lambda: 1000)
    monkeypatch.setattr(strict_load, "allocate", lambda *a: allocated.append(a))
    message = expect_error(
        lambda: load_target(str(random_dirs[0]), dtype=torch.bfloat16),
        "GiB in bfloat16",
        "0.00 GiB available",
        "--dtype",
    )
    assert "weights need" in message and not allocated
