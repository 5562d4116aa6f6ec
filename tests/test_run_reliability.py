"""`alcheck run` refuses what it cannot do right: shared folders, non-finite options, half-made
folders, unreadable gate baselines; and questions.csv records each prompt's hash (issue 9)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import invoke_run, one_line_error

from alcheck.cli.main import cli
from alcheck.rundir.folder import LOCK_FILE, claim_run_dir

TINY = ["--repeats", "1", "--limit", "2", "--max-tokens", "6", "--block-size", "4", "--reference", "none"]


# -- one writer per folder ---------------------------------------------------------------------------


def test_a_run_on_a_folder_in_use_exits_2_naming_the_holder(pair_args, tmp_path):
    out = tmp_path / "busy"
    with claim_run_dir(out):  # as if another run were writing there
        result = invoke_run([*pair_args, *TINY, "--ks", "1", "--out", str(out)])
        one_line_error(result, f"in use by another alcheck run (pid {os.getpid()}")
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written


def _forked_run(args: list[str], log) -> int:
    """`alcheck run ARGS` in a forked child (torch is already imported here, so it starts at once)."""
    pid = os.fork()
    if pid:
        return pid
    code = 99
    try:
        sys.stdout = sys.stderr = open(log, "w", buffering=1)  # noqa: SIM115 - the child exits below
        cli.main(["run", *args], prog_name="alcheck")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdout.flush()
        os._exit(code)


def _wait(pid: int, timeout: float = 240) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("a forked run hung")


def test_two_runs_started_together_on_one_out(pair_args, tmp_path):
    out = tmp_path / "shared"
    pids = {
        k: _forked_run([*pair_args, *TINY, "--ks", str(k), "--out", str(out)], tmp_path / f"log{k}")
        for k in (1, 2)
    }
    done = {k: (_wait(pid), (tmp_path / f"log{k}").read_text()) for k, pid in pids.items()}
    winners = [k for k, (rc, _) in done.items() if rc == 0]
    assert len(winners) == 1, done
    ((loser_rc, loser_out),) = [v for k, v in done.items() if k not in winners]
    assert loser_rc == 2, loser_out
    assert "in use by another alcheck run (pid" in loser_out or "already holds a run" in loser_out
    rows = pd.read_csv(out / "questions.csv")
    assert set(rows.k) == set(winners) and len(rows) == 2  # only the winner's rows
    assert json.loads((out / "run.json").read_text())["config"]["ks"] == winners
    assert not (out / LOCK_FILE).exists()


def test_default_out_folders_of_one_second_do_not_collide(pair_args, tmp_path, monkeypatch):
    from alcheck.sweep import driver as sweep_mod

    monkeypatch.chdir(tmp_path)
    fixed = tmp_path / "results" / "runs" / "20261201-120000-target-eagle"
    monkeypatch.setattr(sweep_mod, "default_out_dir", lambda cfg: fixed)
    for _ in range(2):
        assert invoke_run([*pair_args, *TINY, "--ks", "1"]).exit_code == 0
    made = sorted((tmp_path / "results" / "runs").iterdir())
    assert len(made) == 2 and made[0] == fixed and made[1].name.startswith(fixed.name + "-")
    assert all((d / "run.json").is_file() for d in made)


# -- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--temperature", "nan"], "--temperature nan: must be a finite number"),
        (["--temperature", "inf"], "--temperature inf: must be a finite number"),
        (["--tolerance", "nan", "--gate", "demo"], "--tolerance nan: must be a finite number"),
        (["--tolerance", "-inf", "--gate", "demo"], "--tolerance -inf"),
        (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization nan"),
    ],
)
def test_non_finite_options_exit_2(pair_args, tmp_path, args, needle):
    out = tmp_path / "o"
    one_line_error(invoke_run([*pair_args, *TINY, *args, "--out", str(out)]), needle)
    assert not out.exists()


def test_max_batch_size_has_help_text():
    result = CliRunner().invoke(cli, ["run", "--help"], terminal_width=200)
    line = next(text for text in result.output.splitlines() if "--max-batch-size" in text)
    assert "requests" in line


# -- no half-made folders ------------------------------------------------------------------------


def test_unwritable_out_is_a_one_line_error(pair_args, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    one_line_error(invoke_run([*pair_args, *TINY, "--out", str(blocker / "run")]), "pass a writable --out")


def test_ctrl_c_while_loading_leaves_no_folder_and_no_resume_hint(pair_args, tmp_path, monkeypatch):
    from alcheck.models import loading

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loading, "load_target", interrupted)
    out = tmp_path / "new" / "run"
    result = invoke_run([*pair_args, *TINY, "--out", str(out)])
    assert result.exit_code == 130
    assert "--resume" not in result.output and "before any result was saved" in result.output
    assert not (tmp_path / "new").exists()
    monkeypatch.chdir(tmp_path)  # the default --out too
    assert invoke_run([*pair_args, *TINY]).exit_code == 130
    assert not (tmp_path / "results").exists()


def test_a_failed_load_removes_only_the_empty_folder_it_made(pair_dirs, tmp_path):
    target = shutil.copytree(pair_dirs[0], tmp_path / "target")
    (target / "model.safetensors").unlink()
    args = ["--target", str(target), "--draft", str(pair_dirs[1]), *TINY]
    result = invoke_run([*args, "--out", str(tmp_path / "made")])
    assert result.exit_code == 2 and "target" in result.output
    assert not (tmp_path / "made").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    assert invoke_run([*args, "--out", str(kept)]).exit_code == 2
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]


# -- --gate is checked first ---------------------------------------------------------------------------


@pytest.fixture
def no_sweep(monkeypatch):
    from alcheck.sweep import driver as sweep_mod

    def refuse(self, *args, **kwargs):
        raise AssertionError("the sweep started before the gate baseline was checked")

    monkeypatch.setattr(sweep_mod.Sweep, "prepare", refuse)


def test_gate_baseline_is_validated_before_the_sweep(pair_args, tmp_path, no_sweep):
    out = tmp_path / "o"
    base = [*pair_args, *TINY, "--ks", "1-2", "--out", str(out)]
    one_line_error(invoke_run([*base, "--gate", str(tmp_path / "missing.json")]), "baseline not found")
    broken = tmp_path / "broken.json"
    broken.write_text('{"values": {"1": 1.5,')
    one_line_error(invoke_run([*base, "--gate", str(broken)]), "not valid JSON")
    other_ks = tmp_path / "k7.json"
    other_ks.write_text(json.dumps({"name": "k7", "values": {"7": 2.0}}))
    one_line_error(
        invoke_run([*base, "--gate", str(other_ks)]), "the baseline has K=7 but this run measures K=1,2"
    )
    nan = tmp_path / "nan.json"
    nan.write_text('{"name": "n", "values": {"1": NaN}}')
    one_line_error(invoke_run([*base, "--gate", str(nan)]), "NaN")
    assert not out.exists()


def test_run_then_gate_uses_the_checked_baseline(pair_args, tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"name": "low", "values": {"1": 1.0}, "limit": 2}))  # TINY's questions
    result = invoke_run([*pair_args, *TINY, "--ks", "1", "--gate", str(ref), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output


# -- prompt hashes ---------------------------------------------------------------------------------------


def test_questions_csv_records_the_prompt_hash(pair_dirs, pair_args, tmp_path):
    from transformers import AutoTokenizer

    from alcheck.paths import MT_BENCH_FILE
    from alcheck.prompts.tokenizer import prompt_hash
    from alcheck.report.run_io import written_columns

    out = tmp_path / "h"
    assert invoke_run([*pair_args, *TINY, "--ks", "1-2", "--out", str(out)]).exit_code == 0
    rows = pd.read_csv(out / "questions.csv", dtype={"prompt_hash": str})
    assert list(rows.columns) == written_columns()
    assert list(rows.columns).index("prompt_hash") == list(rows.columns).index("prompt_tokens") + 1
    tok = AutoTokenizer.from_pretrained(str(pair_dirs[0]))
    for line in MT_BENCH_FILE.read_text().splitlines()[:2]:
        q = json.loads(line)
        ids = tok.apply_chat_template(
            [{"role": "user", "content": q["turns"][0]}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        mine = rows[rows.question_id == q["question_id"]]
        assert len(mine) == 2 and set(mine.prompt_hash) == {prompt_hash(ids)}  # same prompt at every K
        assert set(mine.prompt_tokens) == {len(ids)}


def test_resume_of_a_run_written_before_prompt_hash(pair_args, tmp_path, monkeypatch):
    from alcheck.executors import local as local_mod
    from alcheck.report.run_io import load_run

    out = tmp_path / "old"
    real = local_mod.run_cell

    def stop_after_first(plan, backend, k, repeat, *rest):
        if k != 1:
            raise KeyboardInterrupt
        return real(plan, backend, k, repeat, *rest)

    monkeypatch.setattr(local_mod, "run_cell", stop_after_first)
    assert invoke_run([*pair_args, *TINY, "--ks", "1-2", "--out", str(out)]).exit_code == 130
    old = pd.read_csv(out / "questions.csv", dtype=str, keep_default_na=False).drop(columns=["prompt_hash"])
    old.to_csv(out / "questions.csv", index=False)  # as an older alcheck wrote it
    assert load_run(out).questions.shape[0] == 2  # old runs still load
    monkeypatch.setattr(local_mod, "run_cell", real)
    result = invoke_run(["--resume", str(out)])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "questions.csv", dtype={"prompt_hash": str})
    assert rows[rows.k == 1].prompt_hash.isna().all() and rows[rows.k == 2].prompt_hash.notna().all()
    run = load_run(out)
    assert run.ks == [1, 2] and len(run.questions) == 4


def test_run_gate_against_a_baseline_with_other_settings_fails_before_the_sweep(
    pair_args, tmp_path, monkeypatch
):
    """A drop against a baseline measured with other max_tokens could come from the settings:
    `run --gate` refuses it up front (exit 2), before any weights load."""
    from alcheck.backends.builtin import BuiltinBackend

    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"name": "long", "values": {"1": 1.5}, "max_tokens": 512}))
    monkeypatch.setattr(BuiltinBackend, "load", lambda self: pytest.fail("weights loaded"))
    result = invoke_run([*pair_args, *TINY, "--ks", "1", "--gate", str(ref), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "max_tokens 512" in result.output and "--force" in result.output


# -- one line, not a traceback or a huge allocation (issue 24) ------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--seed", str(2**63)], f"--seed {2**63}: must be an integer in 0..2^63-1"),
        (["--seed", str(2**64)], f"--seed {2**64}: must be an integer in 0..2^63-1"),
        (["--num-blocks", "100000000"], "--num-blocks 100000000 x --block-size 4 is a KV cache of"),
        (["--block-size", "100000000"], "--block-size 100000000 is longer than the target's context of 2048"),
    ],
)
def test_huge_or_out_of_range_numbers_exit_2_in_one_line(pair_args, tmp_path, args, needle):
    out = tmp_path / "o"
    one_line_error(invoke_run([*pair_args, *TINY, "--ks", "1", *args, "--out", str(out)]), needle)
    assert not out.exists()


def test_seed_just_below_2_63_runs_at_temperature(pair_args, tmp_path):
    result = invoke_run(
        [
            *pair_args,
            *TINY,
            "--ks",
            "2",
            "--seed",
            str(2**63 - 1),
            "--temperature",
            "0.8",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert result.exit_code == 0, result.output


def test_tokenizer_larger_than_the_config_vocabulary(tmp_path):
    """Prompt ids the model cannot embed: one line before any weight loads, not an IndexError mid-run."""
    from alcheck.testing.tiny import make_tiny_eagle, make_tiny_target

    small = make_tiny_target(tmp_path / "t", num_layers=1, vocab_size=300)
    head = make_tiny_eagle(tmp_path / "e", small)
    big = make_tiny_target(tmp_path / "big", num_layers=1, vocab_size=320)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(big / name, small / name)
    result = invoke_run(
        ["--target", str(small), "--draft", str(head), *TINY, "--ks", "1", "--out", str(tmp_path / "o")]
    )
    one_line_error(result, f"but {small / 'config.json'} has vocab_size 300 (the tokenizer has 320 tokens)")


@pytest.mark.parametrize(
    "value, needle",
    [
        ("1e9", "--n-boot 1e9: use a whole number from 100 to 100,000"),
        ("1000000000", "--n-boot 1000000000"),
        ("abc", "--n-boot 'abc': not a number"),
        ("2.5e2", None),
        ("1e4", None),
    ],
)
def test_compare_n_boot_is_bounded(pair_args, tmp_path_factory, value, needle):
    out = tmp_path_factory.mktemp("nb") / "r"
    assert invoke_run([*pair_args, *TINY, "--ks", "1", "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["compare", str(out), str(out), "--n-boot", value])
    if needle is None:
        assert result.exit_code == 0, result.output
    else:
        one_line_error(result, needle)
