"""EAGLE-3 heads on disk (issue 11): both formats, `--method auto` detection, the auxiliary-layer
id conventions, and strict loading, where every bad input is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import expect_error
from eagle3_pair import AUX, build_pair

from alcheck.cli.main import cli
from alcheck.methods.table import detect, resolve_method
from alcheck.models.eagle3_loading import load_eagle3
from alcheck.models.loading import load_target
from alcheck.testing.tiny import copy_with_config, make_tiny_eagle, make_tiny_eagle3, make_tiny_target


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3-load")
    out = build_pair(root)
    out["eagle1"] = make_tiny_eagle(root / "eagle1", out["target"])
    return out


@pytest.fixture(scope="module")
def target(dirs):
    return load_target(str(dirs["target"]))


def copy_head(src: Path, dst: Path, config=None, tensors=None) -> Path:
    """A copy of an EAGLE-format head with config.json changes and tensor edits (None deletes)."""
    copy_with_config(src, dst, config)
    if tensors:
        state = torch.load(dst / "pytorch_model.bin", weights_only=True)
        for key, value in tensors.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value(state) if callable(value) else value
        torch.save(state, dst / "pytorch_model.bin")
    return dst


# -- detection --------------------------------------------------------------------------------


def test_auto_detects_each_kind_and_a_wrong_method_names_what_it_found(dirs):
    assert detect(dirs["eagle"])[0] == "eagle3" and "midlayer" in detect(dirs["eagle"])[1]
    assert detect(dirs["speculators"]) == ("eagle3", "speculators_model_type 'eagle3' in config.json")
    assert detect(dirs["eagle1"])[0] == "eagle"
    assert resolve_method("auto", str(dirs["eagle"])) == "eagle3"
    assert resolve_method("eagle", str(dirs["eagle1"])) == "eagle"
    expect_error(
        lambda: resolve_method("eagle", str(dirs["eagle"])),
        "--method eagle",
        "an EAGLE-3 head",
        "midlayer.* tensors",
        "--method eagle3",
    )
    expect_error(lambda: resolve_method("eagle3", str(dirs["eagle1"])), "--method eagle3", "an EAGLE-1 head")


def test_cli_method_mismatch_exits_2_in_one_line(dirs, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(dirs["target"]),
            "--draft",
            str(dirs["eagle"]),
            "--method",
            "eagle",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2 and "EAGLE-3 head" in result.output
    assert len(result.output.strip().splitlines()) == 1


# -- formats and conventions ------------------------------------------------------------------


def test_the_eagle_repo_format_loads_strictly(dirs, target):
    head = load_eagle3(str(dirs["eagle"]), target)
    assert head.aux_layers == AUX and head.config.norm_before_residual
    raw = torch.load(dirs["eagle"] / "pytorch_model.bin", weights_only=True)
    assert "embed_tokens.weight" not in raw  # as the EAGLE repo saves its heads
    assert torch.equal(head.draft_to_target, torch.arange(len(raw["d2t"])) + raw["d2t"])
    assert torch.equal(head.lm_head.weight, raw["lm_head.weight"])
    q, k, v = (raw[f"midlayer.self_attn.{n}_proj.weight"] for n in "qkv")
    assert torch.equal(head.layers[0].self_attn.qkv_proj.weight, torch.cat([q, k, v]))
    assert head.layers[0].self_attn.rotary.inv_freq[1] == pytest.approx(10000 ** (-2 / 16))  # draft theta


def test_speculators_ids_and_specforge_ids_mean_the_same_layers(dirs, target, tmp_path):
    # SpecForge writes "output of layer i" under eagle_config; alcheck adds 1
    nested = make_tiny_eagle3(
        tmp_path / "nested", dirs["target"], copy_target_layer=0, aux_key="eagle_config"
    )
    raw = json.loads((nested / "config.json").read_text())
    assert raw["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert load_eagle3(str(nested), target).aux_layers == AUX
    both = copy_head(nested, tmp_path / "both", config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]})
    expect_error(lambda: load_eagle3(str(both), target), "disagree", "[0, 1, 2]")
    silent = copy_head(dirs["eagle"], tmp_path / "silent", config={"eagle_aux_hidden_state_layer_ids": None})
    expect_error(
        lambda: load_eagle3(str(silent), target),
        "(2, 2, 1)",
        "4-layer target",
        "eagle_aux_hidden_state_layer_ids",
    )
    shuffled = copy_head(
        dirs["eagle"], tmp_path / "order", config={"eagle_aux_hidden_state_layer_ids": [3, 1, 2]}
    )
    assert load_eagle3(str(shuffled), target).aux_layers == AUX  # captured in ascending layer order


def test_a_distinct_embedding_copy_is_used_with_a_warning(dirs, target, tmp_path, capsys):
    own = torch.randn(target.model.config.vocab_size, target.model.config.hidden_size)
    path = copy_head(dirs["eagle"], tmp_path / "emb", tensors={"embed_tokens.weight": own})
    head = load_eagle3(str(path), target)
    assert torch.equal(head.embed_tokens.weight, own)
    assert "embed_tokens.weight differs" in capsys.readouterr().err
    same = copy_head(
        dirs["eagle"],
        tmp_path / "same",
        tensors={"embed_tokens.weight": target.model.model.embed_tokens.weight.detach().half()},
    )
    assert load_eagle3(str(same), target).embed_tokens is None  # equal up to fp16 rounding: the target's


# -- bad input --------------------------------------------------------------------------------


def _d2t_short(state):
    return state["d2t"][:-1]


def _d2t_collide(state):
    d2t = state["d2t"].clone()
    d2t[1] = d2t[0] - 1  # draft ids 0 and 1 -> the same target id
    return d2t


def _d2t_outside(state):
    d2t = state["d2t"].clone()
    d2t[-1] += 1000
    return d2t


BAD_CONFIGS = [
    ({"vocab_size": 999}, ["vocab_size=999", "320"]),
    ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}, ["auxiliary layer 4", "0..3"]),
    ({"eagle_aux_hidden_state_layer_ids": [1, 2]}, ["not three distinct layers"]),
    ({"eagle_aux_hidden_state_layer_ids": [1, 1, 2]}, ["not three distinct layers"]),
    ({"num_hidden_layers": 2}, ["num_hidden_layers=2"]),
    ({"intermediate_size": 100}, ["mlp.gate_proj.weight", "(100, 64)"]),
    ({"draft_vocab_size": 200}, ["lm_head.weight", "(200, 64)"]),
    ({"bias": True}, ["bias=True", "lack fc.bias"]),
    (
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            }
        },
        ["rope scaling"],
    ),
    ({"auto_map": {"AutoModel": "x.Y"}}, ["auto_map"]),
    ({"eagle_config": {"use_aux_hidden_state": False}}, ["use_aux_hidden_state=false"]),
]
BAD_TENSORS = [
    ({"d2t": _d2t_short}, ["d2t has shape", "draft_vocab_size is"]),
    ({"d2t": _d2t_collide}, ["same target id"]),
    ({"d2t": _d2t_outside}, ["outside the vocabulary"]),
    ({"d2t": lambda s: s["d2t"].float()}, ["d2t has dtype"]),
    ({"d2t": None}, ["no d2t"]),
    ({"t2d": lambda s: ~s["t2d"]}, ["t2d and d2t"]),
    ({"midlayer.extra.weight": torch.ones(3)}, ["unexpected tensor 'layers.0.extra.weight'"]),
    (
        {"layers.1.self_attn.q_proj.weight": torch.ones(3)},
        ["'layers.1.self_attn.q_proj.weight'", "single-layer"],
    ),
    ({"midlayer.hidden_norm.weight": None}, ["lacks tensors", "hidden_norm"]),
    ({"fc.weight": lambda s: s["fc.weight"][:, :128]}, ["fc.weight has shape (64, 128)", "(64, 192)"]),
    ({"norm.weight": lambda s: s["norm.weight"] * float("nan")}, ["norm.weight", "NaN"]),
]


@pytest.mark.parametrize(
    "config, tensors, needles",
    [(c, None, n) for c, n in BAD_CONFIGS] + [(None, t, n) for t, n in BAD_TENSORS],
)
def test_bad_heads_are_one_line_errors(dirs, target, tmp_path, config, tensors, needles):
    path = copy_head(dirs["eagle"], tmp_path / "bad", config=config, tensors=tensors)
    expect_error(lambda: load_eagle3(str(path), target), str(path), *needles)


def test_speculators_variants_alcheck_does_not_implement_are_refused(dirs, target, tmp_path):
    for flag in ("norm_before_fc", "fc_norm", "norm_output"):
        path = tmp_path / flag
        shutil.copytree(dirs["speculators"], path)
        raw = json.loads((path / "config.json").read_text())
        raw[flag] = True
        (path / "config.json").write_text(json.dumps(raw))
        expect_error(partial(load_eagle3, str(path), target), f"{flag}=true")


def test_the_loader_takes_speculators_types_from_the_method_table(dirs, target, tmp_path):
    """load_eagle3 called directly (no detection first) still refuses a type no entry claims."""
    path = shutil.copytree(dirs["speculators"], tmp_path / "mlp")
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "speculators_model_type": "mlp_speculator"}))
    expect_error(lambda: load_eagle3(str(path), target), "'mlp_speculator'", "of type eagle3 only")


def test_outside_names_map_onto_methods_through_the_table():
    from alcheck.methods.table import get_method, method_for_sglang_algorithm, method_for_speculators_type

    assert method_for_sglang_algorithm("EAGLE3") is get_method("eagle3")
    assert method_for_sglang_algorithm("eagle") is get_method("eagle")  # SGLang upper-cases it
    assert method_for_sglang_algorithm("NGRAM") is None
    assert method_for_speculators_type("eagle3") is get_method("eagle3")
    assert method_for_speculators_type("mlp_speculator") is None


def test_a_head_for_another_target(dirs, target, tmp_path):
    other = make_tiny_target(tmp_path / "wide", hidden_size=32, num_layers=4)
    head = make_tiny_eagle3(tmp_path / "for-wide", other, aux_layer_ids=(1, 2, 3))
    expect_error(lambda: load_eagle3(str(head), target), "target hidden size 32", "has 64")


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}, "auxiliary layer 4"),
        ({"vocab_size": 999}, "vocab_size=999"),
        ("d2t", "d2t has shape"),
        ("wide", "target hidden size 32"),
    ],
)
def test_cli_bad_heads_exit_2_in_one_line(dirs, tmp_path, change, needle):
    if change == "wide":
        other = make_tiny_target(tmp_path / "wide", hidden_size=32, num_layers=4)
        path = make_tiny_eagle3(tmp_path / "head", other)
    elif change == "d2t":
        path = copy_head(dirs["eagle"], tmp_path / "head", tensors={"d2t": _d2t_short})
    else:
        path = copy_head(dirs["eagle"], tmp_path / "head", config=change)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(dirs["target"]),
            "--draft",
            str(path),
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "1",
            "--max-tokens",
            "4",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and needle in errors[0], (
        result.output
    )  # weight checks follow the run's header line
