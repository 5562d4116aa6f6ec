"""The one decision rule (metrics/verdict.py) and the run-to-run noise it uses (metrics/noise.py).

Oracles: scipy's t distribution (when installed), Holm's procedure by hand, the simulation
model's exact run-to-run SD (metrics/simulate.Arm.run_sd), and constructed runs whose truth is
known: no change, a change below the tolerance, a credible change above it, noise alone."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fake_runs import make_meta, make_questions, reference, write_run_dir

from alcheck.metrics import verdict as V
from alcheck.metrics.distributions import t_cdf, t_quantile
from alcheck.metrics.noise import (
    Noise,
    combine,
    declared_deterministic,
    paired_noise,
    reference_noise,
    rounding_sd,
    run_noise,
    summary_noise,
)
from alcheck.metrics.simulate import TRUE_AL, Arm, QuestionSet, calibrate
from alcheck.report.compare import compare_runs
from alcheck.report.gate import gate
from alcheck.report.table import comparison_rows

KS = sorted(TRUE_AL)


# --------------------------------------------------------------------------- distributions


# scipy.stats.t.ppf(0.975, df) for df = 3, 15, 79 (published t tables agree to 3 decimals)
T_975 = {3: 3.1824463052837078, 15: 2.131449545559776, 79: 1.9904502102301285}


def test_t_quantiles_match_the_tables():
    for df, t in T_975.items():
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-7)
        assert t_quantile(0.025, df) == pytest.approx(-t, abs=1e-7)
        assert t_cdf(t, df) == pytest.approx(0.975, abs=1e-12)
    assert t_quantile(0.975, None) == pytest.approx(1.959964, abs=1e-6)
    assert t_cdf(1.959964, 1e9) == pytest.approx(0.975, abs=1e-6)  # huge df: the normal


def test_t_distribution_closed_forms():
    # df = 1 is Cauchy: F(t) = 1/2 + atan(t)/pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-3.0, -0.5, 0.0, 1.2, 40.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


# --------------------------------------------------------------------------- Holm and p-values


def test_holm_by_hand():
    # sorted p: 0.01 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2 -> stop
    assert V.holm([0.03, 0.01, 0.2, 0.012]) == [False, True, False, True]
    assert V.holm([0.04, 0.04]) == [False, False]  # 0.04 > 0.025: nothing
    assert V.holm([0.04]) == [True]
    assert V.holm([]) == []


def test_p_value_sides_and_deterministic():
    noise = Noise(0.01, None, "x")
    assert V.p_value(-0.0196, noise, "less") == pytest.approx(0.025, abs=1e-3)
    assert V.p_value(-0.0196, noise, "greater") == pytest.approx(0.975, abs=1e-3)
    assert V.p_value(-0.0196, noise, "two-sided") == pytest.approx(0.05, abs=2e-3)
    exact = Noise(0.0, None, "deterministic", True)
    assert V.p_value(-1e-6, exact, "less") == 0.0
    assert V.p_value(1e-12, exact, "two-sided") == 1.0  # float noise of a ratio of counts
    assert V.p_value(-1e-6, exact, "greater") == 1.0
    assert V.p_value(-0.5, None, "less") == 1.0  # no noise estimate: never credible


def test_decide_needs_credible_and_beyond_tolerance():
    noise = Noise(0.001, None, "x")
    small, large, noisy = V.decide(
        [-0.01, -0.05, -0.05], [noise, noise, Noise(0.05, None, "x")], tolerance=0.02, side="less"
    )
    assert small.credible and not small.beyond_tolerance and not small.reported
    assert large.reported
    assert not noisy.credible and noisy.beyond_tolerance and not noisy.reported
    assert V.reference_verdict(small) == V.WITHIN_TOLERANCE
    assert V.reference_verdict(large) == V.BELOW
    assert V.reference_verdict(noisy) == V.WITHIN_NOISE
    [up] = V.decide([0.05], [noise], tolerance=0.02, side="two-sided")
    assert V.compare_verdict(up) == V.B_HIGHER and V.reference_verdict(up) == V.ABOVE
    with pytest.raises(ValueError):
        V.decide([0.1], [noise], tolerance=-1)


# --------------------------------------------------------------------------- noise estimators


def test_rounding_and_reference_noise():
    assert rounding_sd(2.43) == pytest.approx(0.01 / math.sqrt(12))
    assert rounding_sd(2.296) == pytest.approx(0.001 / math.sqrt(12))
    assert rounding_sd(1.9) == pytest.approx(0.01 / math.sqrt(12))  # a published 1.90
    assert reference_noise(2.09, 0.01).se == pytest.approx(math.hypot(0.01, 0.01 / math.sqrt(12)))
    assert "not published" in reference_noise(2.09, None).basis


def test_run_noise_matches_the_models_exact_sd():
    """E[se^2] of the repeat estimator = run_sd^2 / R for the simulation model."""
    rng = np.random.default_rng(1)
    questions = QuestionSet.draw(80, rng)
    arm = Arm.make(questions, 4, float(calibrate(questions, 4, [2.42])[0]))
    se2 = [run_noise(*arm.simulate(3, rng)[:2]).se ** 2 for _ in range(300)]
    assert np.mean(se2) == pytest.approx(arm.run_sd**2 / 3, rel=0.1)
    paired = [
        paired_noise(*arm.simulate(1, rng)[:2], *arm.simulate(1, rng)[:2])[1].se ** 2 for _ in range(300)
    ]
    assert np.mean(paired) == pytest.approx(2 * arm.run_sd**2, rel=0.1)


def test_run_noise_deterministic_declared_and_one_repeat():
    emitted = np.array([[30.0, 50.0], [30.0, 50.0]])
    steps = np.array([[10.0, 20.0], [10.0, 20.0]])
    assert run_noise(emitted, steps) == Noise(0.0, None, "deterministic: 2 repeats identical", True)
    single = run_noise(emitted[:1], steps[:1])
    assert "conservative" in single.basis and single.se > 0 and single.df == 1
    assert run_noise(emitted[:1], steps[:1], declared=True).deterministic
    noisy = np.array([[30.0, 50.0], [31.0, 50.0]])
    assert not run_noise(noisy, steps, declared=True).deterministic  # repeats disagree: measured
    meta = {
        "config": {"temperature": 0.0, "device": "auto", "dtype": "auto"},
        "environment": {"device": "cpu", "dtype": "float32"},
    }
    assert declared_deterministic(meta)
    assert not declared_deterministic({**meta, "environment": {"device": "cuda", "dtype": "float32"}})
    assert not declared_deterministic({**meta, "config": {"temperature": 0.7}})


def test_summary_noise_fallbacks():
    stored = {"al_noise": {"se": 0.004, "df": 150.0, "basis": "repeats ×3", "deterministic": False}}
    assert summary_noise(stored) == Noise(0.004, 150.0, "repeats ×3")
    spread = summary_noise({"al_repeats": [2.29, 2.31]})
    assert spread.se == pytest.approx(0.01) and spread.df == 1
    assert summary_noise({"al_repeats": [2.3, 2.3, 2.3]}).deterministic
    ci = summary_noise({"al_repeats": [2.3], "al_ci95": [2.2, 2.4]})
    assert ci.se == pytest.approx(0.2 / 3.919928) and "conservative" in ci.basis
    assert summary_noise({"al_repeats": [2.3], "al_ci95": [None, None]}) is None
    assert summary_noise({"al_repeats": [2.3]}, declared=True).deterministic
    assert combine(Noise(0.03, 10.0, "a"), Noise(0.04, None, "b")).se == pytest.approx(0.05)
    assert combine(Noise(0.03, 10.0, "a"), None) is None


# --------------------------------------------------------------------------- constructed runs


def _det_run(path, steps_by_q, accepted_by_q, k=3, repeats=3):
    """A run whose repeats are identical (deterministic), given per-question counts."""
    rows = []
    for repeat in range(repeats):
        for i, (s, a) in enumerate(zip(steps_by_q, accepted_by_q)):
            per_pos = [min(a, s)] + [0] * (k - 1)
            rest = a - per_pos[0]
            for j in range(1, k):
                per_pos[j] = min(rest, per_pos[j - 1])
                rest -= per_pos[j]
            rows.append(
                {
                    "k": k,
                    "repeat": repeat,
                    "question_id": 81 + i,
                    "turn": 1,
                    "category": "writing",
                    "prompt_tokens": 20,
                    "generated_tokens": s + a + 1,
                    "steps": s,
                    "drafted": s * k,
                    "accepted": a,
                    "accepted_per_pos": ";".join(map(str, per_pos)),
                }
            )
    questions = pd.DataFrame(rows)
    return write_run_dir(path, make_meta(questions, n_boot=200), questions)


BASE_STEPS = [100] * 20
BASE_ACCEPTED = [130] * 10 + [110] * 10  # AL = 1 + 2400 / 2000 = 2.2


def test_no_change(tmp_path):
    a = _det_run(tmp_path / "a", BASE_STEPS, BASE_ACCEPTED)
    b = _det_run(tmp_path / "b", BASE_STEPS, BASE_ACCEPTED)
    [row] = gate(b, a).rows
    assert row.diff == 0 and row.status == "pass" and row.noise.deterministic
    [cmp] = compare_runs(a, b).rows
    assert cmp.verdict == V.NO_CHANGE and cmp.ci95 == (0.0, 0.0)


def test_change_below_tolerance_is_credible_but_passes(tmp_path):
    """Deterministic runs: every question loses 1 accepted draft per 100 steps (AL -0.01)."""
    a = _det_run(tmp_path / "a", BASE_STEPS, BASE_ACCEPTED)
    b = _det_run(tmp_path / "b", BASE_STEPS, [x - 1 for x in BASE_ACCEPTED])
    result = gate(b, a)
    [row] = result.rows
    assert row.diff == pytest.approx(-0.01) and row.credible and not row.regression
    assert row.status == "pass (drop within tolerance)" and result.exit_code == 0
    assert "deterministic" in row.basis
    [cmp] = compare_runs(a, b).rows
    assert cmp.verdict == V.WITHIN_TOLERANCE
    assert gate(b, a, tolerance=0.005).exit_code == 1  # the same drop beyond a smaller tolerance


def test_credible_change_above_tolerance(tmp_path):
    a = _det_run(tmp_path / "a", BASE_STEPS, BASE_ACCEPTED)
    b = _det_run(tmp_path / "b", BASE_STEPS, [x - 5 for x in BASE_ACCEPTED])
    result = gate(b, a)
    assert result.rows[0].regression and result.exit_code == 1
    assert result.rows[0].diff == pytest.approx(-0.05)
    assert [r.verdict for r in compare_runs(a, b).rows] == [V.A_HIGHER]
    assert [r.verdict for r in compare_runs(b, a).rows] == [V.B_HIGHER]
    meta = make_meta(pd.read_csv(b / "questions.csv"))
    [row] = comparison_rows({**meta, "references": [reference("ref", {3: 2.2})]})
    assert row["references"][0]["verdict"] == V.BELOW  # 2.15 vs 2.20, deterministic run


def test_noise_without_change_is_not_reported(tmp_path):
    """Two noisy runs of the same true AL (every step redrawn, one repeat): the first seeded
    pair whose K=5 point difference exceeds the tolerance, which the old rule (point estimate
    below -tolerance) failed. The decision rule calls it noise."""
    for seed in range(1, 60):
        qa = make_questions({5: 2.48}, n_questions=16, repeats=1, seed=seed)
        qb = make_questions({5: 2.48}, n_questions=16, repeats=1, seed=1000 + seed)
        al = [(q.steps.sum() + q.accepted.sum()) / q.steps.sum() for q in (qa, qb)]
        if al[1] - al[0] < -0.02:
            break
    else:
        pytest.fail("no seeded pair differs by more than the tolerance")
    a = write_run_dir(tmp_path / "a", make_meta(qa, n_boot=200), qa)
    b = write_run_dir(tmp_path / "b", make_meta(qb, n_boot=200), qb)
    [row] = gate(b, a).rows
    assert row.diff < -0.02 and not row.credible and row.status == "pass"
    assert compare_runs(a, b).rows[0].verdict == V.NO_CHANGE


# --------------------------------------------------------------------------- simulated error rates


def _binomial_upper(rate, n, z=3.0):
    return rate + z * math.sqrt(rate * (1 - rate) / n)


@pytest.fixture(scope="module")
def questions():
    return QuestionSet.draw(80, np.random.default_rng(7))


@pytest.fixture(scope="module")
def arms(questions):
    return {k: Arm.make(questions, k, float(calibrate(questions, k, [TRUE_AL[k]])[0])) for k in KS}


def test_gate_family_wise_false_alarms_within_binomial_error(arms):
    """No true change, 80 questions x 3 repeats on both sides, five Ks: the gate's family-wise
    false-alarm rate is at most 5% (within 3 binomial SE), and the per-K one-sided tests are
    not so conservative that they never fire."""
    rng = np.random.default_rng(11)
    reps, any_alarm, raw = 300, 0, 0
    for _ in range(reps):
        diffs, noises = [], []
        for k in KS:
            base, run = arms[k].simulate(3, rng), arms[k].simulate(3, rng)
            d, n = paired_noise(base[0], base[1], run[0], run[1])
            diffs.append(d)
            noises.append(n)
        decisions = V.decide(diffs, noises, tolerance=0.0, side="less")
        any_alarm += any(d.reported for d in decisions)
        raw += sum(V.p_value(d, n, "less") < 0.05 for d, n in zip(diffs, noises))
    assert any_alarm / reps <= _binomial_upper(0.05, reps)
    # each unadjusted one-sided 5% test fires about 5% of the time
    assert abs(raw / (reps * len(KS)) - 0.05) <= 3 * math.sqrt(0.05 * 0.95 / (reps * len(KS)))


def test_reference_verdict_false_alarms_and_power(questions, arms):
    """A reference published as the true AL (2 decimals, no stated noise); our run 80 q x 3
    repeats: family-wise false alarms <= 5%, and a true 0.05 drop is found at every K."""
    rng = np.random.default_rng(12)
    reps, alarms, found = 200, 0, np.zeros(len(KS))
    lower = {k: Arm.make(questions, k, float(calibrate(questions, k, [TRUE_AL[k] - 0.05])[0])) for k in KS}
    for _ in range(reps):
        for arm_set, tally in ((arms, "null"), (lower, "drop")):
            diffs, noises = [], []
            for k in KS:
                emitted, steps, _ = arm_set[k].simulate(3, rng)
                value = round(arms[k].truth, 2)
                diffs.append(emitted.sum() / steps.sum() - value)
                noises.append(combine(run_noise(emitted, steps), reference_noise(value, None)))
            decisions = V.decide(diffs, noises, tolerance=0.02, side="two-sided")
            if tally == "null":
                alarms += any(d.reported for d in decisions)
            else:
                found += [V.reference_verdict(d) == V.BELOW for d in decisions]
    assert alarms / reps <= _binomial_upper(0.05, reps)
    assert (found / reps >= [0.9, 0.9, 0.9, 0.75, 0.75]).all()
