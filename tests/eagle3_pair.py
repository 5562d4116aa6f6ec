"""Tiny EAGLE-3 pairs for the tests, in the real on-disk formats (alcheck.testing.tiny).

Target: four layers, unit-RMS embeddings, layers 1..3 damped (their residual writes x 0.05), so
it computes almost what its layer 0 computes. Heads copy that layer on the embedding half of
their input and read the target's auxiliary states (layers 1, 2, 3) through fc and a small random
part of q/k/v; their draft vocabulary drops every 7th target id (d2t is not the identity).
- "eagle":       norm_before_residual, EAGLE repo format (pytorch_model.bin, midlayer.*):
                 partial acceptance at every draft position;
- "speculators": the same weights in the speculators format (model.safetensors, layers.0.*);
- "plain":       the default layer (residual = g), fc near 0: partial acceptance at position 1.
"""

from __future__ import annotations

import random
from pathlib import Path

from alcheck.testing.tiny import damp_target_layers, make_tiny_eagle3, make_tiny_target

MAX_TOKENS = 40
AUX = (1, 2, 3)


def build_pair(root: Path) -> dict[str, Path]:
    target = make_tiny_target(root / "target", num_layers=4, unit_rms_embeddings=True)
    damp_target_layers(target, first=1, factor=0.05)
    common = dict(copy_target_layer=0, aux_layer_ids=AUX)
    return {
        "target": target,
        "eagle": make_tiny_eagle3(
            root / "eagle3", target, fmt="eagle-repo", norm_before_residual=True, **common
        ),
        "speculators": make_tiny_eagle3(
            root / "eagle3-spec", target, fmt="speculators", norm_before_residual=True, **common
        ),
        "plain": make_tiny_eagle3(root / "eagle3-plain", target, fmt="eagle-repo", fc_std=0.01, **common),
    }


def load_eagle_head_pair(root: Path):
    """(Target, Eagle3Head): the "eagle" head of build_pair, loaded float32 on the CPU."""
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_target

    dirs = build_pair(root)
    target = load_target(str(dirs["target"]))
    return target, load_eagle3(str(dirs["eagle"]), target)


def make_prompts(vocab: int, n: int = 8, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(n)]


def pooled(results) -> float:
    steps = sum(r.steps for r in results)
    return (steps + sum(r.accepted for r in results)) / steps


def key(r):
    return (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason)
