"""The embedded demo pair (issue 4): real on-disk formats, loaded by the public code path, and
reproducing its shipped reference numbers exactly in float32 on CPU."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.methods.table import proposer_for
from alcheck.models.loading import EAGLE1_TENSORS, load_eagle, load_target
from alcheck.references.tables import load_references, select_references

SHIPPED_RUN = paths.REPO_ROOT / "results" / "baselines" / "demo"


def test_shipped_pair_is_small_and_in_the_real_formats():
    total = sum(f.stat().st_size for f in paths.DEMO_MODELS_DIR.rglob("*") if f.is_file())
    # the demo MTP target (alcheck-demo-mimo) is a whole checkpoint, the demo trunk's 10 MB again: a
    # real MiMo folder carries its trunk, and vLLM loads it as one; everything else fits in 25 MB
    assert total < 36 * 2**20
    target_files = {f.name for f in paths.DEMO_TARGET_DIR.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= target_files
    assert {f.name for f in paths.DEMO_DRAFT_DIR.iterdir()} == {"config.json", "pytorch_model.bin"}
    state = torch.load(paths.DEMO_DRAFT_DIR / "pytorch_model.bin", weights_only=True)
    assert set(state) == {"embed_tokens.weight", *EAGLE1_TENSORS}
    config = json.loads((paths.DEMO_DRAFT_DIR / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["bias"] is False


def test_public_loaders_load_the_pair_with_a_chat_template():
    target = load_target(str(paths.DEMO_TARGET_DIR))
    head = load_eagle(str(paths.DEMO_DRAFT_DIR), target)
    assert target.tokenizer.chat_template and target.eos_token_ids
    assert next(head.parameters()).dtype == torch.float32


def test_no_arguments_means_the_demo_sweep():
    from alcheck.cli.run import run_cmd
    from alcheck.cli.run_options import build_config

    ctx = run_cmd.make_context("run", [])
    cfg = build_config(ctx.params)
    assert (cfg.target, cfg.draft) == (str(paths.DEMO_TARGET_DIR), str(paths.DEMO_DRAFT_DIR))
    assert (cfg.ks, cfg.repeats, cfg.dataset, cfg.protocol, cfg.limit) == (
        [1, 2, 3, 4, 5],
        3,
        "mt_bench",
        "vllm-example",
        None,
    )
    refs = select_references(load_references(), "auto", cfg.target, cfg.draft, cfg.method)
    assert [r.name for r in refs] == ["demo"]


def test_demo_reference_is_the_shipped_run():
    ref = next(r for r in load_references() if r.name == "demo")
    summary = json.loads((SHIPPED_RUN / "run.json").read_text())["summary"]
    assert ref.values == {str(s["k"]): round(s["al_mean"], 4) for s in summary}
    als = [s["al_mean"] for s in summary]
    assert all(b > a for a, b in zip(als, als[1:]))  # rising with K ...
    assert als[4] - als[0] >= 0.5
    assert als[4] - als[3] < als[1] - als[0]  # ... and flattening


@pytest.mark.parametrize(
    "shipped, args, ks, reference",
    [
        ("demo", ["--ks", "1-2", "--limit", "4"], [1, 2], "demo"),
        ("demo-eagle3", ["--method", "eagle3", "--ks", "1,3", "--limit", "3"], [1, 3], "demo-eagle3"),
        (
            "demo-draft_model",
            ["--method", "draft_model", "--ks", "2", "--limit", "3"],
            [2],
            "demo-draft_model",
        ),
    ],
)
def test_short_run_reproduces_the_shipped_numbers_for_those_questions(tmp_path, shipped, args, ks, reference):
    """Each demo head, run with no --target/--draft, reproduces its shipped run's per-question counts."""
    out = tmp_path / "short"
    result = CliRunner().invoke(
        cli, ["run", *args, "--repeats", "1", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    mine = pd.read_csv(out / "questions.csv")
    rows = pd.read_csv(paths.REPO_ROOT / "results" / "baselines" / shipped / "questions.csv")
    rows = rows[(rows.repeat == 0) & rows.k.isin(ks) & rows.question_id.isin(mine.question_id)]
    key = ["k", "question_id", "turn"]
    cols = key + ["prompt_tokens", "generated_tokens", "steps", "drafted", "accepted", "accepted_per_pos"]
    pd.testing.assert_frame_equal(
        mine[cols].sort_values(key).reset_index(drop=True), rows[cols].sort_values(key).reset_index(drop=True)
    )
    assert reference in result.output  # compared against its own reference


def test_trained_head_beats_a_random_head_by_0_4_at_k3(tmp_path):
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner
    from alcheck.testing.tiny import make_tiny_eagle

    target = load_target(str(paths.DEMO_TARGET_DIR))
    trained = load_eagle(str(paths.DEMO_DRAFT_DIR), target)
    random_head = load_eagle(str(make_tiny_eagle(tmp_path / "random", paths.DEMO_TARGET_DIR, seed=0)), target)
    prompts = [build_prompt_ids(target.tokenizer, None, q.turns[:1]) for q in load_questions("mt_bench", 12)]

    def al(head):
        results = PagedRunner(
            target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=3)
        ).generate(prompts, 128)
        steps = sum(r.steps for r in results)
        return (steps + sum(r.accepted for r in results)) / steps

    assert al(trained) - al(random_head) >= 0.4
