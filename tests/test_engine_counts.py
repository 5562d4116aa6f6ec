"""The engine client's arithmetic and checks without a server: histograms, Prometheus counter
differences, run options, and compare's counting-difference flag (issue 14)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import expect_error

from alcheck.backends.engines import counters
from alcheck.config import RunConfig
from alcheck.metrics.histograms import from_histogram
from alcheck.report.engine_counting import TAIL, tail_counting_difference


def test_histogram_counts_match_a_direct_count():
    """Against the definition: steps that accepted exactly j drafts -> per-step list -> counts."""
    hist = [39, 1, 0, 3]  # vLLM PR #48915's example: AL 1.2326 over 43 steps
    per_step = [j for j, n in enumerate(hist) for _ in range(n)]
    steps, accepted, per_pos = from_histogram(hist, 3, "test")
    assert steps == len(per_step) == 43 and accepted == sum(per_step) == 10
    assert per_pos == [sum(a > i for a in per_step) for i in range(3)] == [4, 3, 3]
    assert round(1 + accepted / steps, 4) == 1.2326


def test_sglang_histogram_grown_to_the_largest_j_is_padded():
    assert from_histogram([2, 5], 4, "t") == (7, 5, [5, 0, 0, 0])
    assert from_histogram([], 2, "t") == (0, 0, [0, 0])
    assert from_histogram([1, 0, 0, 0, 0], 2, "t") == (1, 0, [0, 0])  # zeros beyond K are harmless


def test_a_histogram_beyond_k_or_not_counts_is_refused():
    expect_error(lambda: from_histogram([1, 0, 0, 2], 2, "srv"), "accepted 3 drafts, more than --ks 2")
    expect_error(lambda: from_histogram("x", 2, "srv"), "not a list of counts")
    expect_error(lambda: from_histogram([1, -1], 2, "srv"), "not a list of counts")


def vllm_metrics_text(drafts, draft_tokens, accepted, per_pos, generation, engines=("0",)) -> str:
    """/metrics text as vLLM's prometheus_client counters expose it (the library writes it)."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    families = {
        name: Counter(name, name, labels, registry=registry)
        for name in (counters.DRAFTS, counters.DRAFT_TOKENS, counters.ACCEPTED, counters.GENERATION)
    }
    pos = Counter(counters.PER_POS, "per pos", labels + ["position"], registry=registry)
    for engine in engines:  # data parallel: each engine counts its share; alcheck sums them
        share = 1 / len(engines)
        for name, value in (
            (counters.DRAFTS, drafts),
            (counters.DRAFT_TOKENS, draft_tokens),
            (counters.ACCEPTED, accepted),
            (counters.GENERATION, generation),
        ):
            families[name].labels("m", engine).inc(value * share)
        for i, value in enumerate(per_pos):
            pos.labels("m", engine, str(i)).inc(value * share)
    return generate_latest(registry).decode()


def test_counter_difference_of_one_request():
    before = counters.parse_metrics(vllm_metrics_text(10, 30, 12, [7, 4, 1], 50, engines=("0", "1")), "t")
    after = counters.parse_metrics(vllm_metrics_text(16, 48, 19, [11, 6, 2], 70, engines=("0", "1")), "t")
    assert before.k == 3 and before.has_spec
    assert counters.difference(before, after, 3, "t") == (6, 18, 7, [4, 2, 1])


def test_counter_differences_that_are_not_one_requests_are_refused():
    before = counters.parse_metrics(vllm_metrics_text(10, 30, 12, [7, 4, 1], 50), "t")
    restarted = counters.parse_metrics(vllm_metrics_text(2, 6, 1, [1, 0, 0], 5), "t")
    expect_error(lambda: counters.difference(before, restarted, 3, "t"), "the server restarted")
    other = counters.parse_metrics(
        vllm_metrics_text(12, 36, 15, [7, 4, 1], 60), "t"
    )  # accepted grew, positions not
    expect_error(lambda: counters.difference(before, other, 3, "t"), "is another client using this server")
    expect_error(lambda: counters.parse_metrics("garbage{{{ 1 2 3", "srv"), "not Prometheus text")
    assert not counters.parse_metrics("# nothing here\n", "t").has_spec


def test_counters_that_grew_by_more_than_one_request_are_another_clients():
    before = counters.parse_metrics(vllm_metrics_text(10, 30, 12, [7, 4, 1], 50), "t")
    alone = counters.parse_metrics(vllm_metrics_text(16, 48, 19, [11, 6, 2], 70), "t")
    counters.check_alone(before, alone, 20, "t")  # 20 tokens generated, 20 counted: this request alone
    expect_error(
        lambda: counters.check_alone(before, alone, 19, "srv"),
        "another client is using the server",
        "generation_tokens_total grew by 20",
        "to itself",
    )
    no_generation = counters.parse_metrics(vllm_metrics_text(30, 90, 12, [7, 4, 1], 0), "t")
    no_generation.generation = before.generation = None  # a server without the counter: steps still bound it
    expect_error(
        lambda: counters.check_alone(before, no_generation, 19, "srv"),
        "spec_decode_num_drafts_total grew by 20",
    )


def test_sglang_tree_drafted_is_steps_times_depth():
    """A tree (topk 4, 8 draft tokens, depth K=3): drafted = steps * K as the built-in runner writes it,
    not SGLang's spec_num_proposed_drafts ((8 - 1) per step)."""
    from alcheck.backends.engines.sglang import SglangDialect

    hist = [1, 2, 0, 1]  # 4 steps accepting 0, 1, 1, 3 drafts
    answer = {
        "text": "x",
        "output_ids": [5] * 10,
        "meta_info": {
            "prompt_tokens": 3,
            "completion_tokens": 10,
            "finish_reason": {"type": "length"},
            "spec_verify_ct": 4,
            "spec_correct_drafts_histogram": hist,
            "spec_num_correct_drafts": 5,
            "spec_num_proposed_drafts": 4 * 7,
        },
    }
    counts, has_metrics, _ = SglangDialect().parse(answer, [1, 2, 3], 3, "t")
    assert has_metrics and (counts.steps, counts.accepted, counts.accepted_per_pos) == (4, 5, [3, 1, 1])
    assert counts.drafted == counts.steps * 3 == 12


@pytest.mark.parametrize(
    "fields, needle",
    [
        (dict(engine="vllm", endpoints="http://h:1", ks=[1, 2]), "one server is one K"),
        (dict(engine="vllm"), "needs --endpoint URL"),
        (dict(engine="vllm", endpoints="h:1"), "not an http(s) URL"),
        (dict(engine="vllm", engine_cmd="vllm serve m"), "has no {port}"),
        (dict(engine="tgi", endpoints="http://h:1"), "--engine tgi"),
        (dict(endpoints="http://h:1"), "--endpoint needs --engine"),
        (
            dict(engine="sglang", endpoints="http://h:1", check_lossless=True),
            "--check-lossless with --engine tests the server's sampling above temperature 0",
        ),
        (dict(engine="sglang", endpoints="http://h:1", devices=["cpu", "cpu"]), "--devices is a setting"),
        (dict(engine="vllm", endpoints="http://h:1", concurrency=0), "--concurrency 0"),
    ],
)
def test_engine_options_are_validated(fields, needle):
    expect_error(lambda: RunConfig(target="t", draft="", **{"ks": [2], **fields}), needle)


def test_where_the_engine_runs_does_not_affect_results():
    one = RunConfig(target="t", draft="", ks=[2], engine="vllm", endpoints="http://a:1")
    two = RunConfig(
        target="t",
        draft="",
        ks=[2],
        engine="vllm",
        endpoints="http://b:2",
        concurrency=8,
        engine_cmd="x --port {port}",
    )
    assert one.result_settings() == two.result_settings()
    assert (
        RunConfig(target="t", draft="", ks=[2], engine="sglang", endpoints="http://a:1").result_settings()
        != one.result_settings()
    )


def rows(accepted, generated=(16, 12, 16), steps=(5, 4, 6)):
    return pd.DataFrame(
        {
            "question_id": [81, 82, 83],
            "turn": 1,
            "repeat": 0,
            "generated_tokens": list(generated),
            "steps": list(steps),
            "accepted": list(accepted),
        }
    )


def test_tail_counting_difference_is_recognised():
    # 1 + steps + accepted >= generated: counting the tail; == generated - 1 - steps: the tail cut
    counted, cut = rows([12, 9, 10]), rows([10, 7, 9])
    found = tail_counting_difference(counted, cut)
    assert found is not None and found.kind == TAIL and found.units == 3 and found.higher == "A"
    assert tail_counting_difference(cut, counted).higher == "B"
    assert "not a regression" in found.note(2)
    assert tail_counting_difference(counted, counted) is None  # nothing differs
    assert tail_counting_difference(counted, rows([10, 7, 8])) is None  # 8 is not the cut count for 83
    assert tail_counting_difference(counted, rows([10, 7, 9], steps=(5, 4, 7))) is None  # other steps: real
    assert tail_counting_difference(rows([12, 7, 10]), rows([10, 9, 9])) is None  # both directions: real


def test_compare_flags_the_tail_difference_instead_of_a_regression(tmp_path):
    from fake_runs import make_meta, write_run_dir

    from alcheck.report.compare import compare_runs

    base = pd.DataFrame(
        {
            "k": 2,
            "repeat": 0,
            "question_id": range(1, 21),
            "turn": 1,
            "category": "writing",
            "prompt_tokens": 40,
            "generated_tokens": 64,
            "steps": 25,
        }
    )
    counted = base.assign(accepted=[39 if q % 3 else 40 for q in range(1, 21)])  # some steps pass EOS
    cut = base.assign(accepted=64 - 1 - 25)
    frames = {}
    for name, frame, engine in (("builtin", counted, None), ("sglang", cut, "sglang")):
        frame = frame.assign(
            drafted=frame.steps * 2,
            accepted_per_pos=[f"{min(a, s)};{max(0, a - s)}" for a, s in zip(frame.accepted, frame.steps)],
        )
        meta = make_meta(frame)
        meta["config"]["engine"] = engine
        frames[name] = write_run_dir(tmp_path / name, meta, frame)
    result = compare_runs(frames["builtin"], frames["sglang"], n_boot=200)
    (row,) = result.rows
    assert row.diff < 0 and row.verdict == TAIL and "not a regression" in row.counting_note
    assert "engine None vs 'sglang'" in result.differences
    plain = compare_runs(frames["builtin"], frames["builtin"], n_boot=200)
    assert plain.rows[0].verdict != TAIL and plain.rows[0].counting_note is None
