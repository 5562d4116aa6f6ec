"""A served n-gram answer replayed (backends/engines/replay.py) against the built-in runner's own
counts: the replay must find the runner's steps and drafted steps exactly, and its accepted drafts
up to those past the answer's end, on answers that stop inside accepted runs (EOS and max_tokens).
The counts-only estimate (engines/steps.py) reads those answers low; the replay must not. A server
whose counts disagree with the stated rule is refused in one line."""

from __future__ import annotations

import itertools

from conftest import expect_error
from test_engine_client import engine_run, fake_server, vllm_routes  # noqa: F401 (fixture)
from test_ngram_oracle import echo_prompts, families, patterned_prompts  # noqa: F401 (fixture)

from alcheck.backends.engines.replay import check_counts, replay
from alcheck.backends.engines.steps import steps_from_tokens
from alcheck.runner.proposers.ngram_rules import NgramSettings, propose


def replayed(settings, prompt, output, k, eos=frozenset()):
    return replay(lambda ctx: propose(settings, ctx, k, eos), prompt, output)


def runner_rows(target, prompts, k, settings, max_tokens):
    from alcheck.runner.config import RunnerConfig
    from alcheck.runner.paged import PagedRunner
    from alcheck.runner.proposers.ngram import NgramProposer

    proposer = NgramProposer(settings, target.eos_token_ids)
    config = RunnerConfig(num_spec_tokens=k, block_size=4)
    runner = PagedRunner(target.model, proposer, target.eos_token_ids, config)
    return runner.generate(prompts, max_tokens)


def test_the_replay_finds_the_runners_steps(families):  # noqa: F811
    estimate_low = crossed = 0
    settings = NgramSettings("vllm", 1, 3)
    for family, k in itertools.product(("llama-markov", "qwen3"), (1, 3, 5)):
        _, target, _ = families(family)
        vocab = target.model.config.vocab_size
        prompts = patterned_prompts(vocab, n=4, seed=5) + echo_prompts(target, seed=5)
        for max_tokens in range(6, 26, 3):  # stops at every offset within a step
            for i, (prompt, r) in enumerate(
                zip(prompts, runner_rows(target, prompts, k, settings, max_tokens))
            ):
                found = replayed(settings, prompt, r.output_ids, k)
                where = f"{family} K={k} max_tokens {max_tokens} prompt {i}"
                assert (found.steps, found.drafted_steps) == (r.steps, r.drafted_steps), where
                check_counts(found, r.drafted_steps, r.accepted, where, "vllm 1..3")
                crossed += r.accepted > found.accepted
                estimate = steps_from_tokens(len(r.output_ids), r.accepted, r.drafted_steps, k, where)
                estimate_low += estimate < r.steps
    # answers that stopped inside an accepted run (drafts accepted past the end: the Llama) and answers
    # the counts alone read low (a plain step, then a last step cut at the stop: the Qwen3) both occur
    assert crossed > 0 and estimate_low > 0, (crossed, estimate_low)


def test_a_plain_answer_and_an_empty_one():
    # nothing in the context repeats: every step is a plain one
    found = replayed(NgramSettings("vllm", 2, 2), [1, 2, 3], [4, 5, 6, 7], 3)
    assert (found.steps, found.drafted_steps, found.accepted, found.past_end) == (3, 0, 0, 0)
    assert replayed(NgramSettings("vllm", 2, 2), [1, 2, 3], [], 3).steps == 0
    assert replayed(NgramSettings("vllm", 2, 2), [1, 2, 3], [9], 3).steps == 0  # the prefill's token only


def test_counts_of_another_rule_are_refused():
    # context 1 2 3 1 2: sizes 2..2 find "1 2" and propose 3 1 2; the answer ends after 3 1
    found = replayed(NgramSettings("vllm", 2, 2), [1, 2, 3, 1], [2, 3, 1], 3)
    assert (found.steps, found.drafted_steps, found.accepted, found.past_end) == (1, 1, 2, 1)
    check_counts(found, 1, 3, "here", "rule")  # the third draft accepted past the end: fine
    expect_error(lambda: check_counts(found, 2, 2, "srv (K=3)", "stated"), "drafted at 2 steps", "at 1 steps")
    expect_error(lambda: check_counts(found, 1, 4, "srv", "stated"), "accepting 4", "+ up to 1 past its end")
    expect_error(lambda: check_counts(found, 1, 1, "srv", "stated"), "--prompt-lookup-min")


def test_a_server_that_drafts_by_another_rule_is_refused(pair_dirs, fake_server, tmp_path):  # noqa: F811
    from alcheck.backends.engine_client import PROBE_TEXT
    from alcheck.prompts.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(pair_dirs[0], "target")
    ids = (5, 6, 7)  # vllm_routes' answer: 2 drafted steps accepting 2, whatever the prompt
    found = replayed(NgramSettings("vllm", 1, 3), tokenizer(PROBE_TEXT).input_ids, list(ids), 2)
    assert found.drafted_steps != 2  # the stated rule cannot have drafted those steps
    url = fake_server(vllm_routes(tokenizer, metrics=True, ids=ids))
    ngram = ["--method", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]
    _, result = engine_run(pair_dirs, tmp_path, "other-rule", "vllm", url, *ngram)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "does not draft by that rule" in message and "--prompt-lookup-max 3" in message, message
