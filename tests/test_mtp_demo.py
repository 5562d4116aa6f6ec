"""The demo MTP target (issue 34, part 4): the demo Llama rewritten in MiMo's format with one trained
MTP layer, shipped small, run by `--method mtp` with no --target/--draft, and trained: AL(1) well
above 1.2 on MT-Bench, far above the layer's starting weights."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner
from safetensors import safe_open

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.methods.table import detect

MIMO = paths.DEMO_MTP_DIR


def test_shipped_mtp_target_is_mimo_format_and_small():
    files = {f.name for f in MIMO.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert sum(f.stat().st_size for f in MIMO.iterdir()) <= 14 * 2**20  # the demo target plus one layer
    config = json.loads((MIMO / "config.json").read_text())
    assert config["architectures"] == ["MiMoForCausalLM"] and config["num_nextn_predict_layers"] == 1
    with safe_open(str(MIMO / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert {f.get_tensor(n).dtype for n in names} == {torch.bfloat16}
    assert {"model.mtp_layers.0.input_proj.weight", "model.mtp_layers.0.self_attn.q_proj.weight"} <= names
    assert detect(MIMO)[0] == "mtp"


def test_the_trunk_equals_the_demo_llama():
    """Zero q/k/v biases: the MiMo trunk's greedy answers are the demo Llama target's."""
    from alcheck.models.loading import load_target
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner

    prompts = [[5, 60, 70, 80, 90, 100, 7, 300, 301]]

    def greedy(folder):
        target = load_target(str(folder))
        runner = PagedRunner(target.model, None, target.eos_token_ids, RunnerConfig(num_spec_tokens=0))
        return [r.output_ids for r in runner.generate(prompts, 16)]

    assert greedy(MIMO) == greedy(paths.DEMO_TARGET_DIR)


def test_method_mtp_alone_runs_the_demo_mtp_target(tmp_path):
    from alcheck.cli.run import run_cmd
    from alcheck.cli.run_options import build_config

    cfg = build_config(run_cmd.make_context("run", ["--method", "mtp"]).params)
    assert (cfg.target, cfg.draft, cfg.method) == (str(MIMO), str(MIMO), "mtp")
    out = tmp_path / "run"
    args = ["--method", "mtp", "--ks", "1", "--repeats", "1", "--limit", "4", "--max-tokens", "64"]
    result = CliRunner().invoke(cli, ["run", *args, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())
    assert meta["config"]["method"] == "mtp"
    assert meta["summary"][0]["al_mean"] > 1.3  # trained: well above 1.2 (the starting layer's is ~1.1)
