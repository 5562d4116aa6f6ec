"""The demo target's trained draft language model (issue 34, part 4): shipped small in the HF
format with the target's tokenizer, run by `--method draft_model` with no --target/--draft, and
trained: it beats the same model at random weights."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner
from safetensors import safe_open

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.methods.table import detect, proposer_for
from alcheck.models.draft_lm import check_draft_lm, load_draft_lm
from alcheck.models.loading import load_target
from alcheck.rundir.portable import portable_path
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

DRAFT = paths.DEMO_DRAFT_LM_DIR


def test_shipped_draft_is_small_in_the_hf_format_with_the_targets_tokenizer():
    files = {f.name for f in DRAFT.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert sum(f.stat().st_size for f in DRAFT.iterdir()) <= 6 * 2**20  # the EAGLE heads' order of size
    config = json.loads((DRAFT / "config.json").read_text())
    target_config = json.loads((paths.DEMO_TARGET_DIR / "config.json").read_text())
    assert (
        config["architectures"] == ["LlamaForCausalLM"]
        and config["vocab_size"] == target_config["vocab_size"]
    )
    assert config["num_hidden_layers"] < target_config["num_hidden_layers"]
    assert config["intermediate_size"] < target_config["intermediate_size"]
    with safe_open(str(DRAFT / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(n).dtype for n in f.keys()} == {torch.bfloat16}
    assert detect(DRAFT)[0] == "draft_model"
    check_draft_lm(target_config, config, paths.DEMO_TARGET_DIR, DRAFT)  # same vocabulary and tokenizer


def test_method_draft_model_alone_runs_the_demo_target_with_it(tmp_path):
    from alcheck.cli.run import run_cmd
    from alcheck.cli.run_options import build_config

    cfg = build_config(run_cmd.make_context("run", ["--method", "draft_model"]).params)
    assert (cfg.target, cfg.draft, cfg.method) == (str(paths.DEMO_TARGET_DIR), str(DRAFT), "draft_model")
    out = tmp_path / "run"
    args = ["--method", "draft_model", "--ks", "2", "--repeats", "1", "--limit", "2", "--max-tokens", "24"]
    result = CliRunner().invoke(cli, ["run", *args, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())
    # recorded relative to the current folder when inside it (alcheck/rundir/portable.py)
    assert (meta["config"]["method"], meta["config"]["draft"]) == ("draft_model", portable_path(str(DRAFT)))
    assert meta["summary"][0]["al_mean"] > 1.0
    assert "demo-draft_model" in result.output  # compared against its own reference


def test_demo_draft_model_reference_is_the_shipped_run():
    from alcheck.references.tables import load_references, select_references

    ref = next(r for r in load_references() if r.name == "demo-draft_model")
    meta = json.loads(
        (paths.REPO_ROOT / "results" / "baselines" / "demo-draft_model" / "run.json").read_text()
    )
    assert meta["config"]["method"] == ref.method == "draft_model" and meta["status"] == "complete"
    assert ref.values == {str(s["k"]): round(s["al_mean"], 4) for s in meta["summary"]}
    picked = select_references(
        load_references(), "auto", str(paths.DEMO_TARGET_DIR), str(DRAFT), "draft_model"
    )
    assert [r.name for r in picked] == ["demo-draft_model"]


def test_trained_draft_beats_a_random_one_by_0_4_at_k3(tmp_path):
    from alcheck.demo.draft_train import initial_draft, save_draft
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol

    target = load_target(str(paths.DEMO_TARGET_DIR))
    protocol = get_protocol("vllm-example")
    prompts = [
        build_prompt_ids(target.tokenizer, protocol, q.turns[:1]) for q in load_questions("mt_bench", 8)
    ]
    random_dir = save_draft(
        initial_draft(paths.DEMO_TARGET_DIR, seed=0), paths.DEMO_TARGET_DIR, tmp_path / "r"
    )

    def al(directory):
        draft = load_draft_lm(directory, torch.float32, "cpu")
        runner = PagedRunner(
            target.model, proposer_for(draft), target.eos_token_ids, RunnerConfig(num_spec_tokens=3)
        )
        results = runner.generate(prompts, 64)
        steps = sum(r.steps for r in results)
        return (steps + sum(r.accepted for r in results)) / steps

    random_al = al(random_dir)
    assert random_al < 1.1
    assert al(DRAFT) - random_al >= 0.4
