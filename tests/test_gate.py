"""`alcheck gate`: exit 0 / 1 / 2 and the regression rule (see alcheck/report/gate.py)."""

import json
import re

import pytest
from click.testing import CliRunner
from fake_runs import make_meta, make_run, reference, write_run_dir
from rich.console import Console

import alcheck.paths
from alcheck.cli.main import cli
from alcheck.errors import AlcheckError
from alcheck.report.gate import gate
from alcheck.report.gate_baseline import load_baseline, validate_baseline
from alcheck.report.gate_render import print_gate
from alcheck.report.run_io import load_run


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def invoke(*args, env=None):
    return CliRunner().invoke(cli, ["gate", *map(str, args)], env=env)


def meta_with(al_by_k, ci_half=0.05, protocol="vllm-example", repeats=1, **config):
    """A run.json without questions.csv; `repeats` identical per-repeat values."""
    return {
        "schema": "alcheck.run/1",
        "status": "complete",
        "config": {"protocol": protocol, **config},
        "summary": [
            {
                "k": k,
                "al_mean": al,
                "al_std": 0.0,
                "al_ci95": [al - ci_half, al + ci_half],
                "al_repeats": [al] * repeats,
                "per_position": [],
                "tokens_per_s": None,
            }
            for k, al in al_by_k.items()
        ],
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    return make_run(root / "base", {1: 1.71, 2: 2.10, 3: 2.30}, n_questions=40, repeats=2, turns=2, seed=1)


def derived_run(path, base_dir, change):
    """A run made from the baseline's questions.csv with `change(questions)` applied."""
    questions = change(load_run(base_dir).questions.copy())
    return write_run_dir(path, make_meta(questions), questions)


def test_reference_tolerance_boundary_deterministic_run():
    """Three identical repeats: no run-to-run noise, only the reference's rounding. Every
    difference is real; it fails only beyond the tolerance."""
    run = meta_with({3: 2.30}, repeats=3)
    ok = gate(run, reference("r", {3: 2.315}))
    [row] = ok.rows
    assert ok.passed and row.diff == pytest.approx(-0.015) and not row.paired
    assert row.credible and row.status == "pass (drop within tolerance)"
    assert "deterministic" in row.basis and "rounding" in row.basis
    bad = gate(run, reference("r", {3: 2.325}))
    assert not bad.passed and bad.exit_code == 1 and bad.rows[0].status == "REGRESSION"
    assert gate(run, reference("r", {3: 2.325}), tolerance=0.03).passed
    assert gate(run, reference("r", {3: 2.30}), tolerance=0).passed
    assert not gate(run, reference("r", {3: 2.3001}), tolerance=0).passed  # beyond its rounding
    assert gate(run, reference("r", {3: 2.29}), tolerance=0).passed  # one-sided: a rise passes


def test_reference_with_one_noisy_repeat_needs_a_credible_drop():
    """One repeat: the question spread stands in for run-to-run noise (conservative)."""
    run = meta_with({3: 2.30}, ci_half=0.05)
    near = gate(run, reference("r", {3: 2.325}))  # 0.025 below, noise SE ~0.026
    assert near.passed and not near.rows[0].credible and near.rows[0].status == "pass"
    assert any("conservative" in w for w in near.warnings)
    far = gate(run, reference("r", {3: 2.45}))
    assert not far.passed and far.rows[0].regression
    stated = gate(run, reference("r", {3: 2.40}, noise=0.1))  # the reference's own noise
    assert stated.passed and "reference ±0.1" in stated.rows[0].basis
    assert not gate(run, reference("r", {3: 2.40})).passed


def test_cli_against_reference_file(tmp_path):
    run = write_run_dir(tmp_path / "run", meta_with({1: 1.71, 2: 2.10, 3: 2.30}), None)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(reference("good", {1: 1.70, 2: 2.11, 3: 2.31})))
    out = invoke(run, "--baseline", good)
    assert out.exit_code == 0, out.output
    assert "PASS" in out.output
    worse = tmp_path / "worse.json"
    worse.write_text(json.dumps(reference("worse", {1: 1.70, 2: 2.11, 3: 2.40})))
    out = invoke(run, "--baseline", worse)
    assert out.exit_code == 1, out.output
    assert "FAIL" in out.output
    assert "K=3: AL 2.300 vs baseline 2.400: -0.100 (allowed -0.02, 95% CI [-0.15, -0.05]; p =" in out.output
    assert "K=1:" not in out.output.split("FAIL")[1]
    # only K=1,2 checked: passes
    assert invoke(run, "--baseline", worse, "--ks", "1-2").exit_code == 0
    assert invoke(run, "--baseline", worse, "--tolerance", "0.2").exit_code == 0


def test_identical_run_passes_paired(base):
    result = gate(base, base)
    assert result.passed
    for row in result.rows:
        assert row.paired and row.diff == 0 and row.ci_questions == (0.0, 0.0)
        assert row.n_questions == 40 and not row.credible and row.status == "pass"
        assert row.noise.basis == "repeats ×2 + repeats ×2"


def test_real_drop_fails_as_credible(base, tmp_path):
    # same questions, lower acceptance everywhere
    worse = make_run(
        tmp_path / "worse", {1: 1.71, 2: 1.95, 3: 2.10}, n_questions=40, repeats=2, turns=2, seed=1
    )
    out = invoke(worse, "--baseline", base)
    assert out.exit_code == 1, out.output
    result = gate(worse, base)
    assert [r.k for r in result.rows if r.regression] == [2, 3]
    k3 = result.rows[2]
    assert k3.diff == pytest.approx(-0.2, abs=0.04) and k3.ci95[1] < -0.1 and k3.credible
    assert "K=3" in out.output and "REGRESSION" in out.output
    assert "K=1:" not in out.output.split("FAIL")[1]


def test_a_drop_on_two_questions_is_real_on_these_prompts(base, tmp_path):
    """Two of 40 questions collapse. On these prompts the drop is real (run-to-run noise is
    small), so the gate fails; the question bootstrap, which asks about other prompts, reaches
    0, and is shown separately."""

    def collapse(q):
        hit = q.question_id.isin([81, 82])
        q.loc[hit, "accepted"] = 0
        q.loc[hit, "accepted_per_pos"] = q.loc[hit, "k"].map(lambda k: ";".join(["0"] * k))
        return q

    run = derived_run(tmp_path / "r", base, collapse)
    result = gate(run, base, ks=[3])
    [row] = result.rows
    assert row.diff < -0.02 and row.credible and row.regression
    assert row.ci_questions[1] == pytest.approx(0.0, abs=1e-12)
    assert not result.passed


def test_subset_run_is_compared_on_common_questions(base, tmp_path):
    """A --limit run on the 15 hardest questions: its pooled AL is far below the baseline's,
    but on the questions it measured nothing changed, so the paired gate passes."""
    questions = load_run(base).questions
    k3 = questions[questions.k == 3].groupby("question_id")[["steps", "accepted"]].sum()
    hardest = (k3.accepted / k3.steps).sort_values().index[:15]
    run = derived_run(tmp_path / "r", base, lambda q: q[q.question_id.isin(hardest)])
    result = gate(run, base)
    assert result.passed
    assert load_run(run).summary_for(3)["al_mean"] < load_run(base).summary_for(3)["al_mean"] - 0.2
    assert all(r.paired and r.diff == 0 and r.n_questions == 15 for r in result.rows)
    assert not any("questions (this run" in w for w in result.warnings)  # paired: no limit warning


def test_bare_run_json_baseline_uses_summary(base, tmp_path):
    bare = tmp_path / "bare.json"
    bare.write_text((base / "run.json").read_text())
    result = gate(base, bare)
    assert result.passed and not any(r.paired for r in result.rows)
    assert load_baseline(bare).kind == "run"
    # the baseline's stored run-to-run noise counts as well as the run's
    assert all(r.noise.basis == "repeats ×2 + repeats ×2" for r in result.rows)


def test_step_summary_is_appended(tmp_path, base):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    out = invoke(base, "--baseline", base, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert out.exit_code == 0, out.output
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert "alcheck gate: ✅ PASS" in text and "| K | AL | baseline | diff |" in text
    assert text.count("| repeats ×2 + repeats ×2 |") == 3
    assert "Holm" in text


def test_library_entry_for_run_gate(base):
    """The shape `alcheck run --gate` uses: gate(path, baseline) then print_gate."""
    with pytest.raises(AlcheckError, match=r"other settings \(protocol 'eagle-repo' .*--force"):
        gate(str(base), reference("ref", {1: 1.8, 3: 2.0}, protocol="eagle-repo"))
    result = gate(str(base), reference("ref", {1: 1.8, 3: 2.0}, protocol="eagle-repo"), force=True)
    assert result.skipped == [2] and [r.k for r in result.rows] == [1, 3]
    assert any("protocol 'eagle-repo' (this run: 'vllm-example')" in w for w in result.warnings)
    console = Console(record=True, width=200)
    assert print_gate(result, console, step_summary=False) == 1
    text = console.export_text()
    assert "skipped K=2: not in the baseline" in text and "K=1: AL" in text
    assert "protocol 'eagle-repo' (this run: 'vllm-example')" in text
    assert "| 1 | 1.71 | 1.80 | -0.09 |" in result.markdown() and "❌ FAIL" in result.markdown()


def test_gate_warns_about_every_setting_that_moves_al(base):
    """Issue 9 item 8: max_tokens, limit, target and draft (and temperature) warn in the gate."""
    ref = reference(
        "other",
        {1: 1.71},
        max_tokens=64,
        limit=8,
        target="org/other-target",
        draft="org/other-draft",
        temperature=1.0,
    )
    with pytest.raises(AlcheckError, match="measured with other settings"):
        gate(base, ref)  # a drop could come from the settings: bad input, exit 2, not exit 1
    [warning] = gate(base, ref, force=True).warnings
    for part in (
        "max_tokens 64 (this run: 256)",
        "8 questions (this run: all questions)",
        "target org/other-target",
        "draft org/other-draft",
        "temperature 1 (this run: greedy)",
    ):
        assert part in warning, part
    assert gate(base, reference("same", {1: 1.71})).warnings == []


def test_sampled_run_against_greedy_reference_warns(tmp_path):
    run = make_run(
        tmp_path / "t1",
        {2: 2.0},
        n_questions=10,
        repeats=2,
        config={"temperature": 1.0, "draft_sampling": "onehot"},
    )
    with pytest.raises(AlcheckError, match=r"greedy \(this run: temperature 1\)"):
        gate(run, reference("greedy", {2: 2.0}))
    [warning] = gate(run, reference("greedy", {2: 2.0}), force=True).warnings
    assert "greedy (this run: temperature 1)" in warning


def test_reference_by_name(monkeypatch, tmp_path, base):
    (tmp_path / "pinned.json").write_text(json.dumps(reference("pinned", {3: 2.29})))
    monkeypatch.setattr(alcheck.paths, "REFERENCES_DIR", tmp_path)
    out = invoke(base, "--baseline", "pinned")
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--baseline", "{tmp}/missing.json"], "baseline not found"),
        (["--baseline", "{tmp}/corrupt.json"], "not valid JSON"),
        (["--baseline", "{tmp}/neither.json"], "neither a run.json"),
        (["--baseline", "{tmp}/badvalues.json"], "not a finite number"),
        (["--baseline", "{tmp}/ref.json", "--ks", "4"], "K=4 not in baseline"),
        (["--baseline", "{tmp}/ref.json", "--ks", "1,9"], "K=9 not in baseline"),
        (["--baseline", "{tmp}/wide.json", "--ks", "7"], "K=7 not in the run"),
        (["--baseline", "{tmp}/ref.json", "--ks", "x"], "cannot read 'x'"),
        (["--baseline", "{tmp}/ref.json", "--ks", "0"], "K must be >= 1"),
        (["--baseline", "{tmp}/ref.json", "--tolerance", "-0.1"], "tolerance"),
        (["--baseline", "{tmp}/other.json"], "do not overlap"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, base, args, message):
    (tmp_path / "corrupt.json").write_text('{"values": {"1": 1.7')
    (tmp_path / "neither.json").write_text('{"name": "x"}')
    (tmp_path / "badvalues.json").write_text(json.dumps(reference("b", {1: "fast"})))
    (tmp_path / "ref.json").write_text(json.dumps(reference("ref", {1: 1.7, 2: 2.1, 3: 2.3})))
    (tmp_path / "wide.json").write_text(json.dumps(reference("wide", {k: 2.0 for k in range(1, 9)})))
    (tmp_path / "other.json").write_text(json.dumps(reference("other", {6: 2.5})))
    out = invoke(base, *[a.format(tmp=tmp_path) for a in args])
    assert out.exit_code == 2, out.output
    assert message in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_missing_run_dir_exits_2(tmp_path, base):
    out = invoke(tmp_path / "none", "--baseline", base)
    assert out.exit_code == 2 and "run not found" in out.output
    with pytest.raises(AlcheckError, match="tolerance"):
        gate(meta_with({1: 1.7}), reference("r", {1: 1.7}), tolerance=float("nan"))


BAD_AL = [("fast", "'fast'"), (None, "None"), (float("nan"), "nan"), (float("inf"), "inf"), (True, "True")]


@pytest.mark.parametrize("value,shown", BAD_AL)
def test_baseline_with_a_bad_al_mean_exits_2_before_anything_else(tmp_path, base, value, shown):
    """Issue 9 item 6: a string, null or non-finite al_mean is bad input (exit 2, one line),
    never a regression (exit 1); load_baseline finds it without looking at the run."""
    meta = json.loads((base / "run.json").read_text())
    meta["summary"][1]["al_mean"] = value
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps(meta))  # json writes NaN / Infinity for floats
    # strict JSON readers refuse NaN / Infinity themselves; either way it is one line, exit 2
    message = f"al_mean of K=2 is {shown}|holds (NaN|Infinity)"
    with pytest.raises(AlcheckError, match=message):
        load_baseline(bad)
    with pytest.raises(AlcheckError, match=message):
        validate_baseline(str(bad / "run.json"))
    with pytest.raises(AlcheckError, match=f"al_mean of K=2 is {shown}"):
        load_baseline(meta)  # an already loaded run.json dict
    out = invoke(tmp_path / "no-such-run", "--baseline", bad)  # the baseline is checked first
    assert out.exit_code == 2, out.output
    assert re.search(message, out.output) and len(out.output.strip().splitlines()) == 1


def test_baseline_without_al_mean_exits_2(tmp_path, base):
    meta = json.loads((base / "run.json").read_text())
    del meta["summary"][0]["al_mean"]
    (tmp_path / "run.json").write_text(json.dumps(meta))
    out = invoke(base, "--baseline", tmp_path / "run.json")
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1
    assert "al_mean" in out.output


def test_reference_baseline_with_bad_noise_exits_2(tmp_path, base):
    (tmp_path / "r.json").write_text(json.dumps(reference("r", {1: 1.7}, noise="small")))
    out = invoke(base, "--baseline", tmp_path / "r.json")
    assert out.exit_code == 2 and "noise" in out.output


@pytest.mark.parametrize(
    "value,message",
    [(-5, "not a possible AL at K=2"), (1e308, "not a possible AL at K=2"), ("2.09", "not a finite number")],
)
def test_reference_values_that_no_al_can_have_are_bad_input(tmp_path, base, value, message):
    """A reference value below 1 or above K+1 passed (exit 0) or failed (exit 1) the gate; a
    numeric string was silently converted. Each is bad input: exit 2, one line."""
    ref = reference("impossible", {1: 1.7, 2: 2.0})
    ref["values"]["2"] = value
    (tmp_path / "impossible.json").write_text(json.dumps(ref))
    out = invoke(base, "--baseline", str(tmp_path / "impossible.json"))
    assert out.exit_code == 2 and message in out.output and len(out.output.strip().splitlines()) == 1


# -- a CI gate fails or exits 2 on what it did not measure (issue 24) ------------------------------------


def test_a_partial_run_exits_2(base, tmp_path):
    meta = json.loads((base / "run.json").read_text())
    meta["status"] = "partial"
    meta["config"].update(ks=[1, 2, 3], repeats=2)
    meta["cells"] = [{"k": 1, "repeat": 0}]
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "run.json").write_text(json.dumps(meta))
    (partial / "questions.csv").write_text((base / "questions.csv").read_text())
    result = invoke(partial, "--baseline", base)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "the run is partial (1 of 6 (K, repeat) passes saved)" in message
    assert f"alcheck run --resume {partial}" in message


def test_a_k_the_baseline_has_and_the_run_lacks_exits_2(base, tmp_path):
    fewer = derived_run(tmp_path / "fewer", base, lambda q: q[q.k != 3])
    result = invoke(fewer, "--baseline", base)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "has K=3, which the run did not measure" in message and "--ks 1,2" in message
    subset = invoke(fewer, "--baseline", base, "--ks", "1,2")  # stated on purpose: gated, exit 0
    assert subset.exit_code == 0, subset.output


def test_run_gate_refuses_a_baseline_k_the_run_will_not_measure(pair_args, tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"name": "r", "values": {"1": 1.5, "2": 2.0}, "limit": 2}))
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "8",
            "--gate",
            str(ref),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "the baseline has K=1,2 but this run measures K=1" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_a_baseline_that_is_a_runs_questions_csv_names_the_run_folder(base):
    """Issue 50: it said "not valid JSON ... restore the file" of a healthy questions.csv."""
    out = invoke(base, "--baseline", base / "questions.csv")
    assert out.exit_code == 2, out.output
    assert out.output.strip() == (
        f"Error: baseline {base / 'questions.csv'} is a .csv file: a baseline is a run folder (or its "
        f"run.json), a reference table json or a reference name: pass the run folder {base}"
    )


def test_an_edited_baseline_summary_is_named_not_silently_replaced(tmp_path, base):
    """Issue 50: the gate used the recomputed AL without a word, while `report` warns of the same file."""
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(base, edited)
    meta = json.loads((edited / "run.json").read_text())
    stored = meta["summary"][1]["al_mean"]
    meta["summary"][1]["al_mean"] = 2.9  # K=2, edited by hand
    (edited / "run.json").write_text(json.dumps(meta))
    result = gate(base, edited)
    [line] = [w for w in result.warnings if "stored summary" in w]
    assert line == (
        f"⚠ the baseline {edited}: run.json's stored summary disagrees with questions.csv (K=2 al_mean "
        f"2.9 stored vs {stored:.4g} recomputed): the gate uses numbers recomputed from questions.csv"
    )
    assert [r.baseline for r in result.rows][1] == pytest.approx(stored) and result.passed
    report = CliRunner().invoke(cli, ["report", str(edited), "-o", str(tmp_path / "r.md")])
    assert (
        line.removeprefix("⚠ the baseline " + str(edited) + ": ").replace("the gate", "the report")
        in report.output
    )
    # the edited run on the other side: named too, and the run's recomputed AL is what is gated
    result = gate(edited, base)
    assert any(w.startswith("⚠ the run: run.json's stored summary disagrees") for w in result.warnings)
    out = invoke(edited, "--baseline", base)
    assert out.exit_code == 0 and "the run: run.json's stored summary disagrees" in " ".join(
        out.output.split()
    )


def test_an_unwritable_step_summary_keeps_the_verdict_and_warns(tmp_path, base):
    """Issue 50: PASS, then an error, then exit 2. Now the verdict's own exit code, and one warning."""
    blocked = tmp_path / "a-file" / "summary.md"  # a file where a folder would have to be
    (tmp_path / "a-file").write_text("x")
    out = invoke(base, "--baseline", base, env={"GITHUB_STEP_SUMMARY": str(blocked)})
    assert out.exit_code == 0, out.output
    assert "PASS" in out.output and "Error" not in out.output
    [warning] = [line for line in out.output.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: cannot append to GITHUB_STEP_SUMMARY={blocked} (")
    assert warning.endswith("; the verdict above stands (exit 0)")
