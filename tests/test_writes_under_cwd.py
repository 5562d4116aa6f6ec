"""What alcheck writes goes under the current folder (issue 35): a reference import lands in
./results/references/, never among the shipped tables (in a wheel, the install folder), and is
read beside them by `references`, by runs and by `--gate NAME`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from alcheck import paths
from alcheck.cli.main import cli
from alcheck.references.tables import load_references
from alcheck.report.gate_baseline import load_baseline

PRINTOUT = "num_drafts: 1000\nnum_draft_tokens: 3000\nnum_accepted_tokens: 1296\n"  # K=3: AL 2.296
IMPORT = ["--target", "meta-llama/Llama-3.1-8B-Instruct", "--dataset", "mt_bench", "--temperature", "0"]


def test_an_import_lands_under_the_current_folder_and_is_read_beside_the_shipped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec_decode.txt").write_text(PRINTOUT)
    shipped_before = sorted(p.name for p in paths.REFERENCES_DIR.iterdir())
    result = CliRunner().invoke(
        cli, ["import", "vllm-spec-decode", "spec_decode.txt", "--name", "mine", *IMPORT]
    )
    assert result.exit_code == 0, result.output
    table = json.loads((tmp_path / "results" / "references" / "mine.json").read_text())
    assert table["values"] == {"3": pytest.approx(2.296)}
    assert sorted(p.name for p in paths.REFERENCES_DIR.iterdir()) == shipped_before

    names = [r.name for r in load_references()]
    assert "mine" in names and "seed-vllm-v1-llama31-8b" in names
    listed = CliRunner().invoke(cli, ["references", "--json"])
    assert listed.exit_code == 0 and "mine" in {r["name"] for r in json.loads(listed.stdout)}
    assert list(load_baseline("mine").values) == [3]


def test_an_import_may_not_take_a_shipped_tables_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec_decode.txt").write_text(PRINTOUT)
    args = ["import", "vllm-spec-decode", "spec_decode.txt", "--name", "vllm-ci-eagle-llama31-8b", *IMPORT]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "is a shipped table's: pass another --name" in result.output, (
        result.output
    )
    assert not (tmp_path / "results").exists()
