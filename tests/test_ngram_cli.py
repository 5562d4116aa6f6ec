"""`alcheck run --method ngram` end to end on a tiny target (no --draft), its bad inputs (one line,
exit 2, nothing written), resume, and report / compare / gate / ablate on its runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import invoke, one_line_error

TINY = ["--ks", "1,3", "--repeats", "1", "--limit", "3", "--max-tokens", "16", "--block-size", "4"]
NGRAM = ["--method", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]


@pytest.fixture(scope="module")
def ngram_run(pair_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ngram") / "run"
    result = invoke(["run", "--target", str(pair_dirs[0]), *NGRAM, *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_run_records_the_rule_and_counts_drafted_steps(ngram_run):
    meta = json.loads((ngram_run / "run.json").read_text())
    cfg = meta["config"]
    assert (cfg["method"], cfg["draft"]) == ("ngram", "")
    assert (cfg["ngram_rule"], cfg["prompt_lookup_min"], cfg["prompt_lookup_max"]) == ("vllm", 1, 3)
    rows = pd.read_csv(ngram_run / "questions.csv")
    assert (rows.drafted_steps <= rows.steps).all()
    assert (rows.drafted <= rows.steps * rows.k).all()
    assert (rows.accepted <= rows.drafted).all()


def test_only_one_size_copies_the_other_and_defaults_are_vllms(pair_dirs, tmp_path):
    from alcheck.config import RunConfig

    base = dict(target=str(pair_dirs[0]), draft="", method="ngram")
    assert (RunConfig(**base).prompt_lookup_min, RunConfig(**base).prompt_lookup_max) == (5, 5)
    one = RunConfig(**base, prompt_lookup_max=3)
    assert (one.prompt_lookup_min, one.prompt_lookup_max) == (3, 3)
    one = RunConfig(**base, prompt_lookup_min=2)
    assert (one.prompt_lookup_min, one.prompt_lookup_max) == (2, 2)
    t = RunConfig(**base, ngram_rule="transformers")
    assert (t.prompt_lookup_min, t.prompt_lookup_max) == (1, 2)


@pytest.mark.parametrize(
    "extra,needles",
    [
        (["--draft", "DRAFT"], ["--draft", "needs no checkpoint"]),
        (["--prompt-lookup-min", "4", "--prompt-lookup-max", "2"], ["--prompt-lookup-min 4", "larger"]),
        (["--prompt-lookup-min", "0"], ["--prompt-lookup-min 0", ">= 1"]),
        (["--prompt-lookup-max", "-1"], ["--prompt-lookup-max -1", ">= 1"]),
        (["--topk", "2", "--num-draft-tokens", "4"], ["--topk 2", "ngram"]),
        (["--ngram-rule", "sglang"], ["--ngram-rule sglang", "vllm, transformers, spec-bench"]),
        (["--draft-sampling", "sampled", "--temperature", "1"], ["--draft-sampling sampled"]),
    ],
)
def test_bad_ngram_input_is_one_line_and_writes_nothing(pair_dirs, tmp_path, extra, needles):
    out = tmp_path / "out"
    extra = [str(pair_dirs[1]) if a == "DRAFT" else a for a in extra]
    args = ["run", "--target", str(pair_dirs[0]), "--method", "ngram", *TINY, *extra, "--out", str(out)]
    one_line_error(invoke(args), *needles)
    assert not out.exists()


def test_ngram_options_need_the_ngram_method(pair_args, tmp_path):
    out = tmp_path / "out"
    one_line_error(
        invoke(["run", *pair_args, *TINY, "--prompt-lookup-max", "3", "--out", str(out)]),
        "--prompt-lookup-max",
        "--method ngram",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "extra", [["--ngram-rule", "transformers"], ["--prompt-lookup-max", "4"], ["--prompt-lookup-min", "2"]]
)
def test_resume_with_another_rule_or_size_is_refused(ngram_run, extra):
    before = {p.name: p.read_bytes() for p in ngram_run.iterdir() if p.is_file()}
    message = one_line_error(invoke(["run", "--resume", str(ngram_run), *extra]))
    assert "resume" in message
    after = {p.name: p.read_bytes() for p in ngram_run.iterdir() if p.is_file()}
    assert after == before  # nothing written


def test_resume_of_a_finished_run_changes_nothing(ngram_run):
    rows = (ngram_run / "questions.csv").read_text()
    result = invoke(["run", "--resume", str(ngram_run)])
    assert result.exit_code == 0, result.output
    assert (ngram_run / "questions.csv").read_text() == rows


def test_report_compare_and_gate_take_ngram_runs(ngram_run, pair_dirs, tmp_path):
    other = tmp_path / "again"
    result = invoke(["run", "--target", str(pair_dirs[0]), *NGRAM, *TINY, "--out", str(other)])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(other / "questions.csv").equals(pd.read_csv(ngram_run / "questions.csv"))
    result = invoke(["report", str(ngram_run), "--output", str(tmp_path / "report.md")])
    assert result.exit_code == 0, result.output
    assert "ngram" in (tmp_path / "report.md").read_text()
    assert invoke(["compare", str(ngram_run), str(other)]).exit_code == 0
    assert invoke(["gate", str(other), "--baseline", str(ngram_run)]).exit_code == 0


def test_ablate_runs_ngram(pair_dirs, tmp_path):
    out = tmp_path / "ablation"
    result = invoke(
        ["ablate", "kv-lookahead", "--target", str(pair_dirs[0]), *NGRAM, "--ks", "2", "--repeats", "1"]
        + ["--limit", "2", "--max-tokens", "12", "--block-size", "4", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert (out / "ablation.json").is_file()


@pytest.fixture(scope="module")
def demo_ngram(tmp_path_factory):
    """The demo target (no --target), whose answers repeat enough for n-gram drafts to be accepted."""
    out = tmp_path_factory.mktemp("demo-ngram") / "demo"
    result = invoke(
        ["run", *NGRAM, "--ks", "1,3", "--repeats", "1", "--limit", "3", "--max-tokens", "48"]
        + ["--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "vLLM drafted-steps" in result.output
    return out


def test_vllms_drafted_steps_al_is_stored_and_shown_beside_alchecks(demo_ngram, tmp_path):
    """run.json keeps vLLM's convention beside alcheck's, recomputed here from the rows; the report's
    table labels it whenever the two differ (n-gram steps that matched nothing draft nothing)."""
    ngram_run = demo_ngram
    meta = json.loads((ngram_run / "run.json").read_text())
    rows = pd.read_csv(ngram_run / "questions.csv")
    assert rows.accepted.sum() > 0
    for entry in meta["summary"]:
        mine = rows[rows.k == entry["k"]]
        assert entry["al_mean"] == pytest.approx(1 + mine.accepted.sum() / mine.steps.sum())
        assert entry["al_drafted_steps"] == pytest.approx(1 + mine.accepted.sum() / mine.drafted_steps.sum())
    assert (rows.drafted_steps < rows.steps).any()  # the case under test happens at all
    result = invoke(["report", str(ngram_run), "--output", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r.md").read_text()
    assert "| vLLM drafted-steps AL |" in text and "the number vLLM prints" in text


def test_an_eagle_run_shows_no_drafted_steps_column(pair_dirs, tmp_path):
    from alcheck.report.table import drafted_differs

    out = tmp_path / "eagle"
    result = invoke(
        ["run", "--target", str(pair_dirs[0]), "--draft", str(pair_dirs[1]), *TINY, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "run.json").read_text())["summary"]
    assert all(e["al_drafted_steps"] == pytest.approx(e["al_mean"]) for e in summary)  # every step drafts
    assert not drafted_differs(summary) and "drafted-steps" not in result.output


def test_a_reference_in_vllms_convention_is_met_with_the_runs_drafted_steps_al(demo_ngram):
    """A table counted as vLLM prints (drafted-steps AL) is compared with the run's number in that
    convention, computed from its counts, and the table says so; stated in alcheck's it would not match."""
    from alcheck.report.table import comparison_rows, reference_warnings

    meta = json.loads((demo_ngram / "run.json").read_text())
    summary = {int(e["k"]): e for e in meta["summary"]}
    drafted = {str(k): round(e["al_drafted_steps"], 4) for k, e in summary.items()}
    assert any(summary[int(k)]["al_mean"] < v - 0.05 for k, v in drafted.items())  # the two differ
    base = {"name": "vllm-printed", "method": "ngram", "values": drafted, "noise": 0.0}
    for convention, far in ((VLLM_DRAFTED_NAME, False), (None, True)):
        ref = dict(base, convention=convention) if convention else dict(base)
        rows = comparison_rows({**meta, "references": [ref]})
        diffs = [r["references"][0]["diff"] for r in rows]
        assert all(d is not None for d in diffs)
        assert any(abs(d) > 0.05 for d in diffs) == far, (convention, diffs)
        notes = " ".join(reference_warnings({**meta, "references": [ref]}))
        assert ("vLLM drafted-steps AL" in notes) == (convention is not None), notes


VLLM_DRAFTED_NAME = "vllm-drafted"
