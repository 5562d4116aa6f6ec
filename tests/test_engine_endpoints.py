"""`alcheck run --engine E --endpoint A --endpoint B` (issue 31): requests spread over alike servers.

The servers are `alcheck serve`'s app on threads (test_engine_client's thread_server); the oracle is
one server's questions.csv on the same prompts.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_engine_client import K, engine_run, rows, thread_server

pytest.importorskip("httpx")
pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def two(pair_dirs):
    started = [thread_server(pair_dirs, "vllm", max_batch_size=4) for _ in range(2)]
    yield started
    for server in started:
        server.stop()


def fleet_run(pair_dirs, tmp_path, name, urls, *extra):
    more = [arg for url in urls[1:] for arg in ("--endpoint", url)]
    return engine_run(pair_dirs, tmp_path, name, "vllm", urls[0], *more, *extra)


def test_two_servers_give_one_servers_rows_and_both_answer(pair_dirs, two, tmp_path):
    one, result = engine_run(pair_dirs, tmp_path, "one", "vllm", two[0].url)
    assert result.exit_code == 0, result.output
    both, result = fleet_run(pair_dirs, tmp_path, "both", [s.url for s in two], "--concurrency", "2")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(rows(both), rows(one))
    meta = json.loads((both / "run.json").read_text())
    assert meta["environment"]["endpoints"] == [s.url for s in two]
    served = meta["cells"][0]["served_by"]
    assert set(served) == {s.url for s in two} and sum(served.values()) == len(rows(both))
    lines = [json.loads(x) for x in (both / "answers.jsonl").read_text().splitlines()]
    assert {line["endpoint"] for line in lines} == {s.url for s in two}


def test_a_url_given_twice_is_refused(pair_dirs, two, tmp_path):
    out, result = fleet_run(pair_dirs, tmp_path, "dup", [two[0].url, two[0].url + "/"])
    assert result.exit_code == 2 and "is given 2 times" in result.output, result.output
    assert not out.exists()


def test_engine_cmd_with_several_endpoints_is_refused(pair_dirs, two, tmp_path):
    out, result = fleet_run(pair_dirs, tmp_path, "cmd", [s.url for s in two], "--engine-cmd", "x {port}")
    assert result.exit_code == 2 and "--engine-cmd with 2 --endpoint" in result.output, result.output


@pytest.mark.parametrize(
    "other, needles",
    [
        (dict(dialect="vllm", k=K + 1), ["drafts 3 tokens per step", "restart"]),
        (dict(dialect="vllm", model_name="another-model"), ["is not the server", "another-model"]),
        (dict(dialect="sglang"), ["is not a vLLM", "--engine vllm"]),
    ],
)
def test_a_server_unlike_the_first_is_refused_naming_both(pair_dirs, two, tmp_path, other, needles):
    dialect = other.pop("dialect")
    odd = thread_server(pair_dirs, dialect, **other)
    try:
        out, result = fleet_run(pair_dirs, tmp_path, "odd", [two[0].url, odd.url])
    finally:
        odd.stop()
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert two[0].url in line and odd.url in line, line
    for needle in needles:
        assert needle in line, line
    assert not out.exists()


def test_an_unreachable_server_is_refused_up_front(pair_dirs, two, tmp_path):
    out, result = fleet_run(pair_dirs, tmp_path, "gone", [two[0].url, "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "http://127.0.0.1:9: cannot connect" in result.output, result.output
    assert not out.exists()


def test_a_server_dying_mid_run_fails_it_and_resume_finishes(pair_dirs, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from alcheck.cli.main import cli
    from alcheck.rundir.store import RunStore

    servers = [thread_server(pair_dirs, "vllm") for _ in range(2)]
    real = RunStore.record_cell

    def record_then_stop(self, cell):
        real(self, cell)
        servers[1].stop()  # the second server goes away after the first (K, repeat) cell is saved

    monkeypatch.setattr(RunStore, "record_cell", record_then_stop)
    try:
        out, result = fleet_run(pair_dirs, tmp_path, "dies", [s.url for s in servers], "--repeats", "2")
        assert result.exit_code == 2, result.output
        error = result.output.strip().splitlines()[-1]
        assert servers[1].url in error and f"alcheck run --resume {out}" in error, error
        monkeypatch.undo()
        resumed = CliRunner().invoke(cli, ["run", "--resume", str(out), "--endpoint", servers[0].url])
        assert resumed.exit_code == 0, resumed.output
        whole, result = engine_run(pair_dirs, tmp_path, "whole", "vllm", servers[0].url, "--repeats", "2")
        assert result.exit_code == 0, result.output
        pd.testing.assert_frame_equal(rows(out), rows(whole))
    finally:
        servers[0].stop()


def test_a_run_saved_with_one_endpoint_string_reads_back():
    from alcheck.config import RunConfig

    cfg = RunConfig.from_dict(
        {"target": "t", "draft": "", "ks": [2], "engine": "vllm", "endpoint": "http://a:1"}
    )
    assert cfg.endpoints == ["http://a:1"] and cfg.endpoint == "http://a:1"
    assert "endpoints" not in cfg.result_settings()  # where, not what: a changed list still resumes
