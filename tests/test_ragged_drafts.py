"""The model-free proposer contract (runner/proposers/model_free.py): ragged drafts of 0..K tokens.

A scripted proposer drafts, at each point of a request, a prefix of the target's own greedy
continuation whose length (0..K) comes from a fixed pseudo-random rule, and sometimes spoils its
last token. Every runner (paged, with batches and preemption; contiguous; static) must then
emit plain greedy decoding token for token, and its counts must equal a simulation written
here from the greedy output alone: steps, drafted tokens, drafted steps, accepted, per position.
"""

from __future__ import annotations

import pytest
from conftest import MAX_TOKENS, run_contiguous

from alcheck.runner.config import RunnerConfig
from alcheck.runner.proposers.model_free import ModelFreeProposer


def _length(prompt_len: int, m: int, k: int) -> tuple[int, bool]:
    """(draft length 0..K, spoil its last token) at output length m: a fixed scramble."""
    h = (prompt_len * 7919 + m * 104729) % 1009
    return h % (k + 1), h % 5 == 0


class ScriptedProposer(ModelFreeProposer):
    def __init__(self, prompts, greedy, vocab: int):
        self.continuations = {tuple(p): g.output_ids for p, g in zip(prompts, greedy)}
        self.vocab = vocab
        self.finished: list[int] = []

    def propose_tokens(self, reqs, k):
        out = []
        for r in reqs:
            prompt = tuple(r.token_ids[: r.num_prompt_tokens])
            m = r.num_output_tokens
            n, spoil = _length(len(prompt), m, k)
            draft = list(self.continuations[prompt][m : m + n])
            if spoil and draft:
                draft[-1] = (draft[-1] + 1) % self.vocab
            out.append(draft)
        return out

    def request_finished(self, req):
        self.finished.append(req.request_id)


def simulate(prompt_len: int, greedy_out: list[int], k: int, vocab: int) -> dict:
    """The counts the runner must report, from the greedy output and the script alone."""
    steps = drafted = drafted_steps = accepted = 0
    per_pos = [0] * k
    m = 1  # the prefill's token
    while m < len(greedy_out):
        n, spoil = _length(prompt_len, m, k)
        draft = list(greedy_out[m : m + n])
        if spoil and draft:
            draft[-1] = (draft[-1] + 1) % vocab
        a = 0
        while a < len(draft) and draft[a] == greedy_out[m + a]:
            a += 1
        steps, drafted, drafted_steps, accepted = (
            steps + 1,
            drafted + len(draft),
            drafted_steps + bool(draft),
            accepted + a,
        )
        for i in range(a):
            per_pos[i] += 1
        m += a + 1
    return {
        "steps": steps,
        "drafted": drafted,
        "drafted_steps": drafted_steps,
        "accepted": accepted,
        "per_pos": per_pos,
    }


def _check(results, prompts, greedy, k, vocab):
    for i, (r, p, g) in enumerate(zip(results, prompts, greedy)):
        assert r.output_ids == g.output_ids, f"prompt {i}: output differs from plain greedy decoding"
        want = simulate(len(p), g.output_ids, k, vocab)
        got = {
            "steps": r.steps,
            "drafted": r.drafted,
            "drafted_steps": r.drafted_steps,
            "accepted": r.accepted,
            "per_pos": r.accepted_per_pos,
        }
        assert got == want, f"prompt {i}"


def _run(runner_cls, target, proposer, prompts, k, **cfg):
    cfg.setdefault("block_size", 4)
    runner = runner_cls(target.model, proposer, target.eos_token_ids, RunnerConfig(num_spec_tokens=k, **cfg))
    return runner.generate(prompts, MAX_TOKENS)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_paged_ragged_equals_greedy_and_simulation(pair, prompts, greedy, k):
    from alcheck.runner.paged import PagedRunner

    target, vocab = pair[0], pair[0].model.config.vocab_size
    proposer = ScriptedProposer(prompts, greedy, vocab)
    results = _run(PagedRunner, target, proposer, prompts, k)
    _check(results, prompts, greedy, k, vocab)
    assert sorted(proposer.finished) == list(range(len(prompts)))  # each once
    assert any(r.drafted_steps < r.steps for r in results)  # plain decoding steps happened


def test_paged_ragged_small_batches_and_preemption(pair, prompts, greedy):
    from alcheck.runner.paged import PagedRunner

    target, vocab, k = pair[0], pair[0].model.config.vocab_size, 4
    proposer = ScriptedProposer(prompts, greedy, vocab)
    results = _run(PagedRunner, target, proposer, prompts, k, max_batch_size=3, num_blocks=40)
    _check(results, prompts, greedy, k, vocab)
    assert sum(r.preemptions for r in results) > 0  # the pool was tight enough to preempt


def test_contiguous_and_static_ragged(pair, prompts, greedy):
    from alcheck.runner.static.runner import StaticRunner

    target, vocab, k = pair[0], pair[0].model.config.vocab_size, 3
    contiguous = run_contiguous(
        target.model,
        None,
        target.eos_token_ids,
        prompts,
        MAX_TOKENS,
        k,
        ScriptedProposer(prompts, greedy, vocab),
    )
    _check(contiguous, prompts, greedy, k, vocab)
    static = _run(StaticRunner, target, ScriptedProposer(prompts, greedy, vocab), prompts, k)
    _check(static, prompts, greedy, k, vocab)


def test_ragged_temperature_is_seeded(pair, prompts, greedy):
    from alcheck.runner.paged import PagedRunner

    target, vocab = pair[0], pair[0].model.config.vocab_size
    runs = [
        _run(
            PagedRunner, target, ScriptedProposer(prompts, greedy, vocab), prompts, 3, temperature=1.0, seed=5
        )
        for _ in range(2)
    ]
    assert [r.output_ids for r in runs[0]] == [r.output_ids for r in runs[1]]
    for r in runs[0]:
        assert sum(r.accepted_per_pos) == r.accepted <= r.drafted
        assert r.drafted_steps <= r.steps


def test_model_free_refuses_trees(pair):
    from alcheck.runner.paged import PagedRunner

    target = pair[0]
    with pytest.raises(ValueError, match="chains"):
        PagedRunner(
            target.model,
            ScriptedProposer([], [], 10),
            target.eos_token_ids,
            RunnerConfig(num_spec_tokens=2, topk=2, num_draft_tokens=4),
        )
