"""AL, per-position acceptance, bootstrap CIs, paired tests and verdicts: exact numbers."""

import json
import time

import numpy as np
import pandas as pd
import pytest
from fake_runs import al_of_p, make_questions
from hypothesis import given, settings
from hypothesis import strategies as st

from alcheck.metrics.acceptance import al_by, parse_per_pos, pooled_al, summarize
from alcheck.metrics.stats import paired_bootstrap, pooled_al_ci, ratio_ci


def rows(k, items):
    """items: (repeat, question_id, turn, category, steps, per_pos list) -> questions frame."""
    out = []
    for repeat, qid, turn, category, steps, per_pos in items:
        out.append(
            {
                "k": k,
                "repeat": repeat,
                "question_id": qid,
                "turn": turn,
                "category": category,
                "prompt_tokens": 10,
                "generated_tokens": 50,
                "steps": steps,
                "drafted": steps * k,
                "accepted": sum(per_pos),
                "accepted_per_pos": ";".join(map(str, per_pos)),
            }
        )
    return pd.DataFrame(out)


# K=2, two repeats, two questions. Repeat 0: steps 10+30, accepted (6+3)+(20+10)=39
# -> AL_0 = 79/40 = 1.975. Repeat 1: steps 10+10, accepted (5+1)+(8+4)=18 -> AL_1 = 38/20 = 1.9.
# Pooled: steps 60, accepted 57 -> AL = 117/60 = 1.95; per_position = [39/60, 18/60].
HAND = rows(
    2,
    [
        (0, 81, 1, "writing", 10, [6, 3]),
        (0, 82, 1, "math", 30, [20, 10]),
        (1, 81, 1, "writing", 10, [5, 1]),
        (1, 82, 1, "math", 10, [8, 4]),
    ],
)
CELLS = [
    {"k": 2, "repeat": 0, "wall_s": 2.0, "generated_tokens": 100, "steps": 40, "slot_violations": 0},
    {"k": 2, "repeat": 1, "wall_s": 3.0, "generated_tokens": 400, "steps": 20, "slot_violations": 2},
    {"k": 1, "repeat": 0, "wall_s": 9.0, "generated_tokens": 9, "steps": 9},
]


def test_summarize_exact_numbers():
    [entry] = summarize(HAND, CELLS, n_boot=200)
    assert entry["k"] == 2
    assert entry["al_mean"] == pytest.approx(117 / 60)
    assert entry["al_repeats"] == pytest.approx([79 / 40, 38 / 20])
    assert entry["al_std"] == pytest.approx(np.std([79 / 40, 1.9], ddof=1))
    assert entry["per_position"] == pytest.approx([39 / 60, 18 / 60])
    assert entry["al_mean"] == pytest.approx(1 + sum(entry["per_position"]))
    assert entry["tokens_per_s"] == pytest.approx(500 / 5.0)  # only K=2 cells
    assert entry["slot_violations"] == 2
    assert "lossless_rate" not in entry
    lo, hi = entry["al_ci95"]
    assert lo <= entry["al_mean"] <= hi
    # two questions: question 81 alone = (20+15)/20 = 1.75, 82 alone = (40+42)/40 = 2.05
    assert lo >= 1.75 - 1e-12 and hi <= 2.05 + 1e-12
    json.dumps(entry, allow_nan=False)


def test_summarize_single_repeat_lossless_and_no_cells():
    frame = HAND[HAND["repeat"] == 0].assign(identical=[1, 0])
    [entry] = summarize(frame, [], n_boot=100)
    assert entry["al_std"] == 0.0
    assert entry["al_repeats"] == pytest.approx([79 / 40])
    assert entry["tokens_per_s"] is None
    assert entry["lossless_rate"] == pytest.approx(0.5)
    assert "slot_violations" not in entry
    assert summarize(HAND.iloc[0:0], CELLS) == []


def test_summarize_fake_run_consistent_and_sorted():
    q = make_questions({3: 2.32, 1: 1.71, 2: 2.13}, n_questions=40, turns=2, repeats=2)
    summary = summarize(q, [], n_boot=300)
    assert [e["k"] for e in summary] == [1, 2, 3]
    for e in summary:
        qk = q[q["k"] == e["k"]]
        # recomputed from the raw columns, the way a user would
        assert e["al_mean"] == pytest.approx((qk.steps.sum() + qk.accepted.sum()) / qk.steps.sum())
        assert e["al_mean"] == pytest.approx(1 + sum(e["per_position"]), abs=1e-12)
        assert len(e["per_position"]) == e["k"]
        assert all(a >= b for a, b in zip(e["per_position"], e["per_position"][1:]))
        assert min(e["al_repeats"]) - 1e-12 <= e["al_mean"] <= max(e["al_repeats"]) + 1e-12
        assert e["al_ci95"][0] < e["al_mean"] < e["al_ci95"][1]
    # the fake hits the requested AL within sampling noise
    assert [round(e["al_mean"], 1) for e in summary] == [1.7, 2.1, 2.3]


def test_ci_of_one_k_does_not_depend_on_other_ks():
    q = make_questions({1: 1.7, 2: 2.1}, n_questions=20, repeats=1)
    both = summarize(q, [], n_boot=300)
    alone = summarize(q[q["k"] == 2], [], n_boot=300)
    assert both[1] == alone[0]


def test_parse_per_pos():
    got = parse_per_pos(pd.Series(["3;2;1", "4", 5, None, "0;0"]), k=3)
    assert got.tolist() == [[3, 2, 1], [4, 0, 0], [5, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert parse_per_pos(["1;2", "7"]).shape == (2, 2)
    assert parse_per_pos([[4, 1], (2,), np.array([3, 3])], k=2).tolist() == [[4, 1], [2, 0], [3, 3]]
    with pytest.raises(ValueError, match="more than K=1"):
        parse_per_pos(["1;2"], k=1)
    with pytest.raises(ValueError, match="not integers"):
        parse_per_pos(["1;x"], k=2)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 40), st.lists(st.integers(0, 4), min_size=3, max_size=3)),
        min_size=1,
        max_size=12,
    )
)
def test_al_is_one_plus_sum_of_per_position(gens):
    """For any per-step acceptance histogram, AL == 1 + Σ per_position and al_mean is the
    steps-weighted mean of the per-repeat ALs."""
    k, items = 3, []
    for i, (repeat, steps, raw) in enumerate(gens):
        # a valid histogram: counts of steps with a >= 1, >= 2, >= 3 are non-increasing, <= steps
        counts = sorted((min(c * steps // 4, steps) for c in raw), reverse=True)
        items.append((repeat, 100 + i, 1, "x", steps, counts))
    frame = rows(k, items)
    [entry] = summarize(frame, [], n_boot=50)
    assert entry["al_mean"] == pytest.approx(1 + sum(entry["per_position"]))
    per_rep = frame.groupby("repeat")["steps"].sum().to_numpy()
    assert entry["al_mean"] == pytest.approx(np.average(entry["al_repeats"], weights=per_rep))


def test_bootstrap_resamples_questions_not_rows():
    q = make_questions({2: 2.1}, n_questions=30, repeats=1)
    ci_one = pooled_al_ci(q, n_boot=500, seed=3)
    # a second identical repeat adds rows but no new questions: the cluster CI is unchanged,
    # a row-level bootstrap would (wrongly) shrink it by ~sqrt(2)
    doubled = pd.concat([q, q.assign(repeat=1)], ignore_index=True)
    assert pooled_al_ci(doubled, n_boot=500, seed=3) == pytest.approx(ci_one)
    assert pooled_al_ci(q, n_boot=500, seed=3) == ci_one  # deterministic
    assert pooled_al_ci(q, n_boot=500, seed=4) != ci_one


def test_bootstrap_is_fast():
    emitted = np.random.default_rng(0).integers(100, 300, 80).astype(float)
    steps = emitted / 2.2
    start = time.perf_counter()
    ratio_ci(emitted, steps, n_boot=2000, seed=0)
    assert time.perf_counter() - start < 0.5


def test_ci_covers_true_al_in_simulation():
    """Questions draw p from {0.4, 0.8}; every question has 50 steps, so the true pooled AL is
    the mean of AL(p). The (studentized) 95% interval must cover it about 95% of the time."""
    rng = np.random.default_rng(11)
    k, n_q, n_steps, sims = 3, 40, 50, 200
    truth = float(np.mean(al_of_p(np.array([0.4, 0.8]), k)))
    covered = 0
    for _ in range(sims):
        p = rng.choice([0.4, 0.8], size=n_q)
        a = np.minimum(k, np.floor(np.log(rng.random((n_q, n_steps))) / np.log(p)[:, None]))
        emitted = (1 + a).sum(axis=1)
        lo, hi = ratio_ci(emitted, np.full(n_q, float(n_steps)), n_boot=500, seed=int(rng.integers(1 << 30)))
        covered += lo <= truth <= hi
    assert 0.9 <= covered / sims <= 0.99


def test_studentized_ci_covers_at_16_questions():
    """The audit: the percentile interval covers ~91% at 16 questions. With new questions from
    the simulation model's population each time, the studentized interval is near 95%."""
    from alcheck.metrics.simulate import Arm, QuestionSet, calibrate

    rng = np.random.default_rng(5)
    population = QuestionSet.draw(50_000, rng)
    base = float(calibrate(population, 5, [2.48])[0])
    truth = Arm.make(population, 5, base).truth
    covered = {"studentized": 0, "percentile": 0}
    sims = 300
    for i in range(sims):
        emitted, steps, _ = Arm.make(QuestionSet.draw(16, rng), 5, base).simulate(1, rng)
        for method in covered:
            lo, hi = ratio_ci(emitted[0], steps[0], n_boot=1000, seed=i, method=method)
            covered[method] += lo <= truth <= hi
    assert 0.925 <= covered["studentized"] / sims <= 0.98
    assert covered["studentized"] > covered["percentile"]


def test_paired_bootstrap_exact_cases():
    a = rows(2, [(0, 81, 1, "w", 10, [5, 2]), (0, 82, 1, "m", 20, [10, 5]), (0, 83, 1, "m", 10, [1, 0])])
    same = paired_bootstrap(a, a, n_boot=300)
    assert same.diff == 0 and same.ci95 == (0.0, 0.0)
    # b: same steps, 3 more accepted on 81 and 82, plus a question a lacks (ignored)
    b = rows(
        2,
        [
            (0, 81, 1, "w", 10, [6, 4]),
            (0, 82, 1, "m", 20, [11, 7]),
            (0, 83, 1, "m", 10, [1, 0]),
            (0, 99, 1, "m", 50, [0, 0]),
        ],
    )
    res = paired_bootstrap(a, b, n_boot=300, seed=1)
    assert res.n_units == 3 and res.n_questions == 3
    assert res.al_a == pytest.approx((40 + 23) / 40)
    assert res.al_b == pytest.approx((40 + 29) / 40)
    assert res.diff == pytest.approx(6 / 40)
    assert res.ci95[0] >= 0  # b never lower on any question
    mirror = paired_bootstrap(b, a, n_boot=300, seed=1)
    assert mirror.diff == pytest.approx(-res.diff)
    assert mirror.ci95 == pytest.approx((-res.ci95[1], -res.ci95[0]))
    with pytest.raises(ValueError, match="no"):
        paired_bootstrap(a, b.assign(question_id=b.question_id + 1000))
    with pytest.raises(ValueError, match="several K"):
        paired_bootstrap(pd.concat([a, a.assign(k=3)]), b)


def test_paired_bootstrap_pools_repeats_and_matches_text_ids():
    a = rows(1, [(0, 81, 1, "w", 10, [5]), (1, 81, 1, "w", 30, [15]), (0, 82, 1, "w", 10, [2])])
    b = rows(1, [(0, "81", 1, "w", 20, [10]), (0, "82", 1, "w", 10, [2])])
    res = paired_bootstrap(a, b, n_boot=100)
    assert res.n_units == 2
    assert res.al_a == pytest.approx((50 + 22) / 50)
    assert res.al_b == pytest.approx((30 + 12) / 30)


def test_paired_bootstrap_is_fast_for_80_questions():
    a = make_questions({3: 2.3}, n_questions=80, turns=2, repeats=3, seed=1)
    b = make_questions({3: 2.3}, n_questions=80, turns=2, repeats=3, seed=2)
    start = time.perf_counter()
    paired_bootstrap(a, b, n_boot=2000)
    assert time.perf_counter() - start < 0.5


def test_summary_records_run_to_run_noise():
    """al_noise: the repeat noise of al_mean (per question across repeats); one repeat falls
    back to the question spread and says so; identical repeats are deterministic."""
    q = make_questions({3: 2.3}, n_questions=30, repeats=3, seed=4)
    [entry] = summarize(q, [], n_boot=100)
    noise = entry["al_noise"]
    assert noise["basis"] == "repeats ×3" and not noise["deterministic"] and noise["df"] > 30
    assert 0 < noise["se"] < entry["al_std"] * 2
    [single] = summarize(q[q.repeat == 0], [], n_boot=100)
    assert "conservative" in single["al_noise"]["basis"]
    [same] = summarize(pd.concat([q[q.repeat == 0], q[q.repeat == 0].assign(repeat=1)]), [], n_boot=100)
    assert same["al_noise"] == {
        "se": 0.0,
        "df": None,
        "basis": "deterministic: 2 repeats identical",
        "deterministic": True,
    }
    json.dumps(entry, allow_nan=False)


@pytest.mark.parametrize("method", ["studentized", "bca", "percentile"])
def test_ci_methods_agree_on_exact_cases(method):
    a = rows(
        2,
        [
            (0, 81, 1, "w", 10, [5, 2]),
            (0, 82, 1, "m", 20, [10, 5]),
            (0, 83, 1, "m", 10, [1, 0]),
            (0, 84, 1, "m", 12, [3, 1]),
        ],
    )
    same = paired_bootstrap(a, a, n_boot=300, method=method)
    assert same.ci95 == (0.0, 0.0)
    emitted = np.array([20.0, 35.0, 11.0, 16.0])
    lo, hi = ratio_ci(emitted, np.array([10.0, 20.0, 10.0, 12.0]), n_boot=500, method=method)
    assert lo < emitted.sum() / 52 < hi
    with pytest.raises(ValueError, match="unknown CI method"):
        ratio_ci(emitted, emitted, method="nope")


def test_al_by_category_and_turn():
    frame = pd.concat([HAND, rows(2, [(0, 81, 2, "writing", 20, [10, 0])])], ignore_index=True)
    cat = al_by(frame, ["category"])
    writing = cat[cat.category == "writing"].iloc[0]
    assert writing.al == pytest.approx((40 + 9 + 6 + 10) / 40)
    assert writing.n_questions == 1 and writing.steps == 40
    turn = al_by(frame, ["turn"], ci=True, n_boot=100)
    assert turn[turn.turn == 2].iloc[0].al == pytest.approx(1.5)
    assert {"al_ci_lo", "al_ci_hi"} <= set(turn.columns)
    assert pooled_al(frame) == pytest.approx((80 + 67) / 80)
    assert al_by(frame.iloc[0:0]).empty


def test_studentized_intervals_never_leave_the_values_the_statistic_can_take():
    """Four questions at K=2 once gave a CI of [1.62, 360645.69]: the bootstrap-t quantiles blow
    up when a resample repeats one question. A pooled AL is a weighted mean of the questions' own
    ratios, so no interval may leave [min, max] of them, nor [1, K+1]."""
    import numpy as np

    from alcheck.metrics.stats import _paired_ci, ratio_ci

    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(2, 6))
        steps = rng.integers(1, 40, n).astype(float)
        emitted = steps + rng.integers(0, 3, n) * rng.random(n) * steps  # AL in [1, 3] (K=2)
        emitted = np.minimum(np.round(emitted), 3 * steps)
        lo, hi = ratio_ci(emitted, steps, n_boot=300, seed=int(rng.integers(1000)))
        ratios = emitted / steps
        assert ratios.min() - 1e-12 <= lo <= hi <= ratios.max() + 1e-12
        steps_b = rng.integers(1, 40, n).astype(float)
        emitted_b = np.minimum(steps_b + np.round(rng.random(n) * 2 * steps_b), 3 * steps_b)
        dlo, dhi = _paired_ci(emitted, steps, emitted_b, steps_b, 300, 1, 0.95, "studentized")
        assert -2 - 1e-12 <= dlo <= dhi <= 2 + 1e-12
