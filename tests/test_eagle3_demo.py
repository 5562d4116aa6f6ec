"""The demo target's trained EAGLE-3 head (issue 11): shipped small, in the EAGLE repo's format,
used by `--method eagle3` with no --draft, reproducing its shipped reference, and trained so that
its features matter: each classic wiring bug costs it acceptance."""

from __future__ import annotations

import json

import pytest
import torch
from eagle3_bugs import BUGS, PostNormFeedback

from alcheck import paths
from alcheck.methods.table import detect, proposer_for
from alcheck.models.eagle3_loading import load_eagle3
from alcheck.models.loading import load_target
from alcheck.references.tables import load_references, select_references
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner

SHIPPED_RUN = paths.REPO_ROOT / "results" / "baselines" / "demo-eagle3"
EAGLE_NAMES = {
    "fc.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
    *(
        f"midlayer.{n}.weight"
        for n in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "hidden_norm",
            "post_attention_layernorm",
        )
    ),
}


@pytest.fixture(scope="module")
def target():
    return load_target(str(paths.DEMO_TARGET_DIR))


@pytest.fixture(scope="module")
def prompts(target):
    from alcheck.prompts.dataset import load_questions
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol

    return [
        build_prompt_ids(target.tokenizer, get_protocol("vllm-example"), q.turns[:1])
        for q in load_questions("mt_bench", 8)
    ]


def test_shipped_head_is_small_in_the_eagle_repo_format_with_a_reduced_vocabulary():
    directory = paths.DEMO_EAGLE3_DIR
    assert {f.name for f in directory.iterdir()} == {"config.json", "pytorch_model.bin"}
    assert sum(f.stat().st_size for f in directory.iterdir()) <= 10 * 2**20
    state = torch.load(directory / "pytorch_model.bin", weights_only=True)
    assert set(state) == EAGLE_NAMES  # no embedding copy, as the EAGLE repo saves heads
    config = json.loads((directory / "config.json").read_text())
    target_config = json.loads((paths.DEMO_TARGET_DIR / "config.json").read_text())
    assert (
        config["vocab_size"] == target_config["vocab_size"] > config["draft_vocab_size"] == len(state["d2t"])
    )
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3] and config["num_hidden_layers"] == 1
    assert detect(directory)[0] == "eagle3"


def test_method_eagle3_alone_runs_the_demo_head_and_auto_references_follow_the_method():
    from alcheck.cli.run import run_cmd
    from alcheck.cli.run_options import build_config

    cfg = build_config(run_cmd.make_context("run", ["--method", "eagle3"]).params)
    assert (cfg.target, cfg.draft, cfg.method) == (
        str(paths.DEMO_TARGET_DIR),
        str(paths.DEMO_EAGLE3_DIR),
        "eagle3",
    )
    refs = load_references()
    assert [r.name for r in select_references(refs, "auto", cfg.target, cfg.draft, cfg.method)] == [
        "demo-eagle3"
    ]
    plain = build_config(run_cmd.make_context("run", []).params)  # auto resolves the EAGLE-1 demo head
    assert plain.method == "eagle"
    assert [r.name for r in select_references(refs, "auto", plain.target, plain.draft, plain.method)] == [
        "demo"
    ]
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    eagle3 = select_references(refs, "auto", llama, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3")
    eagle1 = select_references(refs, "auto", llama, "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "eagle")
    assert eagle3 and all(r.method == "eagle3" for r in eagle3)
    assert eagle1 and all(r.method == "eagle" for r in eagle1)


def test_demo_eagle3_reference_is_the_shipped_run():
    ref = next(r for r in load_references() if r.name == "demo-eagle3")
    meta = json.loads((SHIPPED_RUN / "run.json").read_text())
    assert meta["config"]["method"] == "eagle3" and ref.method == "eagle3"
    assert ref.values == {str(s["k"]): round(s["al_mean"], 4) for s in meta["summary"]}


# the shipped-run reproduction test covers both demo heads: tests/test_demo.py


def _al(target, head, prompts, proposer=None):
    runner = PagedRunner(
        target.model, proposer or proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=3)
    )
    results = runner.generate(prompts, 64)
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps


def test_trained_head_beats_a_random_one_and_every_wiring_bug_costs_it(
    target, prompts, tmp_path, monkeypatch
):
    from alcheck.testing.tiny import make_tiny_eagle3

    head = load_eagle3(str(paths.DEMO_EAGLE3_DIR), target)
    trained = _al(target, head, prompts)
    random_head = load_eagle3(
        str(make_tiny_eagle3(tmp_path / "random", paths.DEMO_TARGET_DIR, seed=0)), target
    )
    assert trained - _al(target, random_head, prompts) >= 0.4
    for bug, patch in BUGS.items():
        with monkeypatch.context() as m:
            proposer = None
            if patch is PostNormFeedback:
                proposer = PostNormFeedback(head)
            else:
                m.setattr(*patch, raising=False)  # d2t: a buffer, patched by a class property
            assert _al(target, head, prompts, proposer) <= trained - 0.05, bug


def test_the_trainer_computes_what_the_runtime_head_computes(target):
    """eagle3_train's dense training-time test (steps 0-2) equals the runtime head chaining with
    its paged cache, on the shipped weights: training optimises what alcheck measures."""
    from transformers import LlamaForCausalLM

    from alcheck.demo.eagle3_train import LAYER_TENSORS, Eagle3Trainee
    from alcheck.runner.contiguous import _Contiguous

    head = load_eagle3(str(paths.DEMO_EAGLE3_DIR), target)
    config = json.loads((paths.DEMO_EAGLE3_DIR / "config.json").read_text())
    hf = LlamaForCausalLM.from_pretrained(str(paths.DEMO_TARGET_DIR), dtype=torch.float32).eval()
    trainee = Eagle3Trainee(config, hf.model.embed_tokens.weight)
    state = torch.load(paths.DEMO_EAGLE3_DIR / "pytorch_model.bin", weights_only=True)
    params = dict(trainee.named_parameters())
    seq = torch.tensor(
        [target.tokenizer.encode("A list is a mutable sequence; append adds an item at its end.")]
    )
    with torch.no_grad():
        for name, attr in LAYER_TENSORS.items():
            params[attr].copy_(state[name].float())
        states = hf(seq, output_hidden_states=True).hidden_states
        aux, tokens = torch.cat([states[i] for i in (1, 2, 3)], -1)[:, :-1], seq[:, 1:]
        dense = trainee.ttt(tokens, aux, 3)
        for p in range(tokens.shape[1] - 2):
            kv = _Contiguous(target.model, proposer_for(head), 64)
            h = kv.run_draft(tokens[0, : p + 1].tolist(), aux[0, : p + 1], 0, first=True)[-1:]
            for j in range(3):
                torch.testing.assert_close(head.draft_logits(h)[0], dense[j][0, p], atol=1e-4, rtol=1e-4)
                if j < 2:
                    h = kv.run_draft([int(tokens[0, p + 1 + j])], h, p + 1 + j)
