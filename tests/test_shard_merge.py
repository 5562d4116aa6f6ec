"""`alcheck run --shard I/N` and `alcheck merge` (issue 31, part 2).

The oracle is the whole sweep run at once: shares 1..N merged must give its questions.csv,
traces.csv and answers.jsonl byte for byte, and its summary (timing aside). The runs are tiny
(4 cells of 3 questions, 16 tokens) and made once per module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.rundir.shard import Shard, parse_shard, sweep_cells, sweep_fingerprint
from tests.conftest import expect_error

BASE = ["--ks", "1-2", "--repeats", "2", "--limit", "3", "--max-tokens", "16", "--reference", "none"]
ALL_CELLS = [(1, 0), (1, 1), (2, 0), (2, 1)]
FILES = ("questions.csv", "traces.csv", "answers.jsonl")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def run(pair_args, out: Path, *extra):
    result = invoke("run", *pair_args, *BASE, *extra, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def meta(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def rows(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False)


def summary_without_timing(out: Path) -> list[dict]:
    return [{k: v for k, v in s.items() if k != "tokens_per_s"} for s in meta(out)["summary"]]


def refused(result, *needles):
    """Exit 2 with one line naming every needle."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(pair_args, tmp_path_factory):
    """The whole sweep, and its shares for N=2 and N=3: {"whole": dir, (i, n): dir}."""
    root = tmp_path_factory.mktemp("shards")
    out = {"whole": run(pair_args, root / "whole")}
    for n in (2, 3):
        for i in range(1, n + 1):
            out[(i, n)] = run(pair_args, root / f"share-{i}-of-{n}", "--shard", f"{i}/{n}")
    return out


# -- which cells a share takes ---------------------------------------------------------------------


def test_shares_cover_every_cell_exactly_once():
    cells = sweep_cells([1, 2, 3, 5], 3)
    for n in range(1, len(cells) + 1):
        shares = [Shard(i, n).cells(cells) for i in range(1, n + 1)]
        assert sorted(c for s in shares for c in s) == sorted(cells)  # every cell, none twice
        assert all(shares)  # N <= cells: no empty share
    assert Shard(2, 3).cells(ALL_CELLS) == [(1, 1)]  # round robin over the sweep's order
    assert Shard(1, 3).cells(ALL_CELLS) == [(1, 0), (2, 1)]


@pytest.mark.parametrize(
    "text, needle",
    [("0/2", "1..2"), ("3/2", "1..2"), ("1/0", "at least 1"), ("a/b", "cannot read"), ("2", "cannot read")],
)
def test_parse_shard_refuses_bad_values(text, needle):
    expect_error(lambda: parse_shard(text), "--shard", needle, "I/N")


@pytest.mark.parametrize(
    "text, needle",
    [("0/2", "1..2"), ("3/2", "1..2"), ("1/0", "at least 1"), ("x", "cannot read"), ("1/-1", "cannot read")]
    + [("1/5", "only 4 (K, repeat) cells")],  # more shares than the sweep's cells: some would be empty
)
def test_bad_shard_exits_2_and_writes_nothing(pair_args, tmp_path, text, needle):
    out = tmp_path / "share"
    refused(invoke("run", *pair_args, *BASE, "--shard", text, "--out", out), "--shard", needle)
    assert not out.exists()


# -- a share ---------------------------------------------------------------------------------------


def test_share_rows_equal_the_whole_runs_rows_for_its_cells(runs):
    whole = rows(runs["whole"])
    fingerprint = sweep_fingerprint(meta(runs["whole"]))
    for n in (2, 3):
        for i in range(1, n + 1):
            share = runs[(i, n)]
            mine = Shard(i, n).cells(ALL_CELLS)
            record = meta(share)["shard"]
            assert (record["index"], record["count"]) == (i, n)
            assert [tuple(c) for c in record["cells"]] == mine
            assert record["sweep"] == fingerprint  # the whole sweep's, not the share's
            assert [(c["k"], c["repeat"]) for c in meta(share)["cells"]] == mine
            keep = [(int(k), int(r)) in mine for k, r in zip(whole["k"], whole["repeat"])]
            expected = whole[keep].reset_index(drop=True)
            pd.testing.assert_frame_equal(rows(share), expected)


def test_resume_keeps_the_share_and_refuses_another(pair_args, runs, tmp_path):
    share = tmp_path / "share"
    shutil.copytree(runs[(1, 3)], share)
    before = snapshot(share)
    refused(invoke("run", "--resume", share, "--shard", "2/3"), "share 1/3", "--shard 1/3")
    refused(invoke("run", "--resume", share, "--shard", "1/2"), "share 1/3")
    assert snapshot(share) == before
    whole = tmp_path / "whole"
    shutil.copytree(runs["whole"], whole)
    refused(invoke("run", "--resume", whole, "--shard", "1/3"), "whole run", "drop --shard")
    for extra in ([], ["--shard", "1/3"]):  # the same share, typed or not
        result = invoke("run", "--resume", share, *extra)
        assert result.exit_code == 0 and "already complete" in result.output, result.output
    assert snapshot(share) == before


def test_resume_of_an_interrupted_share_runs_only_its_cells(pair_args, runs, tmp_path, monkeypatch):
    from tests.conftest import interrupt_at_cell

    out = tmp_path / "share"
    interrupt_at_cell(monkeypatch, 2)
    result = invoke("run", *pair_args, *BASE, "--shard", "1/2", "--out", out)
    assert result.exit_code == 130, result.output
    monkeypatch.undo()
    assert [(c["k"], c["repeat"]) for c in meta(out)["cells"]] == [(1, 0)]
    result = invoke("run", "--resume", out)
    assert result.exit_code == 0, result.output
    assert meta(out)["shard"]["index"] == 1
    for name in FILES:
        assert (out / name).read_bytes() == (runs[(1, 2)] / name).read_bytes()


# -- merge -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_shards_merged_equal_the_whole_run(runs, tmp_path, n):
    shares = [runs[(i, n)] for i in range(n, 0, -1)]  # any order
    out = tmp_path / "merged"
    result = invoke("merge", *shares, "--out", out)
    assert result.exit_code == 0, result.output
    assert f"{len(ALL_CELLS)} of {len(ALL_CELLS)} cells" in result.output
    for name in FILES:
        assert (out / name).read_bytes() == (runs["whole"] / name).read_bytes(), name
    assert summary_without_timing(out) == summary_without_timing(runs["whole"])
    merged, whole = meta(out), meta(runs["whole"])
    assert merged["status"] == "complete" and "shard" not in merged
    assert [(c["k"], c["repeat"]) for c in merged["cells"]] == ALL_CELLS
    assert {k: v for k, v in merged["config"].items() if k != "out"} == {
        k: v for k, v in whole["config"].items() if k != "out"
    }
    assert merged["fingerprints"] == whole["fingerprints"]
    where = {s["shard"]: [tuple(c) for c in s["cells"]] for s in merged["merged"]["shares"]}
    assert where == {f"{i}/{n}": Shard(i, n).cells(ALL_CELLS) for i in range(1, n + 1)}
    result = invoke("report", out)
    assert result.exit_code == 0, result.output


def test_a_missing_share_gives_a_partial_run_that_names_its_cells(runs, tmp_path):
    out = tmp_path / "merged"
    result = invoke("merge", runs[(1, 3)], runs[(3, 3)], "--out", out)
    assert result.exit_code == 0, result.output
    assert "partial" in result.output and "K=1 repeat 2" in result.output  # share 2/3's one cell
    merged = meta(out)
    assert merged["status"] == "partial" and merged["missing_cells"] == [[1, 1]]
    whole = rows(runs["whole"])
    keep = [(k, r) != ("1", "1") for k, r in zip(whole["k"], whole["repeat"])]
    pd.testing.assert_frame_equal(rows(out), whole[keep].reset_index(drop=True))
    result = invoke("report", out)
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    assert "partial" in report and "K=1 repeat 2" in report
    # the partial merge is a run like any other: --resume computes the missing cell there
    result = invoke("run", "--resume", out)
    assert result.exit_code == 0, result.output
    assert meta(out)["status"] == "complete" and "missing_cells" not in meta(out)
    for name in FILES:
        assert (out / name).read_bytes() == (runs["whole"] / name).read_bytes(), name
    assert summary_without_timing(out) == summary_without_timing(runs["whole"])


def test_merge_refuses_a_share_given_twice_and_overlapping_cells(runs, tmp_path):
    out = tmp_path / "merged"
    copy = tmp_path / "copy"
    shutil.copytree(runs[(1, 3)], copy)
    for args, needles in [
        ((runs[(1, 3)], runs[(2, 3)], runs[(1, 3)]), ("given twice",)),
        ((runs[(1, 3)], copy), ("share 1/3", "given twice")),
        ((runs[(1, 3)], runs[(1, 2)]), ("both hold the K=1 repeat 1 cell",)),
        ((runs["whole"], runs[(2, 3)]), ("both hold the K=1 repeat 2 cell",)),
    ]:
        refused(invoke("merge", *args, "--out", out), *needles)
        assert not out.exists()


def test_merge_refuses_a_folder_that_is_not_a_run(runs, pair_dirs, tmp_path):
    out = tmp_path / "merged"
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text('{"schema": "something else"}')
    for other, needle in [
        (empty, "not a run"),
        (tmp_path / "absent", "not a run"),
        (pair_dirs[1], "not a run"),
        (broken, "is not an alcheck.run/1 run"),
    ]:
        refused(invoke("merge", runs[(1, 2)], other, "--out", out), needle)
        assert not out.exists()
    # nor is a run written over
    refused(invoke("merge", runs[(1, 2)], runs[(2, 2)], "--out", runs["whole"]), "already holds a run")


def test_merge_refuses_shares_of_different_sweeps(pair_args, pair_dirs, runs, tmp_path):
    from alcheck.testing.tiny import make_tiny_eagle

    other_head = make_tiny_eagle(tmp_path / "other-eagle", pair_dirs[0], copy_target_layer=0, noise=0.3)
    other_pair = ["--target", str(pair_dirs[0]), "--draft", str(other_head)]
    out = tmp_path / "merged"
    for name, extra, args, needle in [
        ("limit", ["--limit", "2"], pair_args, "limit: 3 there, 2 here"),
        ("protocol", ["--protocol", "eagle-repo"], pair_args, "protocol"),
        ("dtype", ["--dtype", "bfloat16"], pair_args, "runtime dtype"),
        ("pair", [], other_pair, "draft checkpoints differ"),
    ]:
        share = tmp_path / name
        result = invoke("run", *args, *BASE, *extra, "--shard", "2/2", "--out", share)
        assert result.exit_code == 0, result.output
        refused(invoke("merge", runs[(1, 2)], share, "--out", out), "not shares of one sweep", needle)
        assert not out.exists()


def test_merge_refuses_an_edited_share(runs, tmp_path):
    share = tmp_path / "share"
    shutil.copytree(runs[(2, 2)], share)
    data = meta(share)
    data["config"]["seed"] = 5
    (share / "run.json").write_text(json.dumps(data))
    refused(invoke("merge", runs[(1, 2)], share, "--out", tmp_path / "merged"), "edited")


def test_a_share_spreads_its_cells_over_devices(pair_args, runs, tmp_path):
    """--devices within a share: the same rows as the share on one device."""
    out = run(pair_args, tmp_path / "share", "--shard", "1/3", "--devices", "cpu,cpu")
    assert [(c["k"], c["repeat"]) for c in meta(out)["cells"]] == Shard(1, 3).cells(ALL_CELLS)
    for name in FILES:
        assert (out / name).read_bytes() == (runs[(1, 3)] / name).read_bytes(), name


def test_shard_refuses_an_engines_sampler_test(pair_dirs, tmp_path):
    """That test pools every repeat of a K in one run: refused before any server is contacted."""
    out = tmp_path / "share"
    result = invoke(
        "run", "--target", pair_dirs[0], "--engine", "vllm", "--endpoint", "http://127.0.0.1:9",
        "--check-lossless", "--temperature", "0.5", "--ks", "1", "--repeats", "2", "--shard", "1/2",
        "--out", out,
    )  # fmt: skip
    refused(result, "drop --shard or --check-lossless")
    assert not out.exists()
