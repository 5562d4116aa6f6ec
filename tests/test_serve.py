"""`alcheck serve` in-process: both dialects' per-request counts against PagedRunner.generate (the
oracle), /metrics against the sum over the requests served, bad requests, concurrency."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner
from alcheck.serve.app import create_app
from alcheck.serve.config import ServeConfig
from alcheck.serve.jobs import Job, JobQueue
from alcheck.serve.pair import ServedPair

K = 3
MAX_TOKENS = 40
CONTEXT = 2048  # the tiny target's max_position_embeddings


def make_engine(pair, k=K, max_batch_size=1, **tree) -> ServedPair:
    target, head = pair
    return ServedPair(
        target, proposer_for(head), "eagle", k, CONTEXT, "cpu", "float32", max_batch_size, **tree
    )


def make_client(pair, dialect, k=K, max_batch_size=1, topk=1, num_draft_tokens=None, **cfg) -> TestClient:
    target_dir = str(pair[0].path)
    config = ServeConfig(
        target=target_dir,
        draft="head",
        k=k,
        dialect=dialect,
        max_batch_size=max_batch_size,
        topk=topk,
        num_draft_tokens=num_draft_tokens,
        **cfg,
    )
    engine = make_engine(pair, k, max_batch_size, topk=topk, num_draft_tokens=num_draft_tokens)
    return TestClient(create_app(engine, config))


def oracle(pair, prompt, k=K, max_tokens=MAX_TOKENS, temperature=0.0, seed=0, **tree):
    """PagedRunner.generate on this one prompt, with the server's runner settings."""
    target, head = pair
    cfg = RunnerConfig(num_spec_tokens=k, block_size=16, temperature=temperature, seed=seed, **tree)
    return PagedRunner(target.model, proposer_for(head), target.eos_token_ids, cfg).generate(
        [prompt], max_tokens
    )[0]


def check_histogram(hist, result, k):
    """hist[j] = steps with exactly j accepted, checked through the sums it must give back."""
    assert sum(hist) == result.steps
    assert sum(j * h for j, h in enumerate(hist)) == result.accepted
    assert [sum(hist[i + 1 :]) for i in range(k)] == result.accepted_per_pos


@pytest.fixture(scope="module")
def oracles(pair, prompts):
    return [oracle(pair, p) for p in prompts]


def test_oracle_covers_both_finish_reasons_and_tail_drafts(oracles):
    # the prompts must exercise EOS (drafts accepted past it still count) and max_tokens
    assert {r.finish_reason for r in oracles} == {"eos", "length"}
    assert any(r.finish_reason == "eos" and 1 + r.steps + r.accepted > len(r.output_ids) for r in oracles)


def test_vllm_counts_equal_the_runner(pair, prompts, oracles):
    with make_client(pair, "vllm") as client:
        for prompt, want in zip(prompts, oracles):
            reply = client.post(
                "/v1/completions",
                json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True},
            )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            choice, spec = body["choices"][0], body["metrics"]["speculative_decoding"]
            assert choice["token_ids"] == want.output_ids and choice["prompt_token_ids"] == prompt
            assert choice["finish_reason"] == {"eos": "stop", "length": "length"}[want.finish_reason]
            assert body["usage"] == {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(want.output_ids),
                "total_tokens": len(prompt) + len(want.output_ids),
            }
            assert len(spec["acceptance_histogram"]) == K + 1
            check_histogram(spec["acceptance_histogram"], want, K)
            assert spec["num_spec_steps"] == want.steps
            assert spec["num_accepted_draft_tokens"] == want.accepted
            assert spec["num_draft_tokens"] == K * want.steps and spec["num_spec_tokens"] == K
            assert spec["mean_acceptance_length"] == pytest.approx(1 + want.accepted / want.steps)
            assert spec["draft_acceptance_rate"] == pytest.approx(want.accepted / (K * want.steps))
        # without return_token_ids the ids stay out, as in vLLM
        plain = client.post(
            "/v1/completions", json={"prompt": prompts[0], "max_tokens": 4, "temperature": 0}
        ).json()
        assert "token_ids" not in plain["choices"][0]


def test_sglang_counts_equal_the_runner(pair, prompts, oracles):
    eos_ids = set(pair[0].eos_token_ids)
    with make_client(pair, "sglang") as client:
        for prompt, want in zip(prompts, oracles):
            reply = client.post(
                "/generate",
                json={
                    "input_ids": prompt,
                    "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0},
                },
            )
            assert reply.status_code == 200, reply.text
            body = reply.json()
            meta = body["meta_info"]
            assert body["output_ids"] == want.output_ids
            assert meta["prompt_tokens"] == len(prompt)
            assert meta["completion_tokens"] == len(want.output_ids)  # the prefill token and EOS included
            if want.finish_reason == "eos":
                assert meta["finish_reason"]["type"] == "stop" and meta["finish_reason"]["matched"] in eos_ids
            else:
                assert meta["finish_reason"] == {"type": "length", "length": MAX_TOKENS}
            assert meta["spec_verify_ct"] == want.steps
            assert meta["spec_num_correct_drafts"] == want.accepted
            assert meta["spec_num_proposed_drafts"] == K * want.steps
            hist = meta["spec_correct_drafts_histogram"]
            assert hist and hist[-1] > 0 and len(hist) <= K + 1  # grown to the largest count seen
            check_histogram(hist + [0] * (K + 1 - len(hist)), want, K)
            assert meta["spec_accept_rate"] == pytest.approx(want.accepted / (K * want.steps))
            # SGLang's biased AL: completion tokens (prefill token included) per verify step
            assert meta["spec_accept_length"] == pytest.approx(len(want.output_ids) / want.steps)
        info = client.get("/server_info").json()
        assert client.get("/get_server_info").json()["speculative_num_steps"] == K
        steps, accepted = sum(r.steps for r in oracles), sum(r.accepted for r in oracles)
        assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(1 + accepted / steps)
        assert (
            info["speculative_num_steps"],
            info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"],
            info["speculative_algorithm"],
        ) == (K, 1, K + 1, "EAGLE")
        assert info["version"].startswith("alcheck-serve ")
        model = client.get("/get_model_info").json()
        assert model["model_path"] == str(pair[0].path)
        assert model["vocab_size"] == pair[0].model.config.vocab_size


def test_sglang_tree_counts_equal_the_runner(pair, prompts):
    # EAGLE-2 trees: topk 2, T = 6 verified tokens per step (root included); the path is at most K long
    tree = {"topk": 2, "num_draft_tokens": 6}
    with make_client(pair, "sglang", **tree) as client:
        info = client.get("/server_info").json()
        assert (
            info["speculative_num_steps"],
            info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"],
        ) == (K, 2, 6)
        for prompt in prompts[:3]:
            want = oracle(pair, prompt, **tree)
            meta = client.post(
                "/generate",
                json={
                    "input_ids": prompt,
                    "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0},
                },
            ).json()["meta_info"]
            assert (meta["spec_verify_ct"], meta["spec_num_correct_drafts"]) == (want.steps, want.accepted)
            hist = meta["spec_correct_drafts_histogram"]
            check_histogram(hist + [0] * (K + 1 - len(hist)), want, K)
            assert meta["spec_num_proposed_drafts"] == 5 * want.steps  # SGLang: verify_ct * (T - 1)
            assert meta["spec_accept_rate"] == pytest.approx(want.accepted / (5 * want.steps))


def test_sglang_request_without_steps_has_no_spec_fields(pair, prompts):
    # max_new_tokens 1: the prefill token only, no verification step; SGLang then omits spec_* keys
    with make_client(pair, "sglang") as client:
        meta = client.post(
            "/generate",
            json={"input_ids": prompts[0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
        ).json()["meta_info"]
    assert meta["completion_tokens"] == 1
    assert not [key for key in meta if key.startswith("spec_")]


def test_sampling_with_seed_equals_the_runner(pair, prompts):
    want = oracle(pair, prompts[1], temperature=0.8, seed=7)
    other = oracle(pair, prompts[1], temperature=0.8, seed=8)
    assert (want.output_ids, want.steps) != (other.output_ids, other.steps)  # the seed matters here
    with make_client(pair, "vllm") as client:
        for _ in range(2):
            body = client.post(
                "/v1/completions",
                json={
                    "prompt": prompts[1],
                    "max_tokens": MAX_TOKENS,
                    "temperature": 0.8,
                    "seed": 7,
                    "return_token_ids": True,
                },
            ).json()
            assert body["choices"][0]["token_ids"] == want.output_ids
            check_histogram(body["metrics"]["speculative_decoding"]["acceptance_histogram"], want, K)


def counters(text: str) -> dict:
    """{(family, position or None): value} of the vLLM spec-decode counters, via prometheus_client's
    parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:spec_decode") and sample.name.endswith("_total"):
                assert sample.labels["engine"] == "0" and sample.labels["model_name"] == "served"
                out[(family.name, sample.labels.get("position"))] = sample.value
    return out


@pytest.mark.parametrize("per_request", [True, False])
def test_vllm_metrics_counters_sum_the_requests(pair, prompts, oracles, per_request):
    with make_client(pair, "vllm", model_name="served", per_request_metrics=per_request) as client:
        before = counters(client.get("/metrics").text)
        assert set(before.values()) == {0.0} and len(before) == 3 + K  # every family exposed from the start
        for prompt in prompts:
            body = client.post(
                "/v1/completions",
                json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "model": "served"},
            ).json()
            assert ("metrics" in body) == per_request
        after = counters(client.get("/metrics").text)
    steps = sum(r.steps for r in oracles)
    assert after[("vllm:spec_decode_num_drafts", None)] == steps
    assert after[("vllm:spec_decode_num_draft_tokens", None)] == K * steps
    assert after[("vllm:spec_decode_num_accepted_tokens", None)] == sum(r.accepted for r in oracles)
    for i in range(K):
        assert after[("vllm:spec_decode_num_accepted_tokens_per_pos", str(i))] == sum(
            r.accepted_per_pos[i] for r in oracles
        )


def test_vllm_models_version_and_text_prompts(pair, prompts):
    tokenizer = pair[0].tokenizer
    with make_client(pair, "vllm") as client:
        (model,) = client.get("/v1/models").json()["data"]
        assert model["id"] == str(pair[0].path)
        assert model["max_model_len"] == CONTEXT - (K - 1)  # the last step's drafts need K - 1 more
        assert model["vocab_size"] == pair[0].model.config.vocab_size
        assert client.get("/version").json()["version"].startswith("alcheck-serve ")
        assert client.get("/health").status_code == 200
        text = "the quick brown fox"
        ids = tokenizer.encode(text, add_special_tokens=False)
        by_text = client.post(
            "/v1/completions",
            json={"prompt": text, "max_tokens": 12, "temperature": 0, "return_token_ids": True},
        ).json()
        by_ids = client.post(
            "/v1/completions",
            json={"prompt": ids, "max_tokens": 12, "temperature": 0, "return_token_ids": True},
        ).json()
        assert by_text["choices"][0]["prompt_token_ids"] == ids
        assert by_text["choices"][0]["token_ids"] == by_ids["choices"][0]["token_ids"]
        assert by_text["metrics"] == by_ids["metrics"]


@pytest.mark.parametrize(
    "body, status, needle",
    [
        ({"prompt": [5, 6, 320], "max_tokens": 4}, 400, "token id 320"),
        ({"prompt": [5, -1], "max_tokens": 4}, 400, "token id -1"),
        ({"prompt": [], "max_tokens": 4}, 400, "empty"),
        ({"prompt": [5, 6], "max_tokens": CONTEXT - K}, 400, "maximum context length"),
        ({"prompt": [5, 6], "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": [5, 6], "n": 2}, 400, "n=2"),
        ({"prompt": [[5, 6], [7, 8]]}, 400, "one prompt per request"),
        ({"prompt": [5, 6], "temperature": "hot"}, 400, "temperature"),
        ({"max_tokens": 4}, 400, "prompt is required"),
        ({"prompt": [5, 6], "seed": -1}, 400, "seed must be at least 0"),
        ({"prompt": [5, 6], "model": "other"}, 404, "does not exist"),
    ],
)
def test_vllm_bad_requests(pair, body, status, needle):
    with make_client(pair, "vllm") as client:
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == status
        error = reply.json()["error"]
        assert needle in error["message"] and error["code"] == status
        assert client.post("/v1/completions", content=b"{not json").status_code == 400
        # the server still serves after a bad request; the counters saw nothing
        assert client.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("dialect, path", [("vllm", "/v1/completions"), ("sglang", "/generate")])
def test_a_deeply_nested_body_is_a_400_not_a_500(pair, dialect, path):
    """100,000 nested lists exceed Python's parser recursion: the client's error (issue 24)."""
    with make_client(pair, dialect) as client:
        reply = client.post(path, content=b"[" * 100_000 + b"]" * 100_000)
        assert reply.status_code == 400, reply.text
        assert "too deeply" in reply.text
        assert client.post(path, content=b'{"prompt": ' + b"[" * 100_000).status_code == 400


def test_sglang_prompt_at_the_context_limit(pair):
    # prompt + max_new_tokens == max_model_len fits exactly; one more does not
    limit = CONTEXT - (K - 1)
    with make_client(pair, "sglang") as client:
        fits = client.post(
            "/generate",
            json={"input_ids": [7] * (limit - 2), "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
        )
        assert fits.status_code == 200, fits.text
        over = client.post(
            "/generate",
            json={"input_ids": [7] * (limit - 1), "sampling_params": {"max_new_tokens": 2, "temperature": 0}},
        )
        assert over.status_code == 400 and "maximum context length" in over.json()["error"]["message"]
        both = client.post("/generate", json={"input_ids": [5], "text": "hi"})
        assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]
        bad = client.post("/generate", json={"input_ids": [5, 999]})
        assert bad.status_code == 400 and "token id 999" in bad.json()["error"]["message"]


class RecordingEngine:
    """The real engine, noting which prompts shared each runner call."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.max_batch_size = engine.max_batch_size

    def generate(self, prompts, max_tokens, temperature=0.0, seed=0):
        self.calls.append((len(prompts), temperature))
        return self.engine.generate(prompts, max_tokens, temperature, seed)


def test_scheduler_batches_only_greedy_requests_alike(pair, prompts, oracles):
    engine = RecordingEngine(make_engine(pair, max_batch_size=3))
    scheduler = JobQueue(engine)
    jobs = [Job(p, MAX_TOKENS) for p in prompts[:4]]
    sampled = Job(prompts[4], MAX_TOKENS, temperature=0.8, seed=7)
    shorter = Job(prompts[5], 10)
    for job in (jobs[0], sampled, jobs[1], shorter, jobs[2], jobs[3]):
        scheduler.submit(job)  # all waiting before the worker starts
    scheduler.start()
    try:
        results = [j.future.result(timeout=60) for j in jobs]
        sampled_result, shorter_result = sampled.future.result(timeout=60), shorter.future.result(timeout=60)
    finally:
        scheduler.stop()
    # greedy, same max_tokens: batched up to 3; the sampled and the shorter request ran alone
    assert engine.calls == [(3, 0.0), (1, 0.8), (1, 0.0), (1, 0.0)]
    for result, want in zip(results, oracles):  # batching changed no count (greedy float32)
        assert (result.output_ids, result.steps, result.accepted_per_pos) == (
            want.output_ids,
            want.steps,
            want.accepted_per_pos,
        )
    want = oracle(pair, prompts[4], temperature=0.8, seed=7)
    assert (sampled_result.output_ids, sampled_result.accepted_per_pos) == (
        want.output_ids,
        want.accepted_per_pos,
    )
    want = oracle(pair, prompts[5], max_tokens=10)
    assert (shorter_result.output_ids, shorter_result.accepted_per_pos) == (
        want.output_ids,
        want.accepted_per_pos,
    )


@pytest.mark.parametrize("max_batch_size", [1, 4])
def test_parallel_requests_over_http_equal_sequential(pair, prompts, oracles, max_batch_size):
    import httpx

    from alcheck.serve.listen import start_in_thread

    config = ServeConfig(
        target=str(pair[0].path), draft="head", k=K, dialect="vllm", max_batch_size=max_batch_size
    )
    server = start_in_thread(create_app(make_engine(pair, max_batch_size=max_batch_size), config))
    replies: dict[int, dict] = {}
    try:

        def ask(i):
            with httpx.Client(base_url=server.url, timeout=60) as client:
                replies[i] = client.post(
                    "/v1/completions",
                    json={
                        "prompt": prompts[i],
                        "max_tokens": MAX_TOKENS,
                        "temperature": 0,
                        "return_token_ids": True,
                    },
                ).json()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        server.stop()
    assert not server.thread.is_alive()
    for i in range(4):
        want = oracles[i]
        assert replies[i]["choices"][0]["token_ids"] == want.output_ids
        check_histogram(replies[i]["metrics"]["speculative_decoding"]["acceptance_histogram"], want, K)


class FailingEngine:
    """A runner failure mid-request (here: non-finite logits at step 3)."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, max_tokens, temperature=0.0, seed=0):
        from alcheck.runner.paged import NonFiniteLogits

        raise NonFiniteLogits(0, 3)


@pytest.mark.parametrize(
    "dialect, path, body",
    [
        ("vllm", "/v1/completions", {"prompt": [5, 6], "max_tokens": 4}),
        ("sglang", "/generate", {"input_ids": [5, 6]}),
    ],
)
def test_runner_failure_is_a_500_naming_it(pair, dialect, path, body):
    config = ServeConfig(target="t", draft="d", k=K, dialect=dialect)
    with TestClient(create_app(FailingEngine(make_engine(pair)), config)) as client:
        reply = client.post(path, json=body)
        assert reply.status_code == 500
        assert "not finite" in reply.json()["error"]["message"]
        assert client.get("/health").status_code == 200  # the server lives on
