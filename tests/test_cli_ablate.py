"""`alcheck ablate kv-lookahead`, `--audit-slots` and `--runner contiguous` from the CLI (issue 6)."""

from __future__ import annotations

import json

import pandas as pd
from click.testing import CliRunner
from conftest import invoke

from alcheck.cli.main import cli

SMALL = ["--repeats", "1", "--limit", "8", "--max-tokens", "48", "--block-size", "4", "--max-batch-size", "8"]


def test_ablation_shows_corruption_only_without_lookahead(pair_args, tmp_path):
    out = tmp_path / "abl"
    result = invoke(["ablate", "kv-lookahead", *pair_args, "--ks", "3,5", *SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "ablation.json").read_text())
    rows = {r["k"]: r for r in meta["summary"]}
    assert set(rows) == {3, 5}
    for r in rows.values():
        assert set(r) >= {
            "k",
            "al_with",
            "al_without",
            "al_diff_ci95",
            "lossless_rate_with",
            "lossless_rate_without",
            "slot_violations_with",
            "slot_violations_without",
        }
        assert r["slot_violations_with"] == 0
        assert r["slot_violations_without"] > 0
        assert r["lossless_rate_with"] == 1.0 and r["lossless_rate_without"] == 1.0  # only draft KV is hit
        lo, hi = r["al_diff_ci95"]
        assert lo <= r["al_with"] - r["al_without"] <= hi
    assert rows[5]["al_without"] < rows[5]["al_with"]
    report = invoke(["report", str(out)])
    assert report.exit_code == 0
    text = (out / "report.md").read_text()
    assert "| 5 |" in text and "foreign KV writes" in text


def test_audit_fails_a_normal_run_that_writes_outside_its_blocks(pair_args, tmp_path, monkeypatch):
    from alcheck.runner.config import RunnerConfig

    # a scheduler that forgets the lookahead slots while the null block is reserved
    monkeypatch.setattr(RunnerConfig, "num_lookahead_tokens", property(lambda self: 0))
    out = tmp_path / "audited"
    result = invoke(["run", *pair_args, "--ks", "5", *SMALL, "--audit-slots", "--out", str(out)])
    assert result.exit_code == 1
    assert "slot audit" in result.output and "runner bug" in result.output
    meta = json.loads((out / "run.json").read_text())
    assert meta["summary"][0]["slot_violations"] > 0  # the evidence is saved


def test_contiguous_runner_gives_the_same_counts_per_question(pair_args, tmp_path):
    frames = {}
    for runner in ("paged", "contiguous"):
        out = tmp_path / runner
        result = invoke(["run", *pair_args, "--ks", "1-5", *SMALL, "--runner", runner, "--out", str(out)])
        assert result.exit_code == 0, result.output
        frames[runner] = pd.read_csv(out / "questions.csv")
    pd.testing.assert_frame_equal(frames["paged"], frames["contiguous"])


TINY = ["--ks", "1", "--repeats", "1", "--limit", "2", "--max-tokens", "8"]


def _one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert message.startswith("Error: ") and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def test_ablation_refuses_a_folder_holding_a_run(pair_args, tmp_path):
    """It would put its arms beside the run, and `report` would replace the run's report (issue 24 item 6)."""
    run_dir = tmp_path / "run"
    assert invoke(["run", *pair_args, *TINY, "--out", str(run_dir)]).exit_code == 0
    before = sorted(p.name for p in run_dir.iterdir())
    result = CliRunner().invoke(cli, ["ablate", "kv-lookahead", *pair_args, *TINY, "--out", str(run_dir)])
    _one_line_error(result, f"--out {run_dir}", "holds an `alcheck run` run (run.json)", "pass a new folder")
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_run_refuses_a_folder_holding_an_ablation(pair_args, tmp_path):
    out = tmp_path / "abl"
    (out / "with-lookahead").mkdir(parents=True)
    result = CliRunner().invoke(cli, ["run", *pair_args, *TINY, "--out", str(out)])
    _one_line_error(result, "holds an `alcheck ablate` ablation (with-lookahead)")
    assert not (out / "run.json").exists()


def test_ablation_refuses_the_options_it_overrides(pair_args, tmp_path):
    for flag, needle in (
        (["--no-kv-lookahead"], "runs both ways"),
        (["--runner", "contiguous"], "paged runner"),
    ):
        result = CliRunner().invoke(
            cli, ["ablate", "kv-lookahead", *pair_args, *TINY, *flag, "--out", str(tmp_path / "a")]
        )
        _one_line_error(result, flag[0], needle)
    assert not (tmp_path / "a").exists()


def test_empty_out_is_refused_not_the_current_folder(pair_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["run"], ["ablate", "kv-lookahead"]):
        _one_line_error(
            CliRunner().invoke(cli, [*command, *pair_args, *TINY, "--out", ""]), "--out '' is empty"
        )
    _one_line_error(CliRunner().invoke(cli, ["run", "--resume", ""]), "--resume '' is empty")
    assert list(tmp_path.iterdir()) == []


def test_ablate_help_and_a_repeated_draft_agree(tmp_path):
    """Issue 50: the help said --draft could be repeated ("repeat to rank several", run's text) and
    the command refused a repeated one. The help now says once; the refusal stays one line."""
    shown = CliRunner().invoke(cli, ["ablate", "kv-lookahead", "--help"], env={"COLUMNS": "250"}).output
    help_text = " ".join(shown.replace("│", " ").split())  # rich-click's panel borders, if any
    assert "given once (one head; `alcheck run` ranks several)" in help_text
    assert "repeat to rank several" not in help_text
    out = tmp_path / "abl"
    result = CliRunner().invoke(
        cli, ["ablate", "kv-lookahead", "--draft", "a", "--draft", "b", "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "Error: --draft is given 2 times: only `alcheck run` measures several heads in one command: "
        "pass one --draft"
    )
    assert not out.exists()
