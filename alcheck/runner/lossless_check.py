"""The two sides of the temperature > 0 lossless check (alcheck/metrics/lossless.py): the per-sequence
statistics of outputs, scored by the built-in target, and target-only samples to set against an
engine's. `run --engine ... --check-lossless` puts them together (alcheck/diagnostics/sampler_check.py).
"""

from __future__ import annotations

from dataclasses import astuple

from alcheck.metrics.lossless import sequence_statistics
from alcheck.runner.target_scoring import target_samples, token_scores


def statistics(target, prompts: list[list[int]], outputs: list[list[list[int]]], temperature: float) -> dict:
    """prompt index -> the per-sequence statistics of each of its outputs."""
    return {
        i: [sequence_statistics(*astuple(token_scores(target, prompts[i], out, temperature))) for out in outs]
        for i, outs in enumerate(outputs)
        if outs
    }


def reference_outputs(
    target, eos_ids, prompts, samples: int, max_tokens: int, temperature: float, seed: int
) -> list[list[list[int]]]:
    """`samples` target-only outputs per prompt; draw j runs every prompt with seed + j."""
    draws = [
        target_samples(target, eos_ids, prompts, max_tokens, temperature, seed + j) for j in range(samples)
    ]
    return [[draw[i] for draw in draws] for i in range(len(prompts))]
