"""Session-cached tiny pairs of other architectures (alcheck.testing.tiny_arch) and what the tests share."""

from __future__ import annotations

import random

import pytest

ARCHS = ["qwen2", "qwen3", "qwen3_moe", "mistral"]
MAX_TOKENS = 40


@pytest.fixture(scope="session")
def arch_pair(tmp_path_factory):
    """arch_pair(arch) -> {"target", "eagle", "eagle3"} folders, built once per session."""
    from alcheck.testing.tiny_arch import make_tiny_arch_pair

    cache: dict[str, dict] = {}

    def get(arch: str) -> dict:
        if arch not in cache:
            cache[arch] = make_tiny_arch_pair(tmp_path_factory.mktemp(arch), arch)
        return cache[arch]

    return get


@pytest.fixture(scope="session")
def arch_loaded(arch_pair):
    """arch_loaded(arch) -> (Target, EAGLE-1 head, EAGLE-3 head), loaded by alcheck's loaders."""
    from alcheck.models.eagle3_loading import load_eagle3
    from alcheck.models.loading import load_eagle, load_target

    cache: dict[str, tuple] = {}

    def get(arch: str):
        if arch not in cache:
            dirs = arch_pair(arch)
            target = load_target(str(dirs["target"]))
            cache[arch] = (
                target,
                load_eagle(str(dirs["eagle"]), target),
                load_eagle3(str(dirs["eagle3"]), target),
            )
        return cache[arch]

    return get


def arch_prompts(vocab: int, n: int = 8, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(3, 30))] for _ in range(n)]
