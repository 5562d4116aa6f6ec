"""`alcheck run` / `ablate` with EAGLE-3 heads (issue 11): everything that works for EAGLE-1 works
here, on the tiny EAGLE-3 pair in both on-disk formats. Oracles: target-only greedy decoding
(--check-lossless), block ownership (--audit-slots), the contiguous runner, an uninterrupted run."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import invoke
from eagle3_pair import build_pair

BASE = [
    "--ks",
    "1,3",
    "--repeats",
    "1",
    "--limit",
    "6",
    "--max-tokens",
    "24",
    "--block-size",
    "4",
    "--max-batch-size",
    "4",
    "--reference",
    "none",
]
COUNTS = [
    "k",
    "question_id",
    "turn",
    "prompt_tokens",
    "generated_tokens",
    "steps",
    "drafted",
    "accepted",
    "accepted_per_pos",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("eagle3-cli"))


def pair(dirs, head="eagle"):
    return ["--target", str(dirs["target"]), "--draft", str(dirs[head])]


@pytest.fixture(scope="module")
def audited(dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "audited"
    result = invoke(["run", *pair(dirs), *BASE, "--check-lossless", "--audit-slots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def counts(out):
    return pd.read_csv(out / "questions.csv")[COUNTS].sort_values(["k", "question_id"]).reset_index(drop=True)


def test_auto_stores_the_resolved_method_and_the_run_is_lossless_and_in_bounds(audited):
    meta = json.loads((audited / "run.json").read_text())
    assert meta["config"]["method"] == "eagle3"  # --method auto, resolved before the run
    for entry in meta["summary"]:
        assert entry["lossless_rate"] == 1.0 and entry["slot_violations"] == 0
        assert 1.0 < entry["al_mean"] < entry["k"] + 1


def test_speculators_format_and_contiguous_runner_give_the_same_counts(dirs, audited, tmp_path):
    spec = tmp_path / "spec"
    assert (
        invoke(["run", *pair(dirs, "speculators"), *BASE, "--method", "eagle3", "--out", str(spec)]).exit_code
        == 0
    )
    contiguous = tmp_path / "contiguous"
    assert (
        invoke(["run", *pair(dirs), *BASE, "--runner", "contiguous", "--out", str(contiguous)]).exit_code == 0
    )
    pd.testing.assert_frame_equal(counts(spec), counts(audited))
    pd.testing.assert_frame_equal(counts(contiguous), counts(audited))


def test_no_kv_lookahead_corrupts_draft_kv_but_stays_lossless(dirs, tmp_path):
    out = tmp_path / "nolook"
    result = invoke(
        [
            "run",
            *pair(dirs),
            *BASE,
            "--ks",
            "3",
            "--no-kv-lookahead",
            "--audit-slots",
            "--check-lossless",
            "--out",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "run.json").read_text())["summary"][0]
    assert summary["slot_violations"] > 0 and summary["lossless_rate"] == 1.0


@pytest.mark.parametrize("draft_sampling", ["onehot", "sampled"])
def test_temperature_runs_are_seeded(dirs, tmp_path, draft_sampling):
    args = [*pair(dirs), *BASE, "--temperature", "0.8", "--draft-sampling", draft_sampling]
    a, b = tmp_path / "a", tmp_path / "b"
    assert invoke(["run", *args, "--out", str(a)]).exit_code == 0
    assert invoke(["run", *args, "--out", str(b)]).exit_code == 0
    pd.testing.assert_frame_equal(counts(a), counts(b))
    assert json.loads((a / "run.json").read_text())["summary"][1]["al_mean"] > 1.0


def test_resume_after_interrupt_equals_uninterrupted(dirs, audited, tmp_path, monkeypatch):
    from alcheck.executors import local as local_mod

    out = tmp_path / "cut"
    real = local_mod.run_cell

    def stop_second(plan, backend, k, repeat, *rest):
        if k != 1:
            raise KeyboardInterrupt
        return real(plan, backend, k, repeat, *rest)

    monkeypatch.setattr(local_mod, "run_cell", stop_second)
    assert (
        invoke(["run", *pair(dirs), *BASE, "--check-lossless", "--audit-slots", "--out", str(out)]).exit_code
        == 130
    )
    monkeypatch.setattr(local_mod, "run_cell", real)
    result = invoke(["run", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["config"]["method"] == "eagle3"
    pd.testing.assert_frame_equal(counts(out), counts(audited))


def test_ablate_kv_lookahead_runs_eagle3_heads(dirs, tmp_path):
    out = tmp_path / "abl"
    result = invoke(
        [
            "ablate",
            "kv-lookahead",
            *pair(dirs),
            "--ks",
            "3",
            "--repeats",
            "1",
            "--limit",
            "4",
            "--max-tokens",
            "24",
            "--block-size",
            "4",
            "--out",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    row = json.loads((out / "ablation.json").read_text())["summary"][0]
    assert row["slot_violations_with"] == 0 and row["slot_violations_without"] > 0
    assert row["lossless_rate_with"] == row["lossless_rate_without"] == 1.0
