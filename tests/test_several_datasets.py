"""Several datasets in one run (`--dataset a,b,c`, issue 20 phase 2) on the tiny pair.

Oracles: the same datasets run one by one. Greedy float32 on the CPU decodes a prompt the same
whatever else is in its batch, so each dataset's rows of the run of several must equal its own
run's rows, its summary its own run's summary, and the pooled AL the ratio of sums over both
single runs' rows. humaneval and gsm8k both number their questions 0.., so any place that keys a
question by its id alone would merge two questions.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import expect_error

from alcheck.cli.main import cli
from alcheck.config import RunConfig
from alcheck.metrics import stats
from alcheck.metrics.acceptance import parse_per_pos
from alcheck.metrics.noise import question_matrix
from alcheck.prompts.dataset_list import parse_datasets, shared_protocol
from alcheck.report.compare import compare_runs
from alcheck.report.gate import gate
from alcheck.report.run_io import load_run
from alcheck.report.table import markdown_table

SETTINGS = [
    "--ks",
    "1-2",
    "--repeats",
    "2",
    "--limit",
    "3",
    "--max-tokens",
    "16",
    "--block-size",
    "4",
    "--max-batch-size",
    "4",
    "--reference",
    "none",
]
BOTH = "humaneval,gsm8k"


def invoke(*args):
    return CliRunner().invoke(cli, ["run", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(pair_args, tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    for name, dataset in (("both", BOTH), ("humaneval", "humaneval"), ("gsm8k", "gsm8k")):
        result = invoke(*pair_args, *SETTINGS, "--dataset", dataset, "--out", str(root / name))
        assert result.exit_code == 0, result.output
    return root


def csv(path) -> pd.DataFrame:
    return pd.read_csv(path / "questions.csv", dtype={"accepted_per_pos": str})


def without_timing(entries):
    return [{k: v for k, v in e.items() if k not in ("tokens_per_s", "dataset")} for e in entries]


def test_each_datasets_rows_and_summary_equal_its_own_run(runs):
    both = csv(runs / "both")
    assert list(both.columns[:4]) == ["k", "repeat", "dataset", "question_id"]  # the key, before the id
    assert set(both["dataset"]) == {"humaneval", "gsm8k"}
    assert sorted(both[both.dataset == "gsm8k"].question_id.unique()) == [
        0,
        1,
        2,
    ]  # the same ids as humaneval's
    meta = json.loads((runs / "both" / "run.json").read_text())
    assert meta["config"]["dataset"] == ["humaneval", "gsm8k"]
    for name in ("humaneval", "gsm8k"):
        alone = csv(runs / name)
        assert "dataset" not in alone.columns  # one dataset: questions.csv as before
        mine = both[both.dataset == name].drop(columns="dataset").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone)
        single = json.loads((runs / name / "run.json").read_text())
        assert single["config"]["dataset"] == name and "summary_by_dataset" not in single
        by_dataset = [e for e in meta["summary_by_dataset"] if e["dataset"] == name]
        assert without_timing(by_dataset) == without_timing(single["summary"])


def test_pooled_summary_is_the_ratio_of_sums_over_both_single_runs(runs):
    meta = json.loads((runs / "both" / "run.json").read_text())
    rows = pd.concat([csv(runs / "humaneval"), csv(runs / "gsm8k")])
    for entry in meta["summary"]:
        k = entry["k"]
        mine = rows[rows.k == k]
        assert entry["al_mean"] == pytest.approx(
            (mine.steps.sum() + mine.accepted.sum()) / mine.steps.sum(), abs=1e-12
        )
        per_pos = parse_per_pos(mine.accepted_per_pos, k).sum(axis=0) / mine.steps.sum()
        assert entry["per_position"] == pytest.approx(list(per_pos))
        by_repeat = [(g.steps.sum() + g.accepted.sum()) / g.steps.sum() for _, g in mine.groupby("repeat")]
        assert entry["al_repeats"] == pytest.approx(by_repeat)


def test_a_question_is_dataset_and_id(runs):
    both = load_run(runs / "both").questions
    k1 = both[both.k == 1]
    ids, emitted, steps = question_matrix(k1)
    assert len(ids) == 6  # 3 humaneval + 3 gsm8k questions, not 3 merged ids
    sums = stats.question_sums(k1)
    assert len(sums) == 6
    # the stored CI is the cluster bootstrap over those 6 questions, summed by hand here
    by_hand = k1.groupby(["dataset", "question_id"]).agg(steps=("steps", "sum"), accepted=("accepted", "sum"))
    assert sorted(sums["steps"]) == sorted(by_hand["steps"].astype(float))
    meta = json.loads((runs / "both" / "run.json").read_text())
    stored = next(e for e in meta["summary"] if e["k"] == 1)["al_ci95"]
    emitted_q = (by_hand["steps"] + by_hand["accepted"]).to_numpy(float)
    keyed = by_hand.reset_index()
    order = (keyed["dataset"] + "\x1f" + keyed["question_id"].astype(str)).argsort().to_numpy()
    assert list(
        stats.ratio_ci(emitted_q[order], by_hand["steps"].to_numpy(float)[order], seed=[0, 1])
    ) == pytest.approx(stored)


def test_table_report_compare_and_gate_have_a_row_per_dataset_and_k(runs, tmp_path):
    meta = json.loads((runs / "both" / "run.json").read_text())
    table = markdown_table(meta)
    assert table.splitlines()[0].startswith("| dataset | K |")
    for name in ("humaneval", "gsm8k", "all"):
        assert sum(line.startswith(f"| {name} |") for line in table.splitlines()) == 2
    single = markdown_table(json.loads((runs / "gsm8k" / "run.json").read_text()))
    assert single.splitlines()[0].startswith("| K |")  # one dataset: the table as before
    result = CliRunner().invoke(cli, ["report", str(runs / "both"), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0 and "disagrees" not in result.output
    report = (tmp_path / "r.md").read_text()
    assert "## AL per dataset" in report and "| dataset | category | questions |" in report

    compared = compare_runs(runs / "gsm8k", runs / "both")
    assert [(r.dataset, r.k) for r in compared.rows] == [("gsm8k", 1), ("gsm8k", 2)]
    assert compared.datasets_only_b == ["humaneval"]
    alone = compare_runs(runs / "gsm8k", runs / "gsm8k")
    for row, same in zip(compared.rows, alone.rows):  # paired on gsm8k's questions only
        assert (row.al_a, row.al_b, row.n_questions, row.diff) == (
            same.al_a,
            same.al_b,
            same.n_questions,
            0.0,
        )
    assert {c["category"] for c in compared.categories} == {"math"}

    rows = gate(runs / "both", runs / "both").rows
    assert [(r.dataset, r.k) for r in rows] == [(d, k) for d in ("humaneval", "gsm8k") for k in (1, 2)]
    assert gate(runs / "both", runs / "gsm8k").skipped_datasets == ["humaneval"]
    expect_error(lambda: gate(runs / "gsm8k", runs / "both"), "measured humaneval, which the run did not")
    assert [r.dataset for r in gate(runs / "gsm8k", runs / "both", force=True).rows] == ["gsm8k", "gsm8k"]


def test_rows_measured_under_another_protocol_are_not_paired(pair_args, runs, tmp_path):
    out = tmp_path / "vllm"
    result = invoke(
        *pair_args, *SETTINGS, "--dataset", "gsm8k", "--protocol", "vllm-example", "--out", str(out)
    )
    assert result.exit_code == 0, result.output
    expect_error(lambda: compare_runs(out, runs / "both"), "protocol 'vllm-example' vs 'eagle-repo'")
    expect_error(lambda: gate(out, runs / "both"), "protocol 'eagle-repo' (this run: 'vllm-example')")


def test_resume_of_a_run_of_several_datasets_equals_the_uninterrupted_run(
    pair_args, runs, tmp_path, monkeypatch
):
    from alcheck.executors import local as local_mod

    out, real, calls = tmp_path / "cut", local_mod.run_cell, {"n": 0}

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(local_mod, "run_cell", flaky)
    assert invoke(*pair_args, *SETTINGS, "--dataset", BOTH, "--out", str(out)).exit_code == 130
    monkeypatch.setattr(local_mod, "run_cell", real)
    result = invoke("--resume", str(out))
    assert result.exit_code == 0, result.output
    resumed, full = (json.loads((d / "run.json").read_text()) for d in (out, runs / "both"))
    assert without_timing(resumed["summary_by_dataset"]) == without_timing(full["summary_by_dataset"])
    assert (out / "questions.csv").read_bytes() == (runs / "both" / "questions.csv").read_bytes()


@pytest.mark.parametrize(
    "value, needle",
    [
        ("humaneval,,gsm8k", "entry 2 is empty"),
        ("humaneval,", "entry 2 is empty"),
        ("humaneval,humaneval", "humaneval is humaneval, listed twice"),
        ("sum,cnn_dm", "cnn_dm is sum, listed twice (as sum)"),
        ("humaneval,gsm8kk", "unknown dataset 'gsm8kk'"),
        ("mt_bench,humaneval", "default protocols differ (mt_bench: vllm-example; humaneval: eagle-repo)"),
    ],
)
def test_bad_lists_are_one_line_and_exit_2(pair_args, tmp_path, value, needle):
    out = tmp_path / "bad"
    result = invoke(*pair_args, "--dataset", value, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_copy_of_a_listed_dataset_is_a_duplicate(tmp_path):
    from alcheck.prompts import catalog

    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(catalog.named("gsm8k").path.read_bytes())
    expect_error(lambda: parse_datasets(f"gsm8k,{copy}"), "is gsm8k, listed twice (as gsm8k)")


def test_config_keeps_one_dataset_a_string_and_several_a_list():
    assert RunConfig("t", "d").to_dict()["dataset"] == "mt_bench"
    assert RunConfig("t", "d", dataset=["gsm8k"]).dataset == "gsm8k"  # a one-entry list is one dataset
    several = RunConfig("t", "d", dataset="humaneval, gsm8k", protocol="eagle-repo")
    assert several.dataset == ["humaneval", "gsm8k"] and several.datasets == ["humaneval", "gsm8k"]
    assert RunConfig.from_dict(several.to_dict()).result_settings() == several.result_settings()
    old = RunConfig.from_dict(
        {"target": "t", "draft": "d", "dataset": "mt_bench"}
    )  # every run.json before lists
    assert old.dataset == "mt_bench" and old.datasets == ["mt_bench"]
    assert shared_protocol(["humaneval", "gsm8k", "qa"]) == "eagle-repo"
    assert shared_protocol("mt_bench") == "vllm-example"


def test_references_are_judged_on_their_own_datasets_rows():
    def entry(dataset, k, al):
        return {
            "dataset": dataset,
            "k": k,
            "al_mean": al,
            "al_std": 0.0,
            "al_ci95": [al - 0.1, al + 0.1],
            "al_repeats": [al],
            "per_position": [al - 1],
            "tokens_per_s": None,
        }

    def ref(name, dataset, value):
        return {
            "name": name,
            "target": "t",
            "draft": "d",
            "method": "eagle",
            "protocol": "eagle-repo",
            "dataset": dataset,
            "limit": None,
            "max_tokens": 16,
            "temperature": 0.0,
            "values": {"1": value},
        }

    meta = {
        "config": {
            "target": "t",
            "draft": "d",
            "method": "eagle",
            "protocol": "eagle-repo",
            "limit": None,
            "dataset": ["humaneval", "gsm8k"],
            "max_tokens": 16,
            "temperature": 0.0,
        },
        "environment": {"device": "cpu", "dtype": "float32"},
        "summary": [{k: v for k, v in entry("", 1, 1.7).items() if k != "dataset"}],
        "summary_by_dataset": [entry("humaneval", 1, 1.6), entry("gsm8k", 1, 1.8)],
        "references": [ref("he", "humaneval", 1.5), ref("qa-row", "qa", 1.7)],
    }
    lines = {
        line.split(" | ")[0]: line for line in markdown_table(meta).splitlines() if line.startswith("| ")
    }
    assert "1.50 (+0.10) above" in lines["| humaneval"]  # 1.6 − 1.5 on humaneval's rows, not the pooled 1.7
    assert "1.70 (+0.00) not comparable" in lines["| all"]  # a QA row meets no dataset of this run
    assert "1.50" not in lines["| gsm8k"]


def test_old_single_dataset_runs_read_as_before():
    from alcheck import paths

    run = load_run(paths.REPO_ROOT / "results" / "baselines" / "demo")
    assert run.config["dataset"] == "mt_bench" and "dataset" not in run.questions.columns
    assert markdown_table(run.meta).splitlines()[0].startswith("| K |")


def test_docs_table_is_the_shipped_run_of_several_datasets():
    from alcheck import paths

    meta = json.loads((paths.REPO_ROOT / "results" / "demo-datasets" / "run.json").read_text())
    assert (
        meta["config"]["dataset"] == ["mt_bench", "humaneval", "gsm8k", "qa"] and meta["status"] == "complete"
    )
    readme = (paths.REPO_ROOT / "docs" / "reference" / "datasets.md").read_text().splitlines()
    start = readme.index("| dataset | questions × turns | K=1 | K=2 | K=3 | K=4 | K=5 |")
    rows = {}
    for line in readme[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = [float(x) for x in cells[2:]]
    expected = {
        label: [round(e["al_mean"], 2) for e in meta["summary_by_dataset"] if e["dataset"] == label]
        for label in ("mt_bench", "humaneval", "gsm8k", "qa")
    }
    expected["all four, pooled"] = [round(e["al_mean"], 2) for e in meta["summary"]]
    assert rows == expected


def test_devices_workers_write_the_same_run(pair_args, runs, tmp_path):
    out = tmp_path / "devices"
    result = invoke(*pair_args, *SETTINGS, "--dataset", BOTH, "--devices", "cpu,cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "questions.csv").read_bytes() == (runs / "both" / "questions.csv").read_bytes()


def test_run_gate_refuses_a_baseline_dataset_the_run_lacks_before_the_sweep(pair_args, runs, tmp_path):
    out = tmp_path / "gated"
    result = invoke(
        *pair_args, *SETTINGS, "--dataset", "gsm8k", "--gate", str(runs / "both"), "--out", str(out)
    )
    assert result.exit_code == 2 and "measured humaneval, which this run does not" in result.output
    assert not out.exists()
