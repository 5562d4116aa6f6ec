"""`alcheck run --engine ... --check-lossless` above temperature 0 (issue 23, phase 2): per K, the server's
samples against target-only sampling (alcheck/diagnostics/sampler_check.py), stored as
summary[k]["lossless_test"].

Servers: `alcheck serve` on the copy-layer pair (lossless under both draft-sampling conventions) and its
deliberately lossy variant (recovered tokens from p, not the residual: rejected drafts come back too often).
One
seeded draw per case, as tests/test_lossless.py: under losslessness the p-value is uniform, so a change
of the random streams fails a passing case with probability 0.05. Measured: p 0.997 (onehot) and 0.77
(sampled); the lossy serves 5e-05 (top-1 z 7.6 and 8.2).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import expect_error, interrupt_at_cell

from alcheck.cli.main import cli

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

K = 3
CONVENTIONS = ("onehot", "sampled")
RUN = [
    "--ks",
    str(K),
    "--repeats",
    "2",
    "--limit",
    "32",
    "--max-tokens",
    "64",
    "--temperature",
    "1",
    "--reference",
    "none",
    "--check-lossless",
]


def served(pair_dirs, draft_sampling: str, lossy: bool):
    from alcheck.serve.app import create_app
    from alcheck.serve.config import ServeConfig
    from alcheck.serve.listen import start_in_thread
    from alcheck.serve.lossy import LossyPair
    from alcheck.serve.pair import load_served_pair

    cfg = ServeConfig(
        target=str(pair_dirs[0]), draft=str(pair_dirs[1]), k=K, port=0, draft_sampling=draft_sampling
    )
    pair = load_served_pair(cfg)
    return start_in_thread(create_app(LossyPair(pair, "recovered-from-target") if lossy else pair, cfg))


def engine_run(pair_dirs, out, url, draft_sampling="onehot"):
    return CliRunner().invoke(
        cli,
        [
            "run",
            "--target",
            str(pair_dirs[0]),
            "--engine",
            "vllm",
            "--endpoint",
            url,
            "--concurrency",
            "4",
            "--draft-sampling",
            draft_sampling,
            *RUN,
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )


@pytest.fixture(scope="module")
def servers(pair_dirs):
    started = {
        (rule, lossy): served(pair_dirs, rule, lossy) for rule in CONVENTIONS for lossy in (False, True)
    }
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture(scope="module")
def lossless_runs(pair_dirs, servers, tmp_path_factory):
    runs = {}
    for rule in CONVENTIONS:
        out = tmp_path_factory.mktemp("sampler") / rule
        result = engine_run(pair_dirs, out, servers[(rule, False)].url, rule)
        assert result.exit_code == 0, result.output
        runs[rule] = out, result.output
    return runs


def lossless_test(out) -> dict:
    return json.loads((out / "run.json").read_text())["summary"][0]["lossless_test"]


@pytest.mark.parametrize("rule", CONVENTIONS)
def test_alcheck_serve_passes_and_the_table_says_so(lossless_runs, rule):
    out, output = lossless_runs[rule]
    test = lossless_test(out)
    assert test["lossless"] and test["p_value"] >= 0.05, test["line"]
    # every question's turn 1, once per repeat, on both sides
    assert (test["prompts"], test["engine_sequences"], test["reference_sequences"]) == (32, 64, 64)
    assert test["samples_per_prompt"] == 2
    stats = [c["lossless_statistics"] for c in json.loads((out / "run.json").read_text())["cells"]]
    assert [len(s) for s in stats] == [32, 32] and [row[0] for row in stats[0]] == [
        str(q) for q in range(81, 113)
    ]
    assert "identical" not in (out / "questions.csv").read_text().splitlines()[0]  # not the greedy oracle
    assert f"lossless (p {test['p_value']:.3f})" in " ".join(output.split())
    assert "lossless test: the server's turn-1 samples" in " ".join(output.split())


@pytest.mark.parametrize("rule", CONVENTIONS)
def test_a_lossy_serve_fails_and_compare_names_it(pair_dirs, servers, lossless_runs, tmp_path, rule):
    """Recovered tokens drawn from p instead of the residual: rejected drafts come back too often."""
    out = tmp_path / "lossy"
    result = engine_run(pair_dirs, out, servers[(rule, True)].url, rule)
    assert result.exit_code == 0, result.output
    test = lossless_test(out)
    assert not test["lossless"] and test["p_value"] < 0.001 and test["z"]["top1"] > 3, test["line"]
    shown = CliRunner().invoke(
        cli, ["compare", str(lossless_runs[rule][0]), str(out)], catch_exceptions=False
    )
    assert f"K={K}: B (p = {test['p_value']:.2g}) failed the temperature > 0 lossless check" in " ".join(
        shown.output.split()
    )


def test_a_resumed_run_keeps_the_test_exact(pair_dirs, servers, lossless_runs, tmp_path, monkeypatch):
    """Cut after the first repeat: its statistics are in run.json, and the resumed test is the uninterrupted
    one."""
    out = tmp_path / "cut"
    interrupt_at_cell(monkeypatch, 2)
    assert engine_run(pair_dirs, out, servers[("onehot", False)].url).exit_code == 130
    partial = json.loads((out / "run.json").read_text())
    assert len(partial["cells"]) == 1 and "lossless_test" not in partial["summary"][0]
    monkeypatch.undo()
    result = CliRunner().invoke(cli, ["run", "--resume", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert lossless_test(out) == lossless_test(lossless_runs["onehot"][0])


def test_what_check_lossless_refuses(pair_dirs, pair_args):
    from alcheck.config import RunConfig

    target = str(pair_dirs[0])
    expect_error(
        lambda: RunConfig(
            target,
            "",
            engine="vllm",
            endpoints="http://127.0.0.1:1",
            ks=[3],
            check_lossless=True,
            temperature=0.0,
        ),
        "--check-lossless with --engine",
        "alcheck compare",
        "--temperature > 0",
    )
    expect_error(
        lambda: RunConfig(target, str(pair_dirs[1]), check_lossless=True, temperature=1.0),
        "target-only greedy",
        "--temperature 0",
        "--engine",
    )
    assert RunConfig(
        target,
        "",
        engine="vllm",
        endpoints="http://127.0.0.1:1",
        ks=[3],
        check_lossless=True,
        temperature=0.7,
    ).sampler_test
