"""Issue 23, item 6: a buggy engine proves it. `alcheck serve` with the seed's bug (no lookahead slots)
is measured through `alcheck run --engine vllm` and compared with a normal built-in run: `compare`
finds the divergences and names the lookahead slots; a correct `alcheck serve` shows none.

Waits for phase 2 of issue 23, and runs by itself once these exist: the runner's per-step record
(`GenerationResult.per_step_accepted`, which serve's vLLM dialect already reports as vLLM's
`detailed` metrics do), the sweep writing traces.csv (the built-in runner's, and the engine client's
`EngineCounts.per_step_accepted`), and `ServeConfig.kv_lookahead` (`alcheck serve --no-kv-lookahead`).
Until then tests/test_divergence.py localizes the same bug on traces recorded from the runner directly.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.runner.request import GenerationResult
from alcheck.report.divergence import LOOKAHEAD_CLASS
from alcheck.serve.config import ServeConfig

PHASE_2 = ("per_step_accepted" in GenerationResult.__dataclass_fields__
           and "kv_lookahead" in ServeConfig.__dataclass_fields__)
pytestmark = pytest.mark.skipif(not PHASE_2, reason="needs the runner's per-step traces, the sweep writing "
                                                    "traces.csv and serve --no-kv-lookahead (issue 23 phase 2)")
pytest.importorskip("httpx")
pytest.importorskip("fastapi")

K, BLOCK = 4, 4
RUN = ["--ks", str(K), "--repeats", "1", "--limit", "16", "--max-tokens", "60", "--protocol", "eagle-repo",
       "--reference", "none", "--block-size", str(BLOCK)]


def served_run(pair_dirs, tmp_path, name: str, kv_lookahead: bool):
    from alcheck.serve.app import create_app
    from alcheck.serve.pair import load_served_pair
    from alcheck.serve.listen import start_in_thread

    cfg = ServeConfig(target=str(pair_dirs[0]), draft=str(pair_dirs[1]), k=K, port=0, block_size=BLOCK,
                      max_batch_size=16, kv_lookahead=kv_lookahead)
    server = start_in_thread(create_app(load_served_pair(cfg), cfg))
    try:
        out = tmp_path / name
        result = CliRunner().invoke(cli, ["run", "--target", str(pair_dirs[0]), "--engine", "vllm", "--endpoint",
                                          server.url, "--concurrency", "16", *RUN, "--out", str(out)],
                                    catch_exceptions=False)
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
    return shown.output, json.loads(as_json.output)["divergence"]


def test_a_serve_without_lookahead_slots_is_localized(pair_dirs, builtin, tmp_path):
    output, data = compare(builtin, served_run(pair_dirs, tmp_path, "buggy", kv_lookahead=False))
    assert data["summary"][str(K)]["turns"] > data["summary"][str(K)]["identical"]
    assert any(f["named"] for f in data["lookahead"]) and LOOKAHEAD_CLASS in output


def test_a_correct_serve_shows_no_divergence(pair_dirs, builtin, tmp_path):
    output, data = compare(builtin, served_run(pair_dirs, tmp_path, "fixed", kv_lookahead=True))
    s = data["summary"][str(K)]
    assert s["identical"] == s["turns"] == s["traced"] and not any(f["named"] for f in data["lookahead"])
