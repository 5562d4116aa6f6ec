"""`alcheck run --method mtp` end to end on a tiny MiMo-format target: rows written with no --draft,
`--method auto` detects the MTP layers, the refusals (one line, exit 2, nothing written), resume
fingerprints, serve, two CPU workers and ablate kv-lookahead."""

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
    from alcheck.testing.tiny_arch import make_tiny_arch_target
    from alcheck.testing.tiny_mtp import make_tiny_mimo_target

    root = tmp_path_factory.mktemp("mtp_cli")
    return dict(
        root=root,
        target=make_tiny_mimo_target(root / "mimo", 1),
        plain=make_tiny_arch_target(root / "plain", "qwen2", num_layers=2),
    )


@pytest.fixture(scope="module")
def mtp_run(dirs):
    out = dirs["root"] / "run"
    result = invoke(["run", "--target", str(dirs["target"]), "--method", "mtp", *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_run_writes_rows(mtp_run, dirs):
    meta = json.loads((mtp_run / "run.json").read_text())
    assert meta["status"] == "complete"
    assert (meta["config"]["method"], meta["config"]["draft"]) == ("mtp", str(dirs["target"]))
    rows = pd.read_csv(mtp_run / "questions.csv")
    assert sorted(set(rows.k)) == [1, 3] and len(rows) == 6
    assert (rows.accepted > 0).any() and (rows.accepted <= rows.steps * rows.k).all()


def test_auto_detects_mtp_layers(dirs):
    from alcheck.methods.table import detect, resolve_method

    assert resolve_method("auto", str(dirs["target"])) == "mtp"
    assert "MTP layer" in detect(dirs["target"])[1]
    assert resolve_method("auto", str(dirs["plain"])) == "draft_model"  # no MTP layers: a whole LM


@pytest.mark.parametrize(
    "case,needles",
    [
        ("plain", ["--method mtp", "has no MTP layers", "no model.mtp_layers.*"]),
        ("other_draft", ["--method mtp", "is not the target", "drop --draft"]),
        ("layer_missing", ["num_nextn_predict_layers=2", "no model.mtp_layers.1.*"]),
        ("topk", ["--topk 2", "one chain"]),
    ],
)
def test_bad_mtp_run_is_one_line_and_writes_nothing(dirs, tmp_path, case, needles):
    from alcheck.testing.tiny import copy_with_config

    args, extra = ["--target", str(dirs["target"])], []
    if case == "plain":
        args = ["--target", str(dirs["plain"])]
    elif case == "other_draft":
        other = shutil.copytree(dirs["target"], tmp_path / "copy")
        args += ["--draft", str(other)]
    elif case == "layer_missing":
        bad = copy_with_config(dirs["target"], tmp_path / "bad", {"num_nextn_predict_layers": 2})
        args = ["--target", str(bad)]
    else:
        extra = ["--topk", "2", "--num-draft-tokens", "4"]
    out = tmp_path / "out"
    one_line_error(invoke(["run", *args, "--method", "mtp", *TINY, *extra, "--out", str(out)]), *needles)
    assert not out.exists()


def test_resume_with_other_mtp_weights_is_refused(dirs, tmp_path):
    """The target folder's MTP layers changed since the run started: its fingerprint refuses the resume."""
    from safetensors.torch import load_file, save_file

    target, out = shutil.copytree(dirs["target"], tmp_path / "t"), tmp_path / "run"
    assert (
        invoke(["run", "--target", str(target), "--method", "mtp", *TINY, "--out", str(out)]).exit_code == 0
    )
    meta = json.loads((out / "run.json").read_text())
    meta["cells"], meta["status"] = meta["cells"][:-1], "partial"
    (out / "run.json").write_text(json.dumps(meta))
    file = target / "model.safetensors"
    state = load_file(str(file))
    state = {k: v * 0.9 if k.startswith("model.mtp_layers.0.mlp") else v for k, v in state.items()}
    save_file(state, str(file), metadata={"format": "pt"})
    before = (out / "questions.csv").read_bytes()
    one_line_error(invoke(["run", "--resume", str(out)]), "--resume", "model.safetensors")
    assert (out / "questions.csv").read_bytes() == before


def test_serve_loads_the_mtp_layers_and_answers_as_the_runner(dirs):
    from alcheck.methods.mtp import MTP_METHOD

    serve_answers_as_the_runner(MTP_METHOD, "mtp", dirs["target"], dirs["target"])


def test_two_cpu_workers_equal_one_device(mtp_run, dirs, tmp_path):
    two_cpu_workers_equal_one_device(
        ["--target", str(dirs["target"]), "--method", "mtp", *TINY], mtp_run, tmp_path
    )


def test_ablate_kv_lookahead_and_report(mtp_run, dirs, tmp_path):
    ablate_kv_lookahead_and_report(["--target", str(dirs["target"]), "--method", "mtp"], mtp_run, tmp_path)


def test_weight_and_kv_estimates_equal_the_loaded_mtp_layers(tmp_path):
    """The GPU weight check's figure for the MTP layers (from config.json alone) equals the loaded
    module's bytes, the trunk's equals the loaded target's, and the KV estimate counts every MTP layer."""
    import torch

    from alcheck.methods.mtp import MTP_METHOD
    from alcheck.models.compat import layer_kv_bytes
    from alcheck.models.loading import load_target
    from alcheck.models.sizes import module_bytes, target_weight_bytes
    from alcheck.testing.tiny_mtp import make_tiny_mimo_target

    folder = make_tiny_mimo_target(tmp_path / "t", 2)
    raw = json.loads((folder / "config.json").read_text())
    target = load_target(str(folder))
    head = MTP_METHOD.load(folder, target, torch.float32, "cpu")
    assert target_weight_bytes(raw, 4, 1, folder) == module_bytes(target.model)
    assert MTP_METHOD.weight_bytes(raw, raw, 4) == module_bytes(head) > 0
    assert MTP_METHOD.kv_bytes_per_token(raw, raw, 4) == 2 * layer_kv_bytes(raw, 4)
    assert len(head.attention_layers) == 2


def test_serve_cli_takes_method_mtp_with_no_draft(dirs, monkeypatch):
    """`alcheck serve --target DIR --method mtp`: the target folder is the draft."""
    import alcheck.serve.listen as listen

    served = {}

    def capture(app, host, sock):
        sock.close()
        served["app"] = app

    monkeypatch.setattr(listen, "serve_forever", capture)
    args = ["serve", "--target", str(dirs["target"]), "--method", "mtp", "--k", "2", "--port", "0"]
    result = invoke([*args, "--dialect", "vllm", "--device", "cpu", "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert served["app"].state.ctx.pair.method == "mtp"
