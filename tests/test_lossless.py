"""The temperature > 0 lossless check (issue 23): the statistics (alcheck/metrics/lossless.py) and the
target's scores (alcheck/runner/target_scoring.py). `alcheck serve` under both draft-sampling
conventions passing and the deliberately lossy serve (alcheck/serve/lossy.py) failing, through
`alcheck run --engine --check-lossless`: tests/test_sampler_check.py. The false-alarm rate at full
size is bench/bench_lossless.py's (results/bench-lossless.md)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from alcheck.metrics.lossless import STATISTICS, mid_ranks, min_p_value, permutation_test, sequence_statistics

TEMPERATURE = 1.0


def test_sequence_statistics_by_hand():
    # two tokens: residuals (log p + H) = (-1 + 0.8) + (-0.5 + 0.6) = -0.1 over sqrt(0.3 + 0.2);
    # top-1: (1 - 0.6) + (0 - 0.5) = -0.1 over sqrt(0.6 * 0.4 + 0.5 * 0.5)
    surprise, top1 = sequence_statistics([-1.0, -0.5], [0.8, 0.6], [0.3, 0.2], [0.6, 0.5], [True, False])
    assert surprise == pytest.approx(-0.1 / 0.5**0.5)
    assert top1 == pytest.approx(-0.1 / (0.24 + 0.25) ** 0.5)
    assert sequence_statistics([0.0], [0.0], [0.0], [1.0], [True]) == (
        0.0,
        0.0,
    )  # a certain token says nothing
    with pytest.raises(ValueError):
        sequence_statistics([], [], [], [], [])


def test_mid_ranks_share_ties():
    assert mid_ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]


def simulated(rng, prompts: int, shift: float, samples: int = 2):
    """Per-sequence statistics: prompt effects (which the stratification removes) plus noise; the engine
    side moved by `shift` standard deviations in the top-1 statistic."""
    engine, reference = {}, {}
    for i in range(prompts):
        level = rng.normal(0, 2, size=2)
        engine[i] = [tuple(level + rng.normal(0, 1, 2) + [0, shift]) for _ in range(samples)]
        reference[i] = [tuple(level + rng.normal(0, 1, 2)) for _ in range(samples)]
    return engine, reference


def test_false_alarms_near_alpha_and_power_against_a_shift():
    rng = np.random.default_rng(5)
    null = [permutation_test(*simulated(rng, 16, 0.0), n_resamples=199, seed=r).p_value for r in range(300)]
    rate = np.mean(np.array(null) < 0.05)
    assert 0.02 <= rate <= 0.08, rate  # exact test: 0.05 +- 2.3 binomial SE (300 replicates)
    found = [
        permutation_test(*simulated(rng, 16, 1.5), n_resamples=199, seed=r).p_value < 0.05 for r in range(100)
    ]
    assert np.mean(found) >= 0.95  # a 1.5 SD shift over 32 + 32 sequences: z about 6 before ranking


def test_result_fields_and_the_smallest_p():
    rng = np.random.default_rng(0)
    res = permutation_test(*simulated(rng, 8, 10.0), n_resamples=999)
    assert res.p_value == pytest.approx(min_p_value(999)) and not res.lossless and res.driver == "top1"
    assert set(res.z) == set(STATISTICS) and res.prompts == 8 and res.engine_sequences == 16
    # total separation: engine ranks 3, 4 of 4 in every prompt, a mean rank difference of 2; a random
    # 2 + 2 split gives -2, -1, 0, 0, 1, 2 (variance 10/6), averaged over 8 prompts
    assert res.z["top1"] == pytest.approx(2 / (10 / 6 / 8) ** 0.5, rel=0.05)
    assert "NOT lossless" in res.line()
    with pytest.raises(ValueError):
        permutation_test({0: [(0.0, 0.0)]}, {1: [(0.0, 0.0)]})


# -- the target's scores ----------------------------------------------------------------------------


def test_token_scores_equal_transformers_softmax(pair_dirs, pair):
    from transformers import LlamaForCausalLM

    from alcheck.runner.target_scoring import token_scores

    hf = LlamaForCausalLM.from_pretrained(pair_dirs[0], torch_dtype=torch.float32).eval()
    prompt, output, temp = [7, 19, 33, 101, 5], [44, 45, 200, 3], 0.7
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + output[:-1]])).logits[0, len(prompt) - 1 :].double() / temp
    p = torch.softmax(logits, -1)
    scores = token_scores(pair[0].model, prompt, output, temp)
    logp = torch.log(p)
    assert scores.logprob == pytest.approx(logp[range(4), output].tolist(), abs=1e-4)
    assert scores.entropy == pytest.approx((-(p * logp).sum(-1)).tolist(), abs=1e-4)
    var = (p * logp**2).sum(-1) - (p * logp).sum(-1) ** 2
    assert scores.logprob_var == pytest.approx(var.tolist(), abs=1e-3)
    assert scores.top_prob == pytest.approx(p.max(-1).values.tolist(), abs=1e-5)
    assert scores.is_top == (p.argmax(-1) == torch.tensor(output)).tolist()


def test_target_samples_are_seeded(pair):
    from alcheck.runner.target_scoring import target_samples

    target = pair[0]
    prompts = [[9, 8, 7], [50, 60, 70, 80]]
    one = target_samples(target.model, target.eos_token_ids, prompts, 12, TEMPERATURE, seed=3)
    assert one == target_samples(target.model, target.eos_token_ids, prompts, 12, TEMPERATURE, seed=3)
    assert one != target_samples(target.model, target.eos_token_ids, prompts, 12, TEMPERATURE, seed=4)
    assert all(1 <= len(o) <= 12 for o in one)


# -- the lossy serve's wrong rule (its runs through `alcheck run --engine --check-lossless`:
# test_sampler_check.py)


@pytest.fixture(scope="module")
def lossless_prompts(pair):
    rng = random.Random(0)
    vocab = pair[0].model.config.vocab_size
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(4)]


def test_the_lossy_rule_stays_in_its_own_runner(pair, lossless_prompts):
    """The wrong rule is a PagedRunner subclass's accept(): a plain pair in the same process, before
    and after a lossy call, samples exactly as before."""
    from alcheck.methods.table import proposer_for
    from alcheck.serve.lossy import LossyPair
    from alcheck.serve.pair import ServedPair

    target, head = pair
    plain = ServedPair(target, proposer_for(head), "eagle", 3, 2048, "cpu", "float32", 8)
    prompts = lossless_prompts
    before = [r.output_ids for r in plain.generate(prompts, 24, 1.0, 7)]
    lossy = [r.output_ids for r in LossyPair(plain, "recovered-from-target").generate(prompts, 24, 1.0, 7)]
    after = [r.output_ids for r in plain.generate(prompts, 24, 1.0, 7)]
    assert after == before and lossy != before
