"""`alcheck serve --method ngram` stands in for vLLM's n-gram server: it counts as vLLM does (only the
steps that drafted are in num_drafts and the histogram), and `alcheck run --engine vllm --method
ngram` against it gives the built-in runner's rows, per-request metrics and /metrics counters
alike. Bad serve input for n-gram is one line, exit 2."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import invoke

K = 3
SIZES = ["--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]
RUN = ["--ks", str(K), "--repeats", "1", "--limit", "4", "--max-tokens", "48", "--protocol", "eagle-repo"]
COLUMNS = [
    "question_id",
    "turn",
    "generated_tokens",
    "steps",
    "drafted_steps",
    "accepted",
    "accepted_per_pos",
]


def ngram_server(target: str, **settings):
    from alcheck.serve.app import create_app
    from alcheck.serve.config import ServeConfig
    from alcheck.serve.listen import start_in_thread
    from alcheck.serve.pair import load_served_pair

    cfg = ServeConfig(
        target=target,
        draft="",
        k=K,
        dialect="vllm",
        port=0,
        method="ngram",
        prompt_lookup_min=1,
        prompt_lookup_max=3,
        **settings,
    )
    return start_in_thread(create_app(load_served_pair(cfg), cfg))


def rows(out) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False)[COLUMNS]


@pytest.fixture(scope="module")
def builtin(pair_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ngram-serve") / "builtin"
    result = invoke(
        ["run", "--target", str(pair_dirs[0]), "--method", "ngram", *SIZES, *RUN, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("per_request_metrics", [True, False], ids=["per-request", "counters"])
def test_engine_rows_through_serve_equal_the_builtin_runner(
    pair_dirs, builtin, tmp_path, per_request_metrics
):
    server = ngram_server(str(pair_dirs[0]), per_request_metrics=per_request_metrics)
    try:
        out = tmp_path / "engine"
        args = ["run", "--target", str(pair_dirs[0]), "--engine", "vllm", "--endpoint", server.url]
        result = invoke([*args, "--method", "ngram", *SIZES, *RUN, "--out", str(out)])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    want = rows(builtin)
    assert (want.steps.astype(int) > want.drafted_steps.astype(int)).any()  # plain steps occur at all
    pd.testing.assert_frame_equal(rows(out), want)


def test_the_vllm_dialect_counts_only_the_steps_that_drafted(pair_dirs):
    import httpx

    server = ngram_server(str(pair_dirs[0]))
    try:
        body = {
            "prompt": [5, 6, 7, 5, 6, 7, 5, 6],
            "max_tokens": 24,
            "temperature": 0,
            "return_token_ids": True,
        }
        spec = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).json()["metrics"][
            "speculative_decoding"
        ]
    finally:
        server.stop()
    assert spec["num_spec_steps"] == sum(spec["acceptance_histogram"]) == len(spec["per_step_drafted"])
    assert all(d > 0 for d in spec["per_step_drafted"])  # plain steps are in none of vLLM's numbers
    assert spec["num_draft_tokens"] == sum(spec["per_step_drafted"])
    assert spec["num_accepted_draft_tokens"] == sum(spec["per_step_accepted"])


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--method", "ngram", "--draft", "HEAD"], ["--draft HEAD with --method ngram", "drop --draft"]),
        (
            ["--method", "ngram", "--dialect", "sglang"],
            ["SGLang's NGRAM is another algorithm", "--dialect vllm"],
        ),
        (["--method", "ngram", "--prompt-lookup-min", "4", "--prompt-lookup-max", "2"], ["larger than"]),
        (["--prompt-lookup-max", "3", "--draft", "HEAD"], ["sets n-gram drafting", "--method ngram"]),
        ([], ["--draft is missing", "--method ngram"]),
    ],
)
def test_bad_ngram_serve_input_is_one_line(pair_dirs, extra, needles):
    args = ["serve", "--target", str(pair_dirs[0]), "--k", "3", "--port", "0"]
    if "--dialect" not in extra:
        args += ["--dialect", "vllm"]
    result = invoke([*args, *extra])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_a_run_without_method_replays_the_sizes_the_server_names(pair_dirs, builtin, tmp_path):
    """alcheck serve's /version names its n-gram sizes (1..3, not vLLM's default 5..5): a run that
    states no method replays the server's own rule and gets the built-in rows."""
    server = ngram_server(str(pair_dirs[0]))
    try:
        out = tmp_path / "unstated"
        args = ["run", "--target", str(pair_dirs[0]), "--engine", "vllm", "--endpoint", server.url]
        result = invoke([*args, *RUN, "--out", str(out)])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    pd.testing.assert_frame_equal(rows(out), rows(builtin))
