"""`alcheck run --method medusa --draft DIR` end to end on tiny checkpoints: rows written and equal
to the runner's, `--method auto` detects both layouts, the refusals (one line, exit 2, nothing
written), serve, two workers, the ablation (Medusa keeps no KV: nothing outside the blocks either
way) and report."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import invoke, one_line_error
from method_cli_checks import serve_answers_as_the_runner, two_cpu_workers_equal_one_device

TINY = ["--ks", "1,3", "--repeats", "1", "--limit", "3", "--max-tokens", "12", "--block-size", "4"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    from alcheck.testing.tiny_medusa import make_medusa_target, make_tiny_medusa

    root = tmp_path_factory.mktemp("medusa_cli")
    target = make_medusa_target(root / "target")
    return dict(
        root=root,
        target=target,
        heads=make_tiny_medusa(root / "heads", target, 3),
        legacy=make_tiny_medusa(root / "legacy", target, 3, legacy=True),
    )


def _pair(dirs, heads="heads", method="medusa"):
    return ["--target", str(dirs["target"]), "--method", method, "--draft", str(dirs[heads])]


@pytest.fixture(scope="module")
def medusa_run(dirs):
    out = dirs["root"] / "run"
    result = invoke(["run", *_pair(dirs), *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_run_writes_rows(medusa_run, dirs):
    meta = json.loads((medusa_run / "run.json").read_text())
    assert meta["status"] == "complete"
    assert (meta["config"]["method"], meta["config"]["draft"]) == ("medusa", str(dirs["heads"]))
    assert "draft" in meta["fingerprints"]
    rows = pd.read_csv(medusa_run / "questions.csv")
    assert sorted(set(rows.k)) == [1, 3] and len(rows) == 6
    assert (rows.accepted > 0).any() and (rows.accepted <= rows.steps * rows.k).all()


@pytest.mark.parametrize("heads", ["heads", "legacy"])
def test_auto_detects_medusa_heads(dirs, tmp_path, heads):
    from alcheck.methods.table import detect, resolve_method

    assert resolve_method("auto", str(dirs[heads])) == "medusa"
    assert "Medusa head" in detect(dirs[heads])[1]
    out = tmp_path / "auto"
    args = ["run", "--target", str(dirs["target"]), "--draft", str(dirs[heads]), "--ks", "2", "--limit", "1"]
    assert invoke([*args, "--repeats", "1", "--max-tokens", "8", "--out", str(out)]).exit_code == 0
    assert json.loads((out / "run.json").read_text())["config"]["method"] == "medusa"


def test_eagle_on_medusa_heads_names_the_method(dirs):
    result = invoke(["run", *_pair(dirs, method="eagle")])
    one_line_error(result, "--method eagle", "Medusa", "--method medusa")


def _copy_config(src, dst, change: dict):
    out = shutil.copytree(src, dst)
    raw = {**json.loads((out / "config.json").read_text()), **change}
    (out / "config.json").write_text(json.dumps({k: v for k, v in raw.items() if v is not None}))
    return out


@pytest.mark.parametrize(
    "case,needles",
    [
        ("k", ["K=4 with --method medusa", "3 head(s)", "K <= 3"]),
        ("hidden", ["hidden_size 32", "target's is 64"]),
        ("vocab", ["vocab_size 100", "target's is"]),
        ("no_heads", ["no usable number of heads"]),
        ("more_heads", ["has no blocks.3", "config.json that came with these weights"]),
        ("no_weights", ["no weights in", "pass a folder with safetensors"]),
        ("topk", ["--topk 2", "medusa", "chains"]),
    ],
)
def test_bad_heads_are_one_line_and_write_nothing(dirs, tmp_path, case, needles):
    heads, extra, ks = dirs["heads"], [], ["--ks", "1,3"]
    if case == "k":
        ks = ["--ks", "1,4"]
    elif case == "hidden":
        heads = _copy_config(heads, tmp_path / "d", {"hidden_size": 32})
    elif case == "vocab":
        heads = _copy_config(heads, tmp_path / "d", {"vocab_size": 100})
    elif case == "no_heads":
        heads = _copy_config(heads, tmp_path / "d", {"num_heads": 0})
    elif case == "more_heads":
        heads = _copy_config(heads, tmp_path / "d", {"num_heads": 4})
    elif case == "no_weights":
        heads = shutil.copytree(heads, tmp_path / "d")
        (heads / "model.safetensors").unlink()
    else:
        extra = ["--topk", "2", "--num-draft-tokens", "4"]
    out = tmp_path / "out"
    args = ["run", "--target", str(dirs["target"]), "--method", "medusa", "--draft", str(heads)]
    one_line_error(invoke([*args, *TINY, *ks, *extra, "--out", str(out)]), *needles)
    assert not out.exists()


def test_a_pickle_that_runs_code_is_refused(dirs, tmp_path):
    """FasterDecoding's .pt is read with weights_only: a pickle calling a function never runs it."""
    import os

    heads = shutil.copytree(dirs["legacy"], tmp_path / "d")
    (heads / "medusa_lm_head.safetensors").unlink()
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import pickle

    (heads / "medusa_lm_head.pt").write_bytes(pickle.dumps({"0.0.linear.weight": Evil()}))
    one_line_error(invoke(["run", *_pair(dirs), *TINY, "--draft", str(heads)]), "not a readable weight file")
    assert not marker.exists()


def test_serve_loads_medusa_heads_and_answers_as_the_runner(dirs):
    from alcheck.methods.medusa import MEDUSA

    serve_answers_as_the_runner(MEDUSA, "medusa", dirs["target"], dirs["heads"])


def test_two_cpu_workers_equal_one_device(medusa_run, dirs, tmp_path):
    two_cpu_workers_equal_one_device([*_pair(dirs), *TINY], medusa_run, tmp_path)


def test_ablate_shows_no_draft_kv_and_report_reads_it(medusa_run, dirs, tmp_path):
    """Medusa writes no KV of its own: no write lands outside the blocks with or without lookahead."""
    out = tmp_path / "abl"
    small = ["--ks", "3", "--repeats", "1", "--limit", "3", "--max-tokens", "16", "--block-size", "4"]
    result = invoke(["ablate", "kv-lookahead", *_pair(dirs), *small, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = json.loads((out / "ablation.json").read_text())["summary"]
    assert row["slot_violations_with"] == 0 == row["slot_violations_without"]
    assert row["lossless_rate_with"] == 1.0 == row["lossless_rate_without"]
    for folder in (out, medusa_run):
        assert invoke(["report", str(folder)]).exit_code == 0
