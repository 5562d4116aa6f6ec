"""The temperature > 0 lossless check on an engine's outputs: score them with the built-in target,
draw as many target-only samples per prompt, score those, and test (alcheck/metrics/lossless.py).

`run --engine ... --check-lossless` wires this in phase 2 of issue 23; today bench/engine_lossless.py
runs it against a server, and the tests against `alcheck serve`.
"""

from __future__ import annotations

from alcheck.runner.target_scoring import target_samples, token_scores
from dataclasses import astuple

from alcheck.metrics.lossless import ALPHA, N_RESAMPLES, LosslessTest, permutation_test, sequence_statistics


def statistics(target, prompts: list[list[int]], outputs: list[list[list[int]]], temperature: float) -> dict:
    """prompt index -> the per-sequence statistics of each of its outputs."""
    return {i: [sequence_statistics(*astuple(token_scores(target, prompts[i], out, temperature))) for out in outs]
            for i, outs in enumerate(outputs) if outs}


def reference_outputs(target, eos_ids, prompts, samples: int, max_tokens: int, temperature: float,
                      seed: int) -> list[list[list[int]]]:
    """`samples` target-only outputs per prompt; draw j runs every prompt with seed + j."""
    draws = [target_samples(target, eos_ids, prompts, max_tokens, temperature, seed + j) for j in range(samples)]
    return [[draw[i] for draw in draws] for i in range(len(prompts))]


def check_outputs(target, eos_ids, prompts: list[list[int]], engine_outputs: list[list[list[int]]],
                  temperature: float, max_tokens: int, seed: int = 0, alpha: float = ALPHA,
                  n_resamples: int = N_RESAMPLES) -> LosslessTest:
    """Engine outputs ([prompt][draw] -> ids, as many draws per prompt) against target-only sampling."""
    samples = max(len(outs) for outs in engine_outputs)
    reference = reference_outputs(target, eos_ids, prompts, samples, max_tokens, temperature, seed)
    return permutation_test(statistics(target, prompts, engine_outputs, temperature),
                            statistics(target, prompts, reference, temperature),
                            n_resamples=n_resamples, seed=seed, alpha=alpha)
