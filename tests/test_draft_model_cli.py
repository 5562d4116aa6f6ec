"""`alcheck run --method draft_model --draft DIR` end to end on tiny checkpoints: rows written,
`--method auto` detects a draft LM, the refusals (one line, exit 2, nothing written), and a
resume whose draft folder now holds another model is refused by its fingerprint."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import invoke, one_line_error
from method_cli_checks import (
    ablate_kv_lookahead_and_report,
    serve_answers_as_the_runner,
    two_cpu_workers_equal_one_device,
)

TINY = ["--ks", "1,3", "--repeats", "1", "--limit", "3", "--max-tokens", "12", "--block-size", "4"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A two-layer Llama target (second layer damped), its first layer as a draft LM, and a
    second draft of the same shape with other weights."""
    from safetensors.torch import load_file, save_file

    from alcheck.testing.tiny import damp_target_layers, make_tiny_target
    from alcheck.testing.tiny_draft import make_tiny_draft_lm

    root = tmp_path_factory.mktemp("draft_model")
    target = make_tiny_target(root / "target", num_layers=2, unit_rms_embeddings=True)
    damp_target_layers(target, 1, 0.3)
    draft = make_tiny_draft_lm(root / "draft", target, num_layers=1)
    other = make_tiny_draft_lm(root / "other", target, num_layers=1)
    state = load_file(str(other / "model.safetensors"))
    state = {k: v * 0.9 if "layers.0.mlp" in k else v for k, v in state.items()}
    save_file(state, str(other / "model.safetensors"), metadata={"format": "pt"})
    return dict(root=root, target=target, draft=draft, other=other)


@pytest.fixture(scope="module")
def draft_run(dirs):
    out = dirs["root"] / "run"
    args = ["run", "--target", str(dirs["target"]), "--method", "draft_model", "--draft", str(dirs["draft"])]
    result = invoke([*args, *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_run_writes_rows(draft_run, dirs):
    meta = json.loads((draft_run / "run.json").read_text())
    assert meta["status"] == "complete"
    assert (meta["config"]["method"], meta["config"]["draft"]) == ("draft_model", str(dirs["draft"]))
    assert "draft" in meta["fingerprints"]
    rows = pd.read_csv(draft_run / "questions.csv")
    assert sorted(set(rows.k)) == [1, 3] and len(rows) == 6
    assert (rows.accepted > 0).any() and (rows.accepted <= rows.steps * rows.k).all()


def test_auto_detects_a_draft_lm(dirs, tmp_path):
    from alcheck.methods.table import detect, resolve_method

    assert resolve_method("auto", str(dirs["draft"])) == "draft_model"
    assert "causal LM" in detect(dirs["draft"])[1]
    out = tmp_path / "auto"
    args = [
        "run",
        "--target",
        str(dirs["target"]),
        "--draft",
        str(dirs["draft"]),
        "--ks",
        "1",
        "--limit",
        "1",
    ]
    assert invoke([*args, "--repeats", "1", "--max-tokens", "8", "--out", str(out)]).exit_code == 0
    assert json.loads((out / "run.json").read_text())["config"]["method"] == "draft_model"
    message = one_line_error(
        invoke(["run", "--target", str(dirs["target"]), "--method", "eagle", "--draft", str(dirs["draft"])]),
        "--method eagle",
        "a draft language model",
        "--method draft_model",
    )
    assert "causal LM" in message


def test_resume_with_another_model_in_the_draft_folder_is_refused(dirs, tmp_path):
    """The run's --draft folder now holds other weights: its fingerprint refuses the resume."""
    draft, out = shutil.copytree(dirs["draft"], tmp_path / "draft"), tmp_path / "run"
    args = ["run", "--target", str(dirs["target"]), "--method", "draft_model", "--draft", str(draft)]
    assert invoke([*args, *TINY, "--out", str(out)]).exit_code == 0
    meta = json.loads((out / "run.json").read_text())
    meta["cells"], meta["status"] = meta["cells"][:-1], "partial"  # as if stopped before its last pass
    (out / "run.json").write_text(json.dumps(meta))
    shutil.copy(dirs["other"] / "model.safetensors", draft / "model.safetensors")
    before = (out / "questions.csv").read_bytes()
    one_line_error(invoke(["run", "--resume", str(out)]), "--resume", "draft", "model.safetensors")
    assert (out / "questions.csv").read_bytes() == before


def _with_tokenizer_swap(src, dst):
    """A copy of src whose tokenizer.json gives two common tokens each other's ids."""
    out = shutil.copytree(src, dst)
    tok = json.loads((out / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = "e", "t"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


@pytest.mark.parametrize(
    "case,needles",
    [
        ("vocab", ["vocab_size=", "has vocab_size=", "target's vocabulary"]),
        ("tokenizer", ["tokenizer maps text differently", "probe text"]),
        ("no_tokenizer", ["has no tokenizer"]),
        ("remote_code", ["custom model code", "auto_map"]),
        ("topk", ["--topk 2", "draft_model", "one chain"]),
    ],
)
def test_bad_draft_is_one_line_and_writes_nothing(dirs, tmp_path, case, needles):
    from alcheck.testing.tiny import copy_with_config, make_tiny_target

    draft, extra = dirs["draft"], []
    if case == "vocab":
        draft = make_tiny_target(tmp_path / "d", num_layers=1, vocab_size=300)
    elif case == "tokenizer":
        draft = _with_tokenizer_swap(dirs["draft"], tmp_path / "d")
    elif case == "no_tokenizer":
        draft = shutil.copytree(dirs["draft"], tmp_path / "d")
        (draft / "tokenizer.json").unlink()
    elif case == "remote_code":
        draft = copy_with_config(dirs["draft"], tmp_path / "d", {"auto_map": {"AutoModelForCausalLM": "m.M"}})
    else:
        extra = ["--topk", "2", "--num-draft-tokens", "4"]
    out = tmp_path / "out"
    args = ["run", "--target", str(dirs["target"]), "--method", "draft_model", "--draft", str(draft)]
    one_line_error(invoke([*args, *TINY, *extra, "--out", str(out)]), *needles)
    assert not out.exists()


def test_the_kv_check_counts_the_draft_models_own_layers(dirs, tmp_path):
    """--num-blocks against the device's memory: the draft model's KV is its own layers' (here the
    target's width, 1 layer), not an EAGLE head's one layer at the target's width by assumption."""
    from alcheck.config import RunConfig
    from alcheck.models.compat import check_kv_request, kv_bytes_per_token, layer_kv_bytes
    from alcheck.testing.tiny import copy_with_config

    target_raw = json.loads((dirs["target"] / "config.json").read_text())
    wide = copy_with_config(dirs["draft"], tmp_path / "wide", {"num_hidden_layers": 3})  # config only
    cfg = RunConfig(target=str(dirs["target"]), draft=str(wide), method="draft_model", num_blocks=10)
    per_layer = layer_kv_bytes(target_raw, 4)
    assert kv_bytes_per_token(target_raw, 4) == 3 * per_layer  # 2 target layers + an EAGLE head's one
    need = 10 * cfg.block_size * (2 + 3) * per_layer
    check_kv_request(cfg, target_raw, dirs["target"], need)
    with pytest.raises(Exception, match="--num-blocks 10"):
        check_kv_request(cfg, target_raw, dirs["target"], need - 1)


def test_serve_loads_a_draft_model_and_answers_as_the_runner(dirs):
    from alcheck.methods.draft_model import DRAFT_MODEL

    serve_answers_as_the_runner(DRAFT_MODEL, "draft_model", dirs["target"], dirs["draft"])


def test_a_method_with_no_demo_checkpoint_and_no_draft_is_one_line(tmp_path, monkeypatch):
    """The demo ships a draft model (tests/test_draft_model_demo.py); without one the run is refused."""
    from alcheck.cli import run_options

    monkeypatch.delitem(run_options.DEMO_CHECKPOINTS, "draft_model")
    out = tmp_path / "out"
    one_line_error(
        invoke(["run", "--method", "draft_model", *TINY, "--out", str(out)]), "--target and --draft"
    )
    assert not out.exists()


def test_two_cpu_workers_equal_one_device(draft_run, dirs, tmp_path):
    args = ["--target", str(dirs["target"]), "--method", "draft_model", "--draft", str(dirs["draft"])]
    two_cpu_workers_equal_one_device([*args, *TINY], draft_run, tmp_path)


def test_ablate_and_report_on_a_draft_model(draft_run, dirs, tmp_path):
    args = ["--target", str(dirs["target"]), "--method", "draft_model", "--draft", str(dirs["draft"])]
    ablate_kv_lookahead_and_report(args, draft_run, tmp_path)
