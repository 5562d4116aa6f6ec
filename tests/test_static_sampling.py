"""Temperature > 0 in the static runner (issue 22): the onehot rule from pre-drawn uniforms
(runner/static/sampling.py). Its random stream is not the eager runner's, so the oracle is the
target distribution: exact accept/reject on one-hot targets, chi-square against target-only
sampling, and the lossless permutation test on whole generations. The conventions without a
device form (sampled drafts, sampled trees) run the eager step and equal --runner paged exactly."""

from __future__ import annotations

import pytest
import torch
from test_sampling_onehot import CASES, CHI2_DF5_ALPHA_1E4, ROWS, VOCAB, chi2, dist, one_hot_logits

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner
from alcheck.runner.static.runner import StaticRunner
from alcheck.runner.static.sampling import onehot_accept_uniform, sample_from


@pytest.mark.parametrize("target_tokens, draft_tokens, accepted, emitted", CASES)
def test_exact_accept_reject(target_tokens, draft_tokens, accepted, emitted):
    g = torch.Generator().manual_seed(0)
    logits = one_hot_logits(target_tokens)[None].expand(200, -1, -1)
    drafts = torch.tensor(draft_tokens)[None].expand(200, -1)
    for temperature in (1.0, 0.5):
        got_a, got_next = onehot_accept_uniform(drafts, logits, temperature, torch.rand(200, 4, generator=g))
        assert got_a.tolist() == [accepted] * 200 and got_next.tolist() == [emitted] * 200


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_output_follows_the_target_distribution(k, temperature):
    g = torch.Generator().manual_seed(300 + k)
    p = torch.stack([dist(g) for _ in range(k + 1)])
    q = torch.stack([dist(g) for _ in range(max(k, 1))])
    drafts = q.argmax(-1)[None].expand(ROWS, -1)[:, :k]
    logits = (p.log() * temperature).expand(ROWS, k + 1, VOCAB)
    accepted, nxt = onehot_accept_uniform(drafts, logits, temperature, torch.rand(ROWS, k + 1, generator=g))
    first = torch.where(accepted >= 1, drafts[:, 0], nxt) if k else nxt
    assert chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    if k:
        ok = accepted >= 1
        assert abs(ok.double().mean() - p[0, drafts[0, 0]]) < 0.01  # acceptance is p(d)
    if k > 1:
        second = torch.where(accepted[ok] >= 2, drafts[ok, 1], nxt[ok])
        assert chi2(second, p[1]) < CHI2_DF5_ALPHA_1E4


def test_inverse_cdf_never_draws_a_token_without_mass():
    weights = (
        torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0], [0.0, 0.0, 1e-30, 0.0, 0.0]]).expand(3, 2, 5).reshape(6, 5)
    )
    u = torch.tensor([0.0, 0.0, 0.5, 0.5, 1 - 2**-24, 1 - 2**-24])
    assert sample_from(weights, u).tolist() == [1, 2, 3, 2, 3, 2]


def run(cls, pair, prompts, k, **cfg):
    target, head = pair
    runner = cls(
        target.model,
        proposer_for(head) if k else None,
        target.eos_token_ids,
        RunnerConfig(num_spec_tokens=k, block_size=4, **cfg),
    )
    return runner.generate(prompts, 40), runner


def test_seeded_runs_repeat_and_counts_stay_consistent(pair, prompts):
    one, runner = run(StaticRunner, pair, prompts, 3, temperature=1.0, seed=5)
    again, _ = run(StaticRunner, pair, prompts, 3, temperature=1.0, seed=5)
    other, _ = run(StaticRunner, pair, prompts, 3, temperature=1.0, seed=6)
    assert runner.static_steps > 0
    assert [r.output_ids for r in one] == [r.output_ids for r in again] != [r.output_ids for r in other]
    assert all(sum(r.accepted_per_pos) == r.accepted and r.drafted == 3 * r.steps for r in one)


@pytest.mark.parametrize("cfg", [{"draft_sampling": "sampled"}, {"topk": 2, "num_draft_tokens": 5}])
def test_conventions_without_a_device_form_run_the_eager_step(pair, prompts, cfg):
    static, runner = run(StaticRunner, pair, prompts, 3, temperature=1.0, seed=5, **cfg)
    paged, _ = run(PagedRunner, pair, prompts, 3, temperature=1.0, seed=5, **cfg)
    assert runner.static_steps == 0
    assert [(r.output_ids, r.steps, r.accepted) for r in static] == [
        (r.output_ids, r.steps, r.accepted) for r in paged
    ]


def test_whole_generations_pass_the_lossless_test(pair):
    """32 prompts x 2 seeded draws at temperature 1 against target-only samples (metrics/lossless.py):
    one seeded draw, whose p-value is uniform under losslessness (measured p = 0.2)."""
    import random

    from alcheck.metrics.lossless import permutation_test
    from alcheck.runner.lossless_check import reference_outputs, statistics

    target = pair[0]
    rng = random.Random(0)
    vocab = target.model.config.vocab_size
    prompts = [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(32)]
    draws = [run(StaticRunner, pair, prompts, 3, temperature=1.0, seed=40 + j)[0] for j in range(2)]
    outputs = [[draw[i].output_ids for draw in draws] for i in range(len(prompts))]
    reference = reference_outputs(target.model, target.eos_token_ids, prompts, 2, 40, 1.0, seed=5)
    result = permutation_test(
        statistics(target.model, prompts, outputs, 1.0),
        statistics(target.model, prompts, reference, 1.0),
        seed=5,
    )
    assert result.lossless, result.line()
