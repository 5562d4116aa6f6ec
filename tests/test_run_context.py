"""Length against the target's context, checked before any weight loads (issue 9 item 7)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import invoke_run, run_spec

from alcheck.cli.main import cli
from alcheck.models.compat import positions_needed

SMALL = ["--repeats", "1", "--block-size", "4", "--reference", "none"]


@pytest.fixture
def no_weights(monkeypatch):
    """Any weight load fails the test: these checks must come before it."""
    from alcheck.models import loading

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded before the check")

    monkeypatch.setattr(loading, "load_target", refuse)
    monkeypatch.setattr(loading, "load_eagle", refuse)


@pytest.fixture(scope="module")
def short_pair(pair_dirs, tmp_path_factory):
    """The copy-layer pair with a target whose context is 128 positions."""
    root = tmp_path_factory.mktemp("short")
    target = shutil.copytree(pair_dirs[0], root / "target")
    raw = json.loads((target / "config.json").read_text())
    raw["max_position_embeddings"] = 128
    (target / "config.json").write_text(json.dumps(raw))
    return ["--target", str(target), "--draft", str(pair_dirs[1])]


def write_dataset(path, questions):
    path.write_text(
        "".join(
            json.dumps({"question_id": qid, "category": "test", "turns": turns}) + "\n"
            for qid, turns in questions
        )
    )
    return path


def prompt_len(pair_dirs, turns, protocol="vllm-example", answers=()):
    from alcheck.prompts.protocols import build_prompt_ids, get_protocol
    from alcheck.prompts.tokenizer import load_tokenizer

    tok = load_tokenizer(pair_dirs[0], "target")
    return len(build_prompt_ids(tok, get_protocol(protocol), turns, list(answers)))


# -- the bound itself, against the runner's own positions -------------------------------------------


def _max_positions(monkeypatch):
    from alcheck.runner.paged import PagedRunner

    seen: dict[int, int] = {}
    real = PagedRunner.attn_batch

    def spy(self, reqs, starts, lens, layer):
        for r, s, n in zip(reqs, starts, lens):
            seen[r.request_id] = max(seen.get(r.request_id, -1), s + n - 1)
        return real(self, reqs, starts, lens, layer)

    monkeypatch.setattr(PagedRunner, "attn_batch", spy)
    return seen


@pytest.mark.parametrize("k", [0, 1, 3])
def test_positions_needed_bounds_the_runner(pair, prompts, monkeypatch, k):
    target, head = pair
    seen = _max_positions(monkeypatch)
    max_tokens = 17
    results, _ = run_spec(target.model, head, [], prompts, max_tokens=max_tokens, k=k)  # no EOS: full length
    for i, (prompt, res) in enumerate(zip(prompts, results)):
        assert len(res.output_ids) == max_tokens
        assert seen[i] + 1 <= positions_needed(len(prompt), max_tokens, k)
    if k == 0:  # one token per step: the last step is exactly at the bound
        assert all(seen[i] + 1 == positions_needed(len(p), max_tokens, 0) for i, p in enumerate(prompts))


@pytest.mark.parametrize("k", [1, 4])
def test_positions_needed_is_tight_when_nothing_is_accepted(pair, prompts, monkeypatch, k):
    from test_runner_oracles import ContinuationProposer, _continuations

    target, _ = pair
    max_tokens = 13
    seqs = _continuations(target, prompts, max_tokens + k + 1, [])
    wrong = ContinuationProposer(seqs, target.model.config.vocab_size, wrong=True)
    seen = _max_positions(monkeypatch)
    results, _ = run_spec(target.model, None, [], prompts, max_tokens=max_tokens, k=k, proposer=wrong)
    assert all(r.accepted == 0 for r in results)
    assert all(seen[i] + 1 == positions_needed(len(p), max_tokens, k) for i, p in enumerate(prompts))


# -- refusing before the weights ---------------------------------------------------------------------


def test_max_tokens_past_the_context_exits_2_before_loading(pair_dirs, short_pair, tmp_path, no_weights):
    from alcheck.paths import MT_BENCH_FILE

    questions = [json.loads(line) for line in MT_BENCH_FILE.read_text().splitlines()[:3]]
    lengths = {q["question_id"]: prompt_len(pair_dirs, q["turns"][:1]) for q in questions}
    longest = max(lengths, key=lengths.get)
    out = tmp_path / "o"
    result = invoke_run(
        [*short_pair, *SMALL, "--ks", "2", "--limit", "3", "--max-tokens", "400", "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1
    assert "context (max_position_embeddings) is 128" in line and "--skip-long" in line
    need = positions_needed(lengths[longest], 400, 2)
    assert (
        f"question {longest} turn 1 needs {need} positions ({lengths[longest]} prompt tokens + 400 new"
        in line
    )
    assert "3 of 3 questions do not fit" in line
    assert not out.exists()  # the folder it created is gone again


def test_a_billion_max_tokens_exits_2_without_allocating(pair_args, tmp_path, no_weights):
    result = invoke_run(
        [
            *pair_args,
            *SMALL,
            "--ks",
            "5",
            "--limit",
            "2",
            "--max-tokens",
            str(10**9),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert result.exit_code == 2, result.output
    assert f"+ {10**9} new + 4 for K=5's drafts" in result.output
    assert "is 2048" in result.output


def test_a_50000_token_prompt_exits_2_naming_it(pair_dirs, pair_args, tmp_path, no_weights):
    long_text = "speculative decoding " * 25_000
    data = write_dataset(tmp_path / "q.jsonl", [(1, ["short question"]), (2, [long_text])])
    assert prompt_len(pair_dirs, [long_text]) >= 50_000
    result = invoke_run(
        [*pair_args, *SMALL, "--ks", "1", "--dataset", str(data), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2, result.output
    assert "question 2 turn 1 needs" in result.output and "1 of 2 questions" in result.output


def test_a_missing_draft_fails_before_the_target_weights(pair_dirs, tmp_path, no_weights):
    result = invoke_run(
        [
            "--target",
            str(pair_dirs[0]),
            "--draft",
            str(tmp_path / "nope"),
            *SMALL,
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert result.exit_code == 2 and "draft" in result.output and "nope" in result.output
    assert not (tmp_path / "o").exists()


def test_a_draft_for_another_target_fails_before_the_weights(pair_dirs, tmp_path, no_weights):
    draft = shutil.copytree(pair_dirs[1], tmp_path / "draft")
    raw = json.loads((draft / "config.json").read_text())
    raw["vocab_size"] += 1
    (draft / "config.json").write_text(json.dumps(raw))
    result = invoke_run(
        ["--target", str(pair_dirs[0]), "--draft", str(draft), *SMALL, "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and f"vocab_size={raw['vocab_size']}" in result.output


# -- --skip-long ------------------------------------------------------------------------------------


def test_skip_long_skips_counts_and_reports(pair_dirs, short_pair, tmp_path):
    texts = {1: "hi", 2: "why is the sky blue " * 30, 3: "the sea"}
    data = write_dataset(tmp_path / "q.jsonl", [(qid, [t]) for qid, t in texts.items()])
    max_tokens, k = 20, 2
    lengths = {qid: prompt_len(pair_dirs, [t]) for qid, t in texts.items()}
    fits = {qid for qid, n in lengths.items() if positions_needed(n, max_tokens, k) <= 128}
    assert fits == {1, 3}  # the data is what the test claims
    out = tmp_path / "run"
    args = [*short_pair, *SMALL, "--ks", f"1-{k}", "--dataset", str(data), "--max-tokens", str(max_tokens)]
    refused = invoke_run([*args, "--out", str(out)])
    assert refused.exit_code == 2 and "question 2 turn 1" in refused.output
    result = invoke_run([*args, "--skip-long", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("1 question turn skipped by --skip-long: longer than the target's context of 128") == 2
    meta = json.loads((out / "run.json").read_text())
    assert meta["config"]["skip_long"] is True
    assert meta["context"]["limit"] == 128
    assert meta["context"]["skipped"] == [
        {
            "question_id": 2,
            "turn": 1,
            "prompt_tokens": lengths[2],
            "positions": positions_needed(lengths[2], max_tokens, k),
        }
    ]
    rows = pd.read_csv(out / "questions.csv")
    assert set(rows.question_id) == {1, 3} and len(rows) == 2 * 2  # K x kept questions
    report = CliRunner().invoke(cli, ["report", str(out)])
    assert report.exit_code == 0, report.output
    md = (out / "report.md").read_text()
    assert "## Skipped (longer than the context)" in md and "1 question turn did not fit" in md


def test_a_second_turn_that_may_not_fit_is_refused_or_skipped(pair_dirs, tmp_path):
    turns = ["name a colour", "and another one"]
    data = write_dataset(tmp_path / "q.jsonl", [(7, turns)])
    max_tokens, k = 10, 1
    first = prompt_len(pair_dirs, turns[:1], "eagle-repo")
    second = prompt_len(pair_dirs, turns, "eagle-repo", ["x"]) + max_tokens
    # a context that holds turn 1, but not turn 2 with a full-length first answer
    limit = positions_needed(first, max_tokens, k) + 1
    assert positions_needed(second, max_tokens, k) > limit
    target = shutil.copytree(pair_dirs[0], tmp_path / "target")
    raw = json.loads((target / "config.json").read_text())
    raw["max_position_embeddings"] = limit
    (target / "config.json").write_text(json.dumps(raw))
    args = [
        "--target",
        str(target),
        "--draft",
        str(pair_dirs[1]),
        *SMALL,
        "--ks",
        str(k),
        "--protocol",
        "eagle-repo",
        "--dataset",
        str(data),
        "--max-tokens",
        str(max_tokens),
    ]
    refused = invoke_run([*args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "question 7 turn 2" in refused.output
    assert "counting each earlier answer at --max-tokens" in refused.output
    result = invoke_run([*args, "--skip-long", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "b" / "questions.csv")
    assert list(rows.turn) == [1]
    skipped = json.loads((tmp_path / "b" / "run.json").read_text())["context"]["skipped"]
    assert [(s["question_id"], s["turn"]) for s in skipped] == [(7, 2)]


def test_a_turn_that_outgrows_its_estimate_is_checked_when_built(pair_dirs, pair_args, tmp_path, monkeypatch):
    """Re-tokenized answers can exceed max_tokens tokens; the built turn-2 prompt is checked again."""
    from alcheck.sweep import cells

    monkeypatch.setattr(cells, "answer_text", lambda *a, **kw: "very long answer " * 400)
    data = write_dataset(tmp_path / "q.jsonl", [(5, ["one", "two"]), (6, ["three", "four"])])
    args = [
        *pair_args,
        *SMALL,
        "--ks",
        "1",
        "--protocol",
        "eagle-repo",
        "--dataset",
        str(data),
        "--max-tokens",
        "8",
    ]
    refused = invoke_run([*args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "turn 2 grew to" in refused.output and "2048" in refused.output
    result = invoke_run([*args, "--skip-long", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "2 question turns skipped" in " ".join(result.output.split())
    meta = json.loads((tmp_path / "b" / "run.json").read_text())
    assert [(s["question_id"], s["turn"]) for s in meta["cells"][0]["skipped"]] == [(5, 2), (6, 2)]
    assert list(pd.read_csv(tmp_path / "b" / "questions.csv").turn) == [1, 1]


def test_a_grown_later_turn_is_skipped_at_every_k_alike(pair_dirs, pair_args, tmp_path, monkeypatch):
    """A turn-2 prompt that fits at K=1 but not at K=3 is skipped in both cells: every K measures
    the same question turns (the check uses the sweep's largest K, as the sweep's bound does)."""
    from alcheck.sweep import cells

    turns, max_tokens = ["one", "two"], 8
    limit = 2048  # the pair's context
    # the answer's length at which turn 2 needs exactly the context at K=1 (one position short at K=3)
    fits_k1 = [
        n
        for n in range(600, 1200)
        if positions_needed(prompt_len(pair_dirs, turns, "eagle-repo", ["ab " * n]), max_tokens, 1) == limit
    ]
    assert fits_k1, "no answer length puts turn 2 exactly at the context"
    answer = "ab " * fits_k1[0]
    monkeypatch.setattr(cells, "answer_text", lambda *a, **kw: answer)
    data = write_dataset(tmp_path / "q.jsonl", [(5, turns)])
    result = invoke_run(
        [
            *pair_args,
            *SMALL,
            "--ks",
            "1,3",
            "--protocol",
            "eagle-repo",
            "--dataset",
            str(data),
            "--max-tokens",
            str(max_tokens),
            "--skip-long",
            "--out",
            str(tmp_path / "b"),
        ]
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "b" / "questions.csv")
    assert sorted(zip(rows.k, rows.turn)) == [(1, 1), (3, 1)]


def test_a_huge_k_is_told_to_lower_k_not_max_tokens(pair_args, tmp_path):
    """K - 1 positions for the drafts dwarf --max-tokens: lowering --max-tokens would not help (issue 24)."""
    from click.testing import CliRunner

    from alcheck.cli.main import cli

    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "5000",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "8",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "lower the largest K in --ks (K=5000)" in message and "lower --max-tokens" not in message
