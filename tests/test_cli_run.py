"""`alcheck run` end to end on a tiny pair made in a temp dir (issue 3)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import invoke_run

from alcheck.cli.main import cli
from alcheck.metrics.acceptance import parse_per_pos
from alcheck.paths import MT_BENCH_FILE
from alcheck.prompts.protocols import EAGLE_SYSTEM_PROMPT

BASE = [
    "--ks",
    "1-2",
    "--repeats",
    "2",
    "--limit",
    "4",
    "--max-tokens",
    "20",
    "--block-size",
    "4",
    "--max-batch-size",
    "3",
]


def summary_without_timing(meta):
    return [{k: v for k, v in s.items() if k != "tokens_per_s"} for s in meta["summary"]]


@pytest.fixture(scope="module")
def full_run(pair_args, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "full"
    result = invoke_run([*pair_args, *BASE, "--check-lossless", "--audit-slots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_run_json_matches_questions_csv_and_table(full_run):
    out, output = full_run
    meta = json.loads((out / "run.json").read_text())
    assert meta["schema"] == "alcheck.run/1" and meta["status"] == "complete"
    assert {"alcheck", "torch", "transformers", "device_name", "dtype", "attention_backend"} <= set(
        meta["environment"]
    )
    rows = pd.read_csv(out / "questions.csv")
    assert len(rows) == 2 * 2 * 4  # K x repeat x question (one turn)
    for entry in meta["summary"]:
        k = entry["k"]
        mine = rows[rows.k == k]
        assert (mine.drafted == mine.steps * k).all()
        pooled = (mine.steps.sum() + mine.accepted.sum()) / mine.steps.sum()
        assert entry["al_mean"] == pytest.approx(pooled, abs=1e-12)
        per_pos = parse_per_pos(mine.accepted_per_pos, k).sum(axis=0) / mine.steps.sum()
        assert entry["per_position"] == pytest.approx(list(per_pos))
        assert entry["al_mean"] == pytest.approx(1 + sum(entry["per_position"]))
        by_repeat = [(g.steps.sum() + g.accepted.sum()) / g.steps.sum() for _, g in mine.groupby("repeat")]
        assert entry["al_repeats"] == pytest.approx(by_repeat)
        lo, hi = entry["al_ci95"]
        assert lo <= entry["al_mean"] <= hi
        assert entry["lossless_rate"] == 1.0 and entry["slot_violations"] == 0
        assert f"{entry['al_mean']:.2f}" in output  # the printed table shows the same number
    assert "seed 0:<repeat>" in " ".join(output.split())  # not one repeat's seed for all
    assert meta["summary"][1]["al_mean"] > meta["summary"][0]["al_mean"] > 1.5


def test_resume_after_interrupt_equals_uninterrupted(pair_args, full_run, tmp_path, monkeypatch):
    from alcheck.executors import local as local_mod

    out = tmp_path / "cut"
    real = local_mod.run_cell
    calls = {"n": 0}

    def flaky(plan, backend, k, repeat, *rest):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(plan, backend, k, repeat, *rest)

    monkeypatch.setattr(local_mod, "run_cell", flaky)
    result = invoke_run([*pair_args, *BASE, "--check-lossless", "--audit-slots", "--out", str(out)])
    assert result.exit_code == 130 and "--resume" in result.output
    partial = json.loads((out / "run.json").read_text())
    assert partial["status"] == "partial" and len(partial["cells"]) == 2
    monkeypatch.setattr(local_mod, "run_cell", real)
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 0, result.output
    resumed = json.loads((out / "run.json").read_text())
    full = json.loads((full_run[0] / "run.json").read_text())
    assert resumed["status"] == "complete"
    assert summary_without_timing(resumed) == summary_without_timing(full)
    pd.testing.assert_frame_equal(
        pd.read_csv(out / "questions.csv"), pd.read_csv(full_run[0] / "questions.csv")
    )


def test_resume_refuses_a_different_config_and_overwrites_nothing(pair_args, full_run):
    out = full_run[0]
    before = (out / "run.json").read_bytes()
    result = invoke_run(["--resume", str(out), "--ks", "1-3"])
    assert result.exit_code == 2 and "different config" in result.output
    result = invoke_run([*pair_args, *BASE, "--out", str(out)])  # same dir without --resume
    assert result.exit_code == 2 and "--resume" in result.output
    assert (out / "run.json").read_bytes() == before


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--ks", "a-b"], "--ks"),
        (["--ks", "0-2"], "K must be >= 1"),
        (["--ks", "3-1"], "backwards"),
        (["--repeats", "0"], "--repeats"),
        (["--protocol", "nope"], "unknown protocol"),
        (["--dataset", "missing.jsonl"], "missing.jsonl"),
        (["--temperature", "-1"], "--temperature"),
        (["--seed", "-1"], "--seed -1: must be an integer in 0..2^63-1"),
        (["--ks", "1-0"], "K must be >= 1"),
        (["--ks", "1,1"], "K=1 is given twice: list each K once"),
        (["--ks", "1-3,2"], "K=2 is given twice: list each K once"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(pair_args, tmp_path, args, needle):
    out = tmp_path / "bad"
    result = invoke_run([*pair_args, "--limit", "2", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (out / "run.json").exists()


def test_malformed_dataset_names_file_and_line(pair_args, tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\n{not json\n')
    result = invoke_run([*pair_args, "--dataset", str(data), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "q.jsonl" in result.output and "line 2" in result.output


def test_eagle_repo_protocol_runs_both_turns_with_system_prompt(pair_args, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "eagle"
    result = invoke_run(
        [
            *pair_args,
            "--protocol",
            "eagle-repo",
            "--ks",
            "2",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "12",
            "--block-size",
            "4",
            "--out",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())
    assert meta["config"]["system_prompt"] == EAGLE_SYSTEM_PROMPT and meta["config"]["max_tokens"] == 12
    rows = pd.read_csv(out / "questions.csv")
    assert sorted(rows.turn.unique()) == [1, 2]
    tok = AutoTokenizer.from_pretrained(pair_args[1])
    first = json.loads(MT_BENCH_FILE.read_text().splitlines()[0])
    expected = tok.apply_chat_template(
        [{"role": "system", "content": EAGLE_SYSTEM_PROMPT}, {"role": "user", "content": first["turns"][0]}],
        add_generation_prompt=True,
        tokenize=True,
    )
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    row = rows[(rows.question_id == first["question_id"]) & (rows.turn == 1)].iloc[0]
    assert row.prompt_tokens == len(expected)
    turn2 = rows[(rows.question_id == first["question_id"]) & (rows.turn == 2)].iloc[0]
    assert turn2.prompt_tokens > row.prompt_tokens + row.generated_tokens // 2


def test_num_blocks_below_two_is_bad_input(pair_args, tmp_path):
    result = invoke_run([*pair_args, "--limit", "2", "--num-blocks", "0", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--num-blocks" in result.output


def test_an_orphan_questions_csv_is_not_appended_to(pair_args, tmp_path):
    out = tmp_path / "orphan"
    out.mkdir()
    (out / "questions.csv").write_text("k,repeat\n9,9\n")
    result = invoke_run([*pair_args, "--limit", "2", "--out", str(out)])
    assert result.exit_code == 2 and "questions.csv" in result.output
    assert (out / "questions.csv").read_text() == "k,repeat\n9,9\n"


def test_resume_keeps_the_reference_setting_and_rejects_a_corrupt_run(pair_args, tmp_path, monkeypatch):
    from alcheck.executors import local as local_mod

    out = tmp_path / "ref"
    real = local_mod.run_cell

    def stop_second(plan, backend, k, repeat, *rest):
        if (k, repeat) != (1, 0):
            raise KeyboardInterrupt
        return real(plan, backend, k, repeat, *rest)

    monkeypatch.setattr(local_mod, "run_cell", stop_second)
    args = [
        *pair_args,
        "--ks",
        "1-2",
        "--repeats",
        "1",
        "--limit",
        "2",
        "--max-tokens",
        "8",
        "--block-size",
        "4",
    ]
    assert invoke_run([*args, "--reference", "none", "--out", str(out)]).exit_code == 130
    monkeypatch.setattr(local_mod, "run_cell", real)
    assert invoke_run(["--resume", str(out)]).exit_code == 0
    assert json.loads((out / "run.json").read_text())["config"]["reference"] == "none"
    (out / "run.json").write_text("[1, 2]")
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 2 and "corrupt" in result.output


def test_resume_of_a_finished_run_loads_nothing_and_changes_nothing(full_run, monkeypatch):
    import alcheck.sweep.driver

    out, _ = full_run
    before = {name: (out / name).read_bytes() for name in ("run.json", "questions.csv")}
    # it checks the run's conditions (configs, tokenizer, fingerprints) but loads no weights
    monkeypatch.setattr(alcheck.sweep.driver.Sweep, "load", lambda *a, **kw: pytest.fail("models loaded"))
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert "already complete" in result.output and "nothing to resume" in result.output
    assert {name: (out / name).read_bytes() for name in before} == before


def test_max_tokens_1_is_refused_not_an_al_of_dashes(pair_args, tmp_path):
    """With one new token no verification step runs: AL is undefined (issue 24)."""
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "1",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--max-tokens 1: need at least 2 new tokens" in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_turns_a_multi_turn_protocol_leaves_out_are_named(pair_args, tmp_path):
    """A 3-turn question under the 2-turn eagle-repo protocol: the 3rd turn is not measured, and says so."""
    data = tmp_path / "three.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question_id": i, "category": "c", "turns": ["One?", "Two?", "Three?"]}) + "\n"
            for i in range(2)
        )
    )
    result = invoke_run(
        [
            *pair_args,
            "--ks",
            "1",
            "--repeats",
            "1",
            "--max-tokens",
            "6",
            "--protocol",
            "eagle-repo",
            "--dataset",
            str(data),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert result.exit_code == 0, result.output
    assert (
        "2 of 2 questions have up to 3 turns, but --protocol "
        "eagle-repo measures 2 turns: the later turns are not measured"
    ) in " ".join(result.output.split())
    rows = pd.read_csv(tmp_path / "o" / "questions.csv")
    assert sorted(set(rows.turn)) == [1, 2]
