"""Issue 23, item 6: a buggy engine proves it. `alcheck serve --no-kv-lookahead` (the built-in runner
with the seed's bug) is measured through `alcheck run --engine vllm` and compared with a normal
built-in run: `compare` finds the divergences and names the lookahead slots; a correct `alcheck serve`
shows none.

The copy-layer pair at block size 4 and K=4, on all 80 MT-Bench questions (vllm-example: short
prompts, one batch): the bug moves a third of the turns. Whether a step was exposed is recomputed
here by a block-by-block replay (tests/test_divergence.py), not by the module's closed form.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_divergence import replay

from alcheck.cli.main import cli
from alcheck.report.divergence import LOOKAHEAD_CLASS
from alcheck.rundir.traces import read_traces
from alcheck.serve.config import ServeConfig

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

K, BLOCK = 4, 4
RUN = [
    "--ks",
    str(K),
    "--repeats",
    "1",
    "--limit",
    "80",
    "--max-tokens",
    "60",
    "--protocol",
    "vllm-example",
    "--reference",
    "none",
    "--block-size",
    str(BLOCK),
]


def served_run(pair_dirs, tmp_path, name: str, kv_lookahead: bool):
    from alcheck.serve.app import create_app
    from alcheck.serve.listen import start_in_thread
    from alcheck.serve.pair import load_served_pair

    cfg = ServeConfig(
        target=str(pair_dirs[0]),
        draft=str(pair_dirs[1]),
        k=K,
        port=0,
        block_size=BLOCK,
        max_batch_size=80,
        kv_lookahead=kv_lookahead,
    )
    server = start_in_thread(create_app(load_served_pair(cfg), cfg))
    try:
        out = tmp_path / name
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--target",
                str(pair_dirs[0]),
                "--engine",
                "vllm",
                "--endpoint",
                server.url,
                "--concurrency",
                "80",
                *RUN,
                "--out",
                str(out),
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    return out


@pytest.fixture(scope="module")
def builtin(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("item6") / "builtin"
    result = CliRunner().invoke(cli, ["run", *pair_args, *RUN, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (out / "traces.csv").exists()
    return out


def compare(a, b) -> tuple[str, dict]:
    shown = CliRunner().invoke(cli, ["compare", str(a), str(b)], catch_exceptions=False)
    as_json = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json"], catch_exceptions=False)
    return " ".join(shown.output.split()), json.loads(as_json.output)["divergence"]


def test_a_serve_without_lookahead_slots_is_localized(pair_dirs, builtin, tmp_path):
    data_dir = {"buggy": served_run(pair_dirs, tmp_path, "buggy", kv_lookahead=False)}
    output, data = compare(builtin, data_dir["buggy"])
    s = data["summary"][str(K)]
    assert s["traced"] == s["turns"] == 80 and s["turns"] - s["identical"] >= 10
    assert LOOKAHEAD_CLASS in output
    finding = data["lookahead"][0]
    assert finding["named"] and finding["p_value"] < 0.01
    # where each first divergence sits, from the built-in run's own traces, walked block by block
    fixed = read_traces(builtin)
    exposed_steps = []
    for turn in data["turns"]:
        trace = fixed[(turn["k"], turn["repeat"], turn["question_id"], turn["turn"])]
        walk = replay(trace.prompt_tokens, trace.accepted, K, BLOCK)
        emitted, length, exposed = walk[turn["step"]]
        assert (turn["position"], turn["seq_len"], turn["block_offset"]) == (emitted, length, length % BLOCK)
        assert turn["first_token_diff"] is None  # greedy and lossless: only the acceptance moved
        exposed_steps.append(exposed)
    # most first divergences sit on exposed steps (batch-mates share block 0's owner: at most a few elsewhere)
    assert sum(exposed_steps) >= len(exposed_steps) - 2
    walked = [e for t in fixed.values() for _, _, e in replay(t.prompt_tokens, t.accepted, K, BLOCK)]
    assert finding["expected_share"] == pytest.approx(sum(walked) / len(walked))
    # the draft position each first divergence parts at, re-counted from both runs' traces
    buggy = read_traces(data_dir["buggy"])
    parted = [0] * K
    for key, trace in fixed.items():
        other = buggy[key].accepted
        step = next((i for i, (x, y) in enumerate(zip(trace.accepted, other)) if x != y), None)
        if step is not None:
            parted[min(trace.accepted[step], other[step])] += 1
    assert data["position_map"][str(K)] == parted
    assert data["first_changed_position"] is not None
    assert "first changed position (conditional acceptance, compare's verdict):" in output


def test_a_correct_serve_shows_no_divergence(pair_dirs, builtin, tmp_path):
    output, data = compare(builtin, served_run(pair_dirs, tmp_path, "fixed", kv_lookahead=True))
    s = data["summary"][str(K)]
    assert s["identical"] == s["turns"] == s["traced"] == 80 and not any(
        f["named"] for f in data["lookahead"]
    )
    assert "80 of 80 turns identical step by step" in output
