"""config.json is read as transformers reads it, through its own LlamaConfig (issue 24 items 4, 5).

- RoPE: alcheck's resolved theta and scaling give transformers' own inv_freq on every config
  alcheck ships and every config its tests build, and on contradictory keys.
- What transformers rejects, and what alcheck's runner does not implement (hidden_act, rope_theta
  <= 0, negative sizes), exits 2 naming config.json and the key, before any weight loads, and is
  never blamed on the tokenizer, the head or float precision.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from conftest import expect_error
from test_eagle3_loading import copy_head

from alcheck import paths
from alcheck.models.config import ModelConfig, rope_inv_freq
from alcheck.testing.tiny import LLAMA31_8B_CONFIG, NAN_MARK, eagle3_to_speculators

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 512,
}
SMALL = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 320,
}


def _shipped() -> dict[str, dict]:
    configs = {}
    for directory in (paths.DEMO_TARGET_DIR, paths.DEMO_DRAFT_DIR, paths.DEMO_EAGLE3_DIR):
        configs[f"demo:{directory.name}"] = json.loads((directory / "config.json").read_text())
    configs["tiny.LLAMA31_8B_CONFIG"] = dict(LLAMA31_8B_CONFIG)
    from alcheck.gpu_check.llama8b import TINY

    configs["gpu_check TINY"] = dict(TINY, model_type="llama")
    return configs


def _tested() -> dict[str, dict]:
    fixture = Path(__file__).parent / "data" / "speculators-0.9.0"
    eagle3 = json.loads((fixture / "eagle3" / "config.json").read_text())
    converted = json.loads((fixture / "converted" / "config.json").read_text())
    return {
        "transformers 5 rope_parameters, default": dict(
            SMALL, rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}
        ),
        "transformers 5 rope_parameters, llama3": dict(
            SMALL, rope_parameters=dict(LLAMA3_SCALING, rope_theta=500000.0)
        ),
        "transformers 4 rope_theta + rope_scaling": dict(
            SMALL, rope_theta=500000.0, rope_scaling=LLAMA3_SCALING
        ),
        "legacy 'type' key": dict(
            SMALL,
            rope_theta=500000.0,
            rope_scaling={**{k: v for k, v in LLAMA3_SCALING.items() if k != "rope_type"}, "type": "llama3"},
        ),
        "no RoPE keys": dict(SMALL),
        "rope_scaling null": dict(SMALL, rope_theta=250000.0, rope_scaling=None),
        # the case: rope_parameters says default, a top-level theta and llama3 rope_scaling say
        # otherwise
        "contradictory keys": dict(
            SMALL,
            rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
            rope_theta=500000.0,
            rope_scaling=LLAMA3_SCALING,
        ),
        "contradictory theta": dict(
            SMALL, rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}, rope_theta=500000.0
        ),
        "speculators fixture layer": converted["transformer_layer_config"],
        "EAGLE repo EAGLE-3 head": eagle3,
        "tiny speculators layer": eagle3_to_speculators(eagle3, {})[0]["transformer_layer_config"],
        "test_loading_streaming": dict(
            SMALL, rope_scaling=dict(LLAMA31_8B_CONFIG["rope_scaling"], original_max_position_embeddings=32)
        ),
    }


CONFIGS = {**_shipped(), **_tested()}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_resolved_rope_equals_transformers(name):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    raw = CONFIGS[name]
    ours = ModelConfig.from_dict(raw)
    theirs = LlamaRotaryEmbedding(LlamaConfig.from_dict(copy.deepcopy(raw)))
    assert theirs.attention_scaling == 1.0
    torch.testing.assert_close(
        rope_inv_freq(ours.head_dim, ours.rope_theta, ours.rope_scaling),
        theirs.inv_freq.float(),
        rtol=1e-6,
        atol=0,
    )


def test_contradictory_rope_keys_follow_transformers():
    ours = ModelConfig.from_dict(CONFIGS["contradictory keys"])
    assert ours.rope_theta == 500000.0 and ours.rope_scaling["rope_type"] == "llama3"


def test_reading_does_not_edit_the_callers_dict():
    raw = copy.deepcopy(CONFIGS["legacy 'type' key"])
    ModelConfig.from_dict(raw)
    assert raw == CONFIGS["legacy 'type' key"]


# (edit of the target's config.json, words the error must hold)
BAD_TARGET = {
    "heads do not divide": (
        {"num_attention_heads": 3, "head_dim": None},
        ["not a multiple", "attention heads"],
    ),
    "kv heads do not divide": ({"num_key_value_heads": 3}, ["num_key_value_heads"]),
    "rms_norm_eps 0": ({"rms_norm_eps": 0}, ["rms_norm_eps"]),
    "rms_norm_eps 0.0": ({"rms_norm_eps": 0.0}, ["rms_norm_eps"]),
    "llama3 without factor": (
        {"rope_parameters": {k: v for k, v in dict(LLAMA3_SCALING, rope_theta=1e4).items() if k != "factor"}},
        ["factor"],
    ),
    "string hidden_size": ({"hidden_size": "64"}, ["hidden_size"]),
    "bogus dtype": ({"dtype": "floaty"}, ["dtype", "floaty"]),
    "rope_theta 0": ({"rope_parameters": {"rope_theta": 0.0, "rope_type": "default"}}, ["rope_theta"]),
    "rope_theta NaN": ({"rope_parameters": {"rope_theta": NAN_MARK, "rope_type": "default"}}, ["rope_theta"]),
    "negative hidden_size": ({"hidden_size": -64}, ["hidden_size", "-64"]),
    "gelu": ({"hidden_act": "gelu"}, ["hidden_act", "gelu", "SiLU"]),
    "yarn": (
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "rope_theta": 1e4,
                "original_max_position_embeddings": 512,
            }
        },
        ["yarn"],
    ),
}


def _edited(src: Path, dst: Path, edit: dict) -> Path:
    return copy_head(src, dst, config=edit)  # a key set to None is dropped


@pytest.mark.parametrize("case", sorted(BAD_TARGET))
def test_bad_target_config_exits_2_naming_the_key(case, pair_dirs, tmp_path):
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    edit, needles = BAD_TARGET[case]
    target = _edited(pair_dirs[0], tmp_path / "target", edit)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(target),
            "--draft",
            str(pair_dirs[1]),
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "1",
            "--max-tokens",
            "4",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert message.startswith("Error: target") and str(target / "config.json") in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    for wrong in ("tokenizer", "draft", "logits", "float32"):  # blamed on the right thing
        assert wrong not in message, (wrong, message)
    assert not (tmp_path / "o" / "run.json").exists()


def test_hidden_act_of_the_head_is_checked_too(pair_dirs, tmp_path):
    from alcheck.models.compat import check_draft_config
    from alcheck.models.loading import read_config

    head = _edited(pair_dirs[1], tmp_path / "head", {"hidden_act": "relu"})
    expect_error(
        lambda: check_draft_config(
            read_config(pair_dirs[0], "target"), read_config(head, "draft"), pair_dirs[0], head
        ),
        "draft",
        "hidden_act",
        "relu",
    )


def test_a_gelu_target_never_runs_as_silu(pair_dirs, tmp_path):
    from alcheck.models.loading import load_target

    target = _edited(pair_dirs[0], tmp_path / "target", {"hidden_act": "gelu"})
    expect_error(lambda: load_target(str(target)), "hidden_act", "gelu")
