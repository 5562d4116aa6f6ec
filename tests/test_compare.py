"""`alcheck compare`: paired comparison of two runs on the same questions."""

import json

import pytest
from click.testing import CliRunner
from fake_runs import make_meta, make_questions, make_run, write_run_dir

from alcheck.cli.main import cli
from alcheck.errors import AlcheckError
from alcheck.metrics import verdict as V
from alcheck.metrics.acceptance import pooled_al
from alcheck.metrics.noise import paired_frames, paired_noise
from alcheck.report.compare import compare_runs
from alcheck.report.run_io import load_run


def invoke(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The seed thread's situation: vLLM v1 at K=4 measured 2.09 one day and 2.10 the next
    (same 80 MT-Bench questions, one pass each, GPU nondeterminism), plus a real +0.2 shift."""
    root = tmp_path_factory.mktemp("cmp")
    common = dict(repeats=1, n_questions=80, question_seed=0)
    return {
        "a": make_run(root / "a", {2: 1.90, 4: 2.09}, seed=30, **common),
        "b": make_run(root / "b", {2: 1.90, 4: 2.10}, seed=126, **common),
        "shift": make_run(root / "shift", {4: 2.29, 5: 2.35}, seed=110, **common),
    }


def test_seed_thread_2_09_vs_2_10_is_noise(runs):
    a, b = load_run(runs["a"]), load_run(runs["b"])
    assert f"{a.summary_for(4)['al_mean']:.2f}" == "2.09"
    assert f"{b.summary_for(4)['al_mean']:.2f}" == "2.10"
    result = compare_runs(a, b)
    row = next(r for r in result.rows if r.k == 4)
    assert row.diff == pytest.approx(b.summary_for(4)["al_mean"] - a.summary_for(4)["al_mean"])
    assert row.diff == pytest.approx(0.01, abs=0.002)
    assert row.ci95[0] < 0 < row.ci95[1] and row.ci_questions[0] < 0 < row.ci_questions[1]
    assert row.verdict == "no detectable change" and row.noise["basis"] == "paired by question (80 q)"
    assert row.n_questions == 80 and row.n_units == 80
    out = invoke(runs["a"], runs["b"])
    assert out.exit_code == 0, out.output
    assert "no detectable change" in out.output and "+0.01" in out.output


def test_real_shift_of_0_2_is_detected_both_ways(runs):
    res = compare_runs(runs["a"], runs["shift"])
    [row] = res.rows
    assert row.k == 4 and row.diff == pytest.approx(0.2, abs=0.03)
    assert row.ci95[0] > 0.1 and row.verdict == "B higher"
    [back] = compare_runs(runs["shift"], runs["a"]).rows
    assert back.verdict == "A higher" and back.diff == pytest.approx(-row.diff)
    assert res.only_a == [2] and res.only_b == [5]
    out = invoke(runs["a"], runs["shift"])
    assert out.exit_code == 0
    assert "B higher" in out.output
    assert "skipped K=2: only in A" in out.output and "skipped K=5: only in B" in out.output


def _verdict(a, b):
    diff, noise = paired_noise(*paired_frames(a, b)[:4])
    [decision] = V.decide([diff], [noise], tolerance=0.02, side="two-sided")
    return V.compare_verdict(decision)


def test_false_alarm_rate_and_power_over_many_run_pairs():
    """Same true AL: a change is reported rarely; a +0.1 shift is almost always caught."""
    same = shifted = 0
    for s in range(12):
        a = make_questions({3: 2.30}, n_questions=40, repeats=1, seed=s)
        b = make_questions({3: 2.30}, n_questions=40, repeats=1, seed=100 + s)
        c = make_questions({3: 2.40}, n_questions=40, repeats=1, seed=100 + s)
        same += _verdict(a, b) != V.NO_CHANGE
        shifted += _verdict(a, c) == V.B_HIGHER
    assert same <= 2
    assert shifted >= 10


def test_json_output(runs):
    out = invoke(runs["a"], runs["b"], "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [r["k"] for r in data["rows"]] == [2, 4]
    for r in data["rows"]:
        assert r["diff"] == pytest.approx(r["al_b"] - r["al_a"])
        assert r["ci95"][0] <= r["diff"] <= r["ci95"][1]
    assert data["diff_definition"].startswith("AL(B) - AL(A)")
    assert data["only_a"] == [] and data["mismatches"] == []
    assert "Holm" in data["rule"] and data["tolerance"] == 0.02
    assert all(r["noise"]["basis"].startswith("paired by question") for r in data["rows"])


@pytest.mark.parametrize(
    "key,value",
    [("protocol", "eagle-repo"), ("dataset", "spec_bench"), ("max_tokens", 512), ("temperature", 0.7)],
)
def test_refuses_incomparable_runs_unless_forced(tmp_path, key, value):
    a = make_run(tmp_path / "a", {2: 2.0}, n_questions=10, repeats=1)
    b = make_run(tmp_path / "b", {2: 2.0}, n_questions=10, repeats=1, config={key: value})
    out = invoke(a, b)
    assert out.exit_code == 2
    assert key in out.output and "--force" in out.output
    assert len(out.output.strip().splitlines()) == 1
    forced = invoke(a, b, "--force")
    assert forced.exit_code == 0, forced.output
    assert "--force" in forced.output and key in forced.output


def test_same_settings_with_equal_numbers_compare(tmp_path):
    a = make_run(tmp_path / "a", {2: 2.0}, n_questions=10, repeats=1, config={"temperature": 0})
    b = make_run(
        tmp_path / "b", {2: 2.0}, n_questions=10, repeats=1, config={"temperature": 0.0, "draft": "other"}
    )
    result = compare_runs(a, b)
    assert result.mismatches == [] and any("draft" in d for d in result.differences)
    [row] = result.rows
    assert row.diff == 0 and row.verdict == "no detectable change"  # same seed: identical runs


def test_bad_inputs(tmp_path, runs):
    assert invoke(tmp_path / "x", runs["a"]).exit_code == 2
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "run.json").write_text((runs["a"] / "run.json").read_text())
    out = invoke(runs["a"], bare)
    assert out.exit_code == 2 and "questions.csv" in out.output
    with pytest.raises(AlcheckError):
        compare_runs(runs["a"], bare)


def test_disjoint_questions_reported(tmp_path):
    a = make_run(tmp_path / "a", {2: 2.0}, n_questions=5, repeats=1)
    b = make_run(tmp_path / "b", {2: 2.0}, n_questions=5, repeats=1, first_id=500)
    [row] = compare_runs(a, b).rows
    assert row.verdict == "no common questions" and row.ci95 is None


def test_tolerance_separates_within_tolerance_from_higher(runs):
    """A real +0.2 shift: B higher at tolerance 0.02, within tolerance at 0.3."""
    [row] = compare_runs(runs["a"], runs["shift"], tolerance=0.3).rows
    assert row.verdict == "within tolerance"
    out = invoke(runs["a"], runs["shift"], "--tolerance", "0.3")
    assert out.exit_code == 0 and "within tolerance" in out.output
    bad = invoke(runs["a"], runs["shift"], "--tolerance", "nan")
    assert bad.exit_code == 2 and "tolerance" in bad.output


def test_holm_across_ks_in_compare(tmp_path):
    """Five Ks, same true AL, one repeat each: across 10 seeded pairs at most one reports."""
    reported = 0
    for s in range(10):
        a = make_run(
            tmp_path / f"a{s}",
            {1: 1.71, 2: 2.13, 3: 2.32, 4: 2.42, 5: 2.48},
            n_questions=40,
            repeats=1,
            seed=s,
        )
        b = make_run(
            tmp_path / f"b{s}",
            {1: 1.71, 2: 2.13, 3: 2.32, 4: 2.42, 5: 2.48},
            n_questions=40,
            repeats=1,
            seed=500 + s,
        )
        reported += any(r.verdict != V.NO_CHANGE for r in compare_runs(a, b, n_boot=200).rows)
    assert reported <= 1


def test_draft_sampling_must_match_when_sampling(tmp_path):
    hot = dict(n_questions=10, repeats=1)
    a = make_run(tmp_path / "a", {2: 2.0}, config={"temperature": 1.0, "draft_sampling": "onehot"}, **hot)
    b = make_run(tmp_path / "b", {2: 2.0}, config={"temperature": 1.0, "draft_sampling": "sampled"}, **hot)
    out = invoke(a, b)
    assert out.exit_code == 2 and "draft_sampling" in out.output
    # a run written before the option existed sampled its drafts
    legacy = make_run(tmp_path / "legacy", {2: 2.0}, config={"temperature": 1.0}, **hot)
    assert compare_runs(legacy, b).mismatches == []
    assert "draft_sampling" in compare_runs(legacy, a, force=True).mismatches[0]
    # greedy runs: the convention does not matter
    g1 = make_run(tmp_path / "g1", {2: 2.0}, config={"draft_sampling": "onehot"}, **hot)
    g2 = make_run(tmp_path / "g2", {2: 2.0}, config={"draft_sampling": "sampled"}, **hot)
    assert compare_runs(g1, g2).mismatches == []


def test_compare_names_drafting_shape_and_prompt_differences(tmp_path):
    """A chain-vs-tree A/B test is allowed, but says so; turn-1 prompts with other token ids
    (another tokenizer or template) are named from prompt_hash."""
    import pandas as pd

    a = make_run(tmp_path / "a", {2: 2.0}, n_questions=10, repeats=1, config={"temperature": 0})
    b = make_run(
        tmp_path / "b",
        {2: 2.0},
        n_questions=10,
        repeats=1,
        config={"temperature": 0, "topk": 4, "num_draft_tokens": 12},
    )
    for run, hashes in ((a, "same"), (b, "same")):
        q = pd.read_csv(run / "questions.csv")
        q["prompt_hash"] = [f"{hashes}{i}" for i in q["question_id"]]
        q.to_csv(run / "questions.csv", index=False)
    result = compare_runs(a, b)
    assert "topk 1 vs 4" in result.differences and "num_draft_tokens None vs 12" in result.differences
    assert not any("prompt" in d for d in result.differences)
    q = pd.read_csv(b / "questions.csv")
    q.loc[q["question_id"] < 84, "prompt_hash"] = "other"  # 3 of the 10 questions asked differently
    q.to_csv(b / "questions.csv", index=False)
    with pytest.raises(AlcheckError, match="prompt_hash differs on 3 of 10"):  # issue 50: refused
        compare_runs(a, b)
    assert any("prompt_hash differs on 3 of 10" in d for d in compare_runs(a, b, force=True).mismatches)


def _hashed(run, prefix: str, target: str):
    """Give a fake run's turn-1 prompts token-id hashes (prefix + question id) and a target."""
    import pandas as pd

    q = pd.read_csv(run / "questions.csv")
    q["prompt_hash"] = [f"{prefix}{i}" for i in q["question_id"]]
    q.to_csv(run / "questions.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["target"] = target
    (run / "run.json").write_text(json.dumps(meta))


def test_runs_of_other_targets_are_refused_unless_forced(tmp_path):
    """Issue 50: two targets' runs (other prompt token ids) got 'B higher' and exit 0, the
    mismatch one line among 99; now one line, exit 2, unless --force."""
    common = dict(repeats=1, n_questions=80, question_seed=0)
    a = make_run(tmp_path / "a", {4: 2.09}, seed=30, **common)
    b = make_run(tmp_path / "b", {4: 2.40}, seed=126, **common)
    _hashed(a, "llama", "meta-llama/Llama-3.1-8B-Instruct")
    _hashed(b, "qwen", "Qwen/Qwen3-8B")
    out = invoke(a, b)
    assert out.exit_code == 2, out.output
    assert out.output.strip() == (
        "Error: runs are not comparable, they differ in prompts (prompt_hash differs on 80 of 80 common "
        "questions' turn 1: the runs did not send the same token ids), targets "
        "'meta-llama/Llama-3.1-8B-Instruct' vs 'Qwen/Qwen3-8B': compare runs made with the same "
        "settings, or pass --force"
    )
    forced = invoke(a, b, "--force")
    assert forced.exit_code == 0 and "B higher" in forced.output, forced.output
    assert "⚠ --force: the runs differ in prompts" in " ".join(forced.output.split())


def test_runs_with_no_k_in_common_exit_2(runs):
    """Issue 50: compare exited 0 with nothing compared; gate exits 2 for the same runs."""
    out = invoke(runs["b"], runs["shift"])
    assert out.exit_code == 0  # K=4 in common
    only = make_run(runs["a"].parent / "only3", {3: 2.2}, repeats=1, n_questions=80, question_seed=0)
    out = invoke(runs["a"], only)
    assert out.exit_code == 2, out.output
    assert out.output.strip() == (
        "Error: the runs have no K in common (A: K=2,4, B: K=3): compare runs that measured the same K"
    )


@pytest.mark.parametrize("k", ["three", 2.5, None, True, 0])
def test_a_summary_k_that_is_not_a_whole_number_exits_2(tmp_path, runs, k):
    b = make_run(tmp_path / "b", {2: 1.90, 4: 2.10}, seed=126, repeats=1, n_questions=80, question_seed=0)
    meta = json.loads((b / "run.json").read_text())
    meta["summary"][1]["k"] = k
    (b / "run.json").write_text(json.dumps(meta))
    out = invoke(runs["a"], b)
    assert out.exit_code == 2, out.exception  # not a traceback (exit 1)
    [line] = out.output.strip().splitlines()
    assert line.startswith("Error:") and "summary entry 1 has k" in line and "whole number" in line


def test_a_partial_run_is_compared_on_the_passes_both_recorded(tmp_path):
    """B was interrupted after 2 of its 3 repeats at K=3 (K=2 finished): at K=3 A's repeat 2 is
    left out, so both sides pool repeats 0 and 1; K=2 keeps all three; one warning line says so."""
    a = make_run(tmp_path / "a", {2: 2.0, 3: 2.3}, n_questions=20, repeats=3, seed=1)
    questions = make_questions({2: 2.0, 3: 2.3}, n_questions=20, repeats=3, seed=2)
    questions = questions[~((questions.k == 3) & (questions.repeat == 2))]
    b = write_run_dir(
        tmp_path / "b", make_meta(questions, status="partial", config={"repeats": 3}), questions
    )
    qa = load_run(a).questions
    result = compare_runs(a, b)
    row2, row3 = sorted(result.rows, key=lambda r: r.k)
    assert row3.al_a == pytest.approx(pooled_al(qa[(qa.k == 3) & (qa.repeat < 2)]))
    assert row3.al_b == pytest.approx(pooled_al(questions[questions.k == 3]))
    assert row2.al_a == pytest.approx(pooled_al(qa[qa.k == 2]))  # nothing missing at K=2
    [warning] = [w for w in result.warnings if "partial" in w]
    assert "B not finished" in warning and "left out A's K=3 repeat 3" in warning and "K=2" not in warning
    out = invoke(a, b)
    assert out.exit_code == 0, out.output
    assert [line for line in out.output.splitlines() if "runs are partial" in line] == [f"⚠ {warning}"]
    assert warning in json.loads(invoke(a, b, "--json").output)["warnings"]


def test_complete_runs_with_other_repeat_counts_keep_every_pass(tmp_path):
    a = make_run(tmp_path / "a", {3: 2.3}, n_questions=20, repeats=3, seed=1)
    b = make_run(tmp_path / "b", {3: 2.3}, n_questions=20, repeats=2, seed=2)
    result = compare_runs(a, b)
    assert result.rows[0].al_a == pytest.approx(load_run(a).summary_for(3)["al_mean"])
    assert not any("partial" in w for w in result.warnings)


def test_a_run_compared_with_itself_says_so(runs):
    a = runs["a"]
    for b in (a, a / "run.json"):
        result = CliRunner().invoke(cli, ["compare", str(a), str(b)])
        assert result.exit_code == 0, result.output
        [note] = result.stderr.splitlines()
        assert note.startswith("note:") and "are the same run" in note, note
        assert "no detectable change" in result.stdout  # and the table still prints
    data = json.loads(CliRunner().invoke(cli, ["compare", str(a), str(a), "--json"]).stdout)
    assert data["same_run"] is True and all(r["diff"] == 0 for r in data["rows"])
    other = CliRunner().invoke(cli, ["compare", str(a), str(runs["b"])])
    assert other.exit_code == 0 and "same run" not in other.output
    assert json.loads(invoke(a, runs["b"], "--json").stdout)["same_run"] is False
