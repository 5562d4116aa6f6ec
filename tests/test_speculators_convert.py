"""EAGLE-3 heads as speculators 0.9.0's converter writes them (issue 24 item 7).

tests/data/speculators-0.9.0 holds a tiny head in the EAGLE repo's format and the converter's own
output for it (bench/make_speculators_fixture.py; config.json carries
`"auto_map": {"": "config.Eagle3SpeculatorConfig"}`). alcheck runs no code, so an auto_map that
names only a config class changes nothing it loads: the head loads, the ignored key is noted, and it
gives exactly the AL of the same weights in the EAGLE repo's format.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import expect_error, run_spec
from eagle3_pair import make_prompts, pooled
from speculators_fixture import AUX, FIXTURE, build_fixture_target

from alcheck.models.eagle3_loading import check_config, load_eagle3
from alcheck.models.loading import load_target, read_config

EAGLE, CONVERTED = FIXTURE / "eagle3", FIXTURE / "converted"


@pytest.fixture(scope="module")
def fixture_target(tmp_path_factory):
    return build_fixture_target(tmp_path_factory.mktemp("spec-fixture") / "target")


def test_the_fixture_is_the_converters_output():
    config = json.loads((CONVERTED / "config.json").read_text())
    assert config["auto_map"] == {"": "config.Eagle3SpeculatorConfig"}
    assert config["speculators_version"] == "0.9.0"
    assert json.loads((FIXTURE / "fixture.json").read_text())["converter_wrote"] == [
        "config.json",
        "config.py",
        "model.safetensors",
    ]


def test_converted_weights_are_the_eagle_repo_weights():
    from safetensors.torch import load_file

    eagle = torch.load(EAGLE / "pytorch_model.bin", weights_only=True)
    converted = load_file(str(CONVERTED / "model.safetensors"))
    renamed = {name.replace("midlayer.", "layers.0."): tensor for name, tensor in eagle.items()}
    assert sorted(renamed) == sorted(converted)
    for name, tensor in renamed.items():
        assert torch.equal(tensor, converted[name]), name


def test_auto_map_naming_a_config_class_is_noted_not_refused(fixture_target):
    cfg = check_config(
        read_config(fixture_target, "target"), read_config(CONVERTED, "draft"), fixture_target, CONVERTED
    )
    assert cfg.aux_layer_ids == AUX
    assert (
        len(cfg.notes) == 1 and "auto_map" in cfg.notes[0] and "config.Eagle3SpeculatorConfig" in cfg.notes[0]
    )
    head = load_eagle3(str(CONVERTED), load_target(str(fixture_target)))
    assert head.config.notes == cfg.notes


def test_converted_head_gives_the_al_of_the_eagle_repo_format(fixture_target):
    target = load_target(str(fixture_target))
    prompts = make_prompts(target.model.config.vocab_size)
    for k in (1, 3):
        ours = run_spec(target.model, load_eagle3(str(EAGLE), target), target.eos_token_ids, prompts, k=k)[0]
        theirs = run_spec(
            target.model, load_eagle3(str(CONVERTED), target), target.eos_token_ids, prompts, k=k
        )[0]
        assert [(r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos)) for r in theirs] == [
            (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos)) for r in ours
        ]
        assert 1.2 < pooled(ours) < k + 1  # partial acceptance: the comparison means something


def test_cli_runs_the_converted_head(fixture_target, tmp_path):
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    als = []
    for head in (EAGLE, CONVERTED):
        out = tmp_path / head.name
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--target",
                str(fixture_target),
                "--draft",
                str(head),
                "--ks",
                "2",
                "--repeats",
                "1",
                "--limit",
                "3",
                "--max-tokens",
                "16",
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        als.append(json.loads((out / "run.json").read_text())["summary"][0]["al_mean"])
    assert als[0] == als[1]


def test_auto_map_naming_model_code_stays_refused(tmp_path, fixture_target):
    head = shutil.copytree(EAGLE, tmp_path / "head")
    raw = json.loads((head / "config.json").read_text())
    raw["auto_map"] = {"AutoModelForCausalLM": "modeling_x.MyEagle3"}
    (head / "config.json").write_text(json.dumps(raw))
    expect_error(
        lambda: check_config(read_config(fixture_target, "target"), raw, fixture_target, head),
        "auto_map",
        "modeling_x.MyEagle3",
    )


def test_a_speculators_model_alcheck_does_not_know_stays_refused(tmp_path):
    from alcheck.methods.table import detect

    head = shutil.copytree(CONVERTED, tmp_path / "head")
    raw = json.loads((head / "config.json").read_text())
    raw["speculators_model_type"] = "mlp_speculator"
    raw["auto_map"] = {"": "config.MLPSpeculatorConfig"}
    (head / "config.json").write_text(json.dumps(raw))
    expect_error(lambda: detect(head), "mlp_speculator")


def test_tiny_speculators_heads_are_written_like_the_converter():
    """alcheck.testing.tiny's speculators format (used by the other EAGLE-3 tests) has the converter's
    keys."""
    from alcheck.testing.tiny import eagle3_to_speculators

    ours, _ = eagle3_to_speculators(json.loads((EAGLE / "config.json").read_text()), {})
    real = json.loads((CONVERTED / "config.json").read_text())
    assert sorted(ours) == sorted(real)
    assert ours["transformer_layer_config"] == {
        **real["transformer_layer_config"],
        "transformers_version": ours["transformers_version"],
    }


def test_speculators_converter_still_writes_the_fixture(tmp_path, fixture_target):
    """Where speculators is installed: its converter, run now, writes what the fixture holds."""
    pytest.importorskip("speculators.convert.entrypoints")
    from speculators.convert.entrypoints import convert_model

    convert_model(
        model=str(EAGLE),
        verifier=str(fixture_target),
        algorithm="eagle3",
        output_path=str(tmp_path / "c"),
        norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=list(AUX),
    )
    ours = json.loads((tmp_path / "c" / "config.json").read_text())
    real = json.loads((CONVERTED / "config.json").read_text())
    ours["speculators_config"]["verifier"]["name_or_path"] = real["speculators_config"]["verifier"][
        "name_or_path"
    ]
    for config in (ours, real):
        config.pop("transformers_version")
        config["transformer_layer_config"].pop("transformers_version")
    assert ours == real


def test_speculators_head_with_only_specforge_nested_aux_ids(tmp_path, fixture_target):
    """SpecForge's nested key (layer outputs) is read in the speculators format too, not ignored."""
    head = shutil.copytree(CONVERTED, tmp_path / "head")
    raw = json.loads((head / "config.json").read_text())
    raw["eagle_aux_hidden_state_layer_ids"] = None
    raw["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in AUX]}
    (head / "config.json").write_text(json.dumps(raw))
    cfg = check_config(read_config(fixture_target, "target"), raw, fixture_target, head)
    assert cfg.aux_layer_ids == AUX
