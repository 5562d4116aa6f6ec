"""No step count left to chance (issue 48, item 4): an engine run whose counts leave the verification
steps uncertain never prints AL with exit 0.

vLLM counts a step only when it drafted. For n-gram drafting, a step whose context matched nothing is
a plain step it does not count, and the steps come from the tokens; when the last drafted step
accepted drafts past max_tokens (cut from the answer, kept in the accepted count) and other steps
drafted nothing, the tokens read low. A real vLLM CPU 0.32 (SmolLM2-135M, n-gram 1..3, K=3,
question 87, 96 tokens) showed it: alcheck counted 76 steps for an answer that took 78.

The fake vLLM here answers every prompt that way, by vLLM's n-gram rule (sizes 1..3, K=3): fresh
tokens (none in the prompt: no match, plain steps), then the answer's first token again, after which
the rule drafts the answer's next three tokens, all accepted, two of them past max_tokens. So an
answer of G tokens took G - 2 steps, and the tokens alone say G - 4 (or, where the method may skip
steps, anything from G - 4 to G - 1). The same fake runs in this process (--endpoint) and as an
--engine-cmd server process, so the method can come from the command as a user writes it.
"""

from __future__ import annotations

import json
import shlex
import sys

import pandas as pd
import pytest
from conftest import expect_error, invoke_run
from test_engine_client import fake_server  # noqa: F401 (fixture)

from alcheck.backends.engines.served_method import (
    EVERY_STEP,
    REPLAY,
    UNSETTLED,
    command_spec,
    resolve,
    steps_kind,
)
from alcheck.backends.engines.steps import most_steps, steps_from_tokens

pytest.importorskip("httpx")

K = 3
MAX_TOKENS = 24
RUN = ["--limit", "3", "--max-tokens", str(MAX_TOKENS), "--protocol", "vllm-example", "--reference", "none"]
RUN += ["--ks", str(K), "--repeats", "1"]
SIZES = ["--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]
NGRAM_SPEC = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}

# A vLLM-shaped server, stdlib only: run as a script (--engine-cmd) or its routes used in this process.
FAKE_VLLM = r'''
import argparse
import json
from wsgiref.simple_server import make_server

K = 3
FIRST_ID = 10  # fresh tokens from here up (the tiny tokenizer's special ids are below)


def crossing(prompt, max_tokens):
    """vLLM's n-gram rule (1..3, K=3) on a target that repeats its answer's start: max_tokens - 3
    fresh tokens (the prefill's, then plain steps: nothing matches), the first one again (a plain
    step), then one drafted step proposing the three tokens that followed it, all accepted: two of
    them past max_tokens. Steps: max_tokens - 2; one drafted, accepting 3."""
    seen, n = set(prompt), max_tokens - 3
    fresh = [t for t in range(FIRST_ID, 10_000) if t not in seen][:n]
    return fresh + fresh[:3], [3], [3]


def rejecting(prompt, max_tokens):
    """Fresh tokens only: two drafted steps (as a method alcheck cannot replay might draft them), the
    first accepting 2, the last accepting none; the rest plain. Steps: max_tokens - 3."""
    seen = set(prompt)
    return [t for t in range(FIRST_ID, 10_000) if t not in seen][:max_tokens], [2, 0], [3, 3]


ANSWERS = {"crossing": crossing, "rejecting": rejecting}


def make_routes(answer="crossing", detailed=False, probe_tokens=0, server_info=None):
    def completions(body):
        prompt = body["prompt"]
        if isinstance(prompt, str):  # the tokenizer round trip: only the count comes back
            return 200, {
                "choices": [{"index": 0, "text": "", "token_ids": [FIRST_ID], "finish_reason": "length"}],
                "usage": {"prompt_tokens": probe_tokens, "completion_tokens": 1},
            }
        ids, per_step, drafted = ANSWERS[answer](prompt, body["max_tokens"])
        hist = [per_step.count(j) for j in range(K + 1)]
        spec = {
            "acceptance_histogram": hist,
            "num_spec_steps": len(per_step),
            "num_accepted_draft_tokens": sum(per_step),
            "num_draft_tokens": sum(drafted),
            "num_spec_tokens": K,
        }
        if detailed:
            spec.update(per_step_accepted=per_step, per_step_drafted=drafted)
        return 200, {
            "choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": "length"}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids)},
            "metrics": {"speculative_decoding": spec},
        }

    routes = {
        "/health": (200, ""),
        "/v1/models": (200, {"data": [{"id": "m", "max_model_len": 2048}]}),
        "/version": (200, {"version": "0.32.0"}),
        "/v1/completions": (200, completions),
    }
    if server_info is not None:  # VLLM_SERVER_DEV_MODE=1
        routes["/server_info"] = (200, {"vllm_config": {"speculative_config": server_info}})
    return routes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--speculative-config")
    parser.add_argument("--answer", default="crossing")
    parser.add_argument("--detailed", action="store_true")
    parser.add_argument("--probe-tokens", type=int)
    args = parser.parse_args()
    routes = make_routes(args.answer, args.detailed, args.probe_tokens)

    def app(environ, start_response):  # one request at a time: the client sends them so (concurrency 1)
        status, body = routes.get(environ["PATH_INFO"], (404, {"detail": "Not Found"}))
        if environ["REQUEST_METHOD"] == "POST":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            status, body = body(json.loads(environ["wsgi.input"].read(size)))
        start_response(f"{status} -", [("Content-Type", "application/json")])
        return [(body if isinstance(body, str) else json.dumps(body)).encode()]

    make_server("127.0.0.1", args.port, app).serve_forever()


if __name__ == "__main__":
    main()
'''


def fake_vllm():
    space: dict = {}
    exec(compile(FAKE_VLLM, "fake_vllm", "exec"), space)  # noqa: S102 - the fake's own source, above
    return space


@pytest.fixture(scope="module")
def probe_tokens(pair_dirs):
    from alcheck.backends.engine_client import PROBE_TEXT
    from alcheck.prompts.tokenizer import load_tokenizer

    return len(load_tokenizer(pair_dirs[0], "target")(PROBE_TEXT).input_ids)


def run(pair_dirs, tmp_path, name, *extra):
    out = tmp_path / name
    result = invoke_run(["--target", str(pair_dirs[0]), "--engine", "vllm", *RUN, "--out", str(out), *extra])
    return out, result


def endpoint(fake_server, probe_tokens, **settings):  # noqa: F811
    return ["--endpoint", fake_server(fake_vllm()["make_routes"](probe_tokens=probe_tokens, **settings))]


def one_line(result, *needles) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def questions(out) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv")


def expect_true_steps(out, drafted_steps=1, accepted=3, plain_cut=2):
    """Every row: the steps the answer took (G - 2 for `crossing`), not what the tokens alone say."""
    rows = questions(out)
    assert len(rows) == 3 and (rows.generated_tokens == MAX_TOKENS).all()
    assert (rows.steps == rows.generated_tokens - 1 - accepted + plain_cut).all(), rows
    assert (rows.drafted_steps == drafted_steps).all() and (rows.accepted == accepted).all()
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "complete"
    (al,) = [entry["al_mean"] for entry in meta["summary"] if entry["k"] == K]
    want = 1 + rows.accepted.sum() / rows.steps.sum()
    assert al == pytest.approx(want) and al != pytest.approx(1 + 9 / (3 * (MAX_TOKENS - 4)))
    return meta


# -- the 76/78 case ---------------------------------------------------------------------------------


def test_the_fake_answers_read_low_from_the_tokens_alone():
    """The fake reproduces the shape: the tokens' fewest is 2 below the steps taken, and the counts
    alone allow up to 3 more; vLLM's n-gram rule, replayed, finds the steps taken."""
    from alcheck.backends.engines.replay import replay
    from alcheck.runner.proposers.ngram_rules import NgramSettings, propose

    prompt = [3, 5, 7, 5, 11]
    ids, per_step, _ = fake_vllm()["crossing"](prompt, MAX_TOKENS)
    found = replay(lambda ctx: propose(NgramSettings("vllm", 1, 3, 2048), ctx, K), prompt, ids)
    assert (found.steps, found.drafted_steps, found.accepted, found.past_end) == (MAX_TOKENS - 2, 1, 2, 1)
    low = steps_from_tokens(len(ids), sum(per_step), len(per_step), K, "t")
    assert low == MAX_TOKENS - 4 == found.steps - 2
    assert most_steps(len(ids), sum(per_step), len(per_step), K) == MAX_TOKENS - 1
    assert most_steps(len(ids), sum(per_step), len(per_step), K, last_accepted=3) == MAX_TOKENS - 1


def test_without_a_method_the_run_is_refused_in_one_line(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    out, result = run(pair_dirs, tmp_path, "unknown", *endpoint(fake_server, probe_tokens))
    line = one_line(result, "leaves 12 to 15 verification steps", "pass --method", "--prompt-lookup-min")
    assert "AL" not in line and not out.exists()  # refused at the probe, before anything is written


def test_per_step_lists_do_not_settle_it(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    """vLLM's `detailed` lists hold the drafted steps only (scheduler.py: observe() only for a step
    with scheduled drafts): the last one accepted 3, so up to 3 tokens may have been cut."""
    out, result = run(pair_dirs, tmp_path, "detailed", *endpoint(fake_server, probe_tokens, detailed=True))
    one_line(result, "leaves 12 to 15 verification steps", "pass --method")
    assert not out.exists()


def test_method_ngram_replays_the_rule(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    out, result = run(
        pair_dirs, tmp_path, "stated", *endpoint(fake_server, probe_tokens), "--method", "ngram", *SIZES
    )
    assert result.exit_code == 0, result.output
    meta = expect_true_steps(out)
    assert "steps replayed by the n-gram rule (--method)" in meta["environment"]["counting"]


def test_speculative_config_names_the_method(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    spec = json.dumps({**NGRAM_SPEC, "num_speculative_tokens": K})
    url = endpoint(fake_server, probe_tokens)
    out, result = run(pair_dirs, tmp_path, "spec", *url, "--speculative-config", spec)
    assert result.exit_code == 0, result.output
    expect_true_steps(out)


def test_a_stated_every_step_method_the_counts_contradict_is_refused(
    pair_dirs,
    tmp_path,
    fake_server,  # noqa: F811
    probe_tokens,
):
    """A config naming a draft model (which drafts at every step) over a server that skipped steps
    (another method, or vLLM's disable_by_batch_size): the fewest steps are not trusted."""
    spec = json.dumps({"model": str(pair_dirs[1]), "num_speculative_tokens": K})
    out, result = run(
        pair_dirs, tmp_path, "every", *endpoint(fake_server, probe_tokens), "--speculative-config", spec
    )
    line = one_line(result, "leaves 12 to 15 verification steps", "skipped drafting at some steps")
    assert "AL" not in line and not out.exists()


def test_a_dev_mode_server_names_the_method(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    """vLLM's /server_info (VLLM_SERVER_DEV_MODE=1) holds its speculative config, sizes resolved."""
    info = {**NGRAM_SPEC, "model": "ngram", "num_speculative_tokens": K}
    out, result = run(pair_dirs, tmp_path, "dev", *endpoint(fake_server, probe_tokens, server_info=info))
    assert result.exit_code == 0, result.output
    meta = expect_true_steps(out)
    assert "n-gram rule (vLLM's /server_info)" in meta["environment"]["counting"]


def test_a_server_info_that_fails_names_nothing(pair_dirs, tmp_path, fake_server, probe_tokens):  # noqa: F811
    routes = fake_vllm()["make_routes"](probe_tokens=probe_tokens)
    routes["/server_info"] = (500, {"detail": "collect_env failed"})
    _, result = run(pair_dirs, tmp_path, "dev-500", "--endpoint", fake_server(routes))
    one_line(result, "nothing names the method it serves", "pass --method")


def fake_cmd(probe_tokens, spec: dict | None, *extra) -> str:
    args = [sys.executable, "-c", FAKE_VLLM, "--probe-tokens", str(probe_tokens), *extra]
    command = shlex.join(args) + " --port {port}"
    if spec is not None:  # as a user writes it for vLLM: the JSON with {k} for alcheck to fill in
        text = json.dumps({**spec, "num_speculative_tokens": "__k__"}).replace('"__k__"', "{k}")
        command += f" --speculative-config {shlex.quote(text)}"
    return command


def test_the_engine_command_names_the_method(pair_dirs, tmp_path, probe_tokens):
    """No --method: the --engine-cmd's --speculative-config says ngram and its sizes; the rows are the
    replayed ones."""
    out, result = run(pair_dirs, tmp_path, "cmd", "--engine-cmd", fake_cmd(probe_tokens, NGRAM_SPEC))
    assert result.exit_code == 0, result.output
    meta = expect_true_steps(out)
    assert "n-gram rule (--engine-cmd's speculative config)" in meta["environment"]["counting"]


def test_an_engine_command_without_a_method_is_refused(pair_dirs, tmp_path, probe_tokens):
    out, result = run(pair_dirs, tmp_path, "cmd-none", "--engine-cmd", fake_cmd(probe_tokens, None))
    error = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and error.startswith("Error: ") and "pass --method" in error, result.output
    assert "leaves 12 to 15 verification steps" in error
    assert not (out / "questions.csv").exists() or questions(out).empty  # no row of uncertain steps


def test_a_method_that_cannot_be_replayed_is_refused(pair_dirs, tmp_path, probe_tokens):
    """The command says suffix decoding: it skips steps and nothing replays it."""
    cmd = fake_cmd(probe_tokens, {"method": "suffix"})
    _, result = run(pair_dirs, tmp_path, "suffix", "--engine-cmd", cmd)
    error = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and "cannot replay suffix (--engine-cmd's speculative config)" in error, (
        result.output
    )


def test_a_stated_method_the_command_contradicts_is_refused_before_anything_starts(pair_dirs, tmp_path):
    cmd = fake_cmd(1, NGRAM_SPEC)
    out, result = run(pair_dirs, tmp_path, "both", "--engine-cmd", cmd, "--method", "eagle")
    one_line(result, "--method says eagle but --engine-cmd's speculative config says ngram")
    assert not out.exists()
    cmd = fake_cmd(1, {**NGRAM_SPEC, "prompt_lookup_min": 2})
    _, result = run(pair_dirs, tmp_path, "sizes", "--engine-cmd", cmd, "--method", "ngram", *SIZES)
    one_line(result, "--prompt-lookup-min 1 --prompt-lookup-max 3 but", "serves n-gram sizes 2..3")


# -- per-step data ------------------------------------------------------------------------------------


def test_per_step_data_makes_the_steps_exact_where_the_last_drafted_step_accepted_none(
    pair_dirs,
    tmp_path,
    fake_server,  # noqa: F811
    probe_tokens,
):
    """The last drafted step accepted no draft: nothing was cut, so the steps are the tokens' count,
    whatever the method. Summary metrics (no per-step list) leave 13 to 15 for the probe's 16 tokens
    and are refused."""
    detailed = endpoint(fake_server, probe_tokens, answer="rejecting", detailed=True)
    out, result = run(pair_dirs, tmp_path, "zero", *detailed)
    assert result.exit_code == 0, result.output
    rows = questions(out)
    assert (rows.steps == MAX_TOKENS - 1 - 2).all() and (rows.drafted_steps == 2).all(), rows
    summary = endpoint(fake_server, probe_tokens, answer="rejecting")
    _, result = run(pair_dirs, tmp_path, "zero-summary", *summary)
    one_line(result, "leaves 13 to 15 verification steps")


def test_a_head_drafts_every_step_and_its_trace_is_the_steps():
    """With per-step data and a method that drafts at every step, the trace is every step's."""
    from alcheck.backends.engines.vllm import VllmDialect

    per_step = [1, 0, 3, 2]
    answer = {
        "choices": [
            {"text": "", "token_ids": list(range(20, 20 + 1 + 4 + 6 - 2)), "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9},
        "metrics": {
            "speculative_decoding": {
                "acceptance_histogram": [per_step.count(j) for j in range(4)],
                "num_spec_tokens": 3,
                "per_step_accepted": per_step,
                "per_step_drafted": [3] * 4,
            }
        },
    }
    counts, _, _ = VllmDialect().parse(answer, [1, 2, 3], 3, "srv")
    # 9 tokens: the prefill's + 4 steps emitting 2, 1, 4, 3, the last one's 2 past max_tokens cut
    assert counts.steps == 4 == len(counts.per_step_accepted) and counts.last_drafted_accepted == 2
    assert most_steps(9, 6, 4, 3, counts.last_drafted_accepted) == 4  # even a skipping method: exact


# -- the pieces -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, spec",
    [
        ('vllm serve m --speculative-config \'{"method": "ngram", "num_speculative_tokens": {k}}\'', "ngram"),
        ('vllm serve m --speculative-config=\'{"method": "eagle3", "model": "h"}\'', "eagle3"),
        ('vllm serve m -sc \'{"model": "[ngram]", "num_speculative_tokens": 3}\'', "ngram"),
        ("vllm serve m --speculative-config.method suffix --port {port}", "suffix"),
        ("python -m vllm.entrypoints.openai.api_server --spec-method ngram --spec-tokens 3", "ngram"),
        ("vllm serve m --port {port}", None),
        ("vllm serve m --speculative-config not-json", None),
    ],
)
def test_the_method_is_read_from_the_command(command, spec):
    from alcheck.backends.engines.served_method import method_of

    found = command_spec(command)
    assert (method_of(found) if found is not None else None) == spec


def test_a_draft_model_without_a_method_drafts_every_step():
    served = resolve(None, 'vllm serve m --speculative-config \'{"model": "/heads/x"}\'', None)
    assert served.name is None and served.kind == EVERY_STEP
    assert steps_kind("eagle") == steps_kind("draft_model") == steps_kind("mtp") == EVERY_STEP
    assert steps_kind("ngram") == REPLAY
    assert steps_kind("suffix") == steps_kind("ngram_gpu") == steps_kind(None) == UNSETTLED


def test_the_sources_in_order_and_a_disagreement():
    cmd = 'vllm serve m --speculative-config \'{"method": "ngram", "prompt_lookup_max": 4}\''
    served = resolve(None, cmd, {"method": "ngram", "source": "/version"})
    assert served.source == "--engine-cmd's speculative config" and served.spec["prompt_lookup_max"] == 4
    assert resolve("ngram", cmd, None).spec["prompt_lookup_max"] == 4  # --method's name, the command's sizes
    assert resolve(None, None, {"method": "[ngram]", "source": "s"}).name == "ngram"
    expect_error(lambda: resolve("eagle", cmd, None), "--method says eagle", "says ngram")
    expect_error(
        lambda: resolve(None, cmd, {"method": "eagle3", "source": "its /version"}), "its /version says"
    )


def test_most_steps_bounds():
    # 16 tokens, 1 drafted step accepting 3: 12 plain-equivalent steps; up to 3 cut
    assert (steps_from_tokens(16, 3, 1, 3, "t"), most_steps(16, 3, 1, 3)) == (12, 15)
    assert most_steps(16, 3, 1, 3, last_accepted=1) == 13
    assert most_steps(16, 0, 0, 3) == steps_from_tokens(16, 0, 0, 3, "t") == 15  # nothing accepted: none cut
    # every step drafted and 2 cut: the fewest is the drafted steps; the most may be higher
    assert (steps_from_tokens(10, 8, 3, 3, "t"), most_steps(10, 8, 3, 3, last_accepted=2)) == (3, 3)
