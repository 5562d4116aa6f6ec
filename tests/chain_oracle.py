"""What the model-drafting oracles share (draft_model, mtp, medusa): the greedy speculative loop
written out, the built-in runner's rows for one method, random prompts, and the temperature-1
lossless test. Each oracle file brings only its own drafter, recomputed from scratch.

The loop: the prefill emits the target's token (no step); then each step drafts K tokens, the
target's argmax after the root and after each draft is compared by hand, and the longest agreeing
prefix plus the target's token is emitted, until EOS or max_tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from alcheck.runner.config import RunnerConfig


def random_prompts(vocab: int, n: int = 4, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(1, 16))] for _ in range(n)]


@torch.no_grad()
def argmax_all(model, tokens: list[int]) -> list[int]:
    """A transformers model's greedy next token after every prefix of `tokens`, from scratch (no cache)."""
    return model(torch.tensor([tokens])).logits[0].argmax(-1).tolist()


def greedy_chain(
    prompt: list[int],
    eos: frozenset[int],
    k: int,
    max_tokens: int,
    target_argmax: Callable[[list[int]], list[int]],
    propose: Callable[[list[int], int], list[int]],
) -> dict:
    """{steps, accepted, accepted_per_pos, output}. target_argmax(tokens): the target's argmax after
    every prefix; propose(tokens, k): the drafter's k tokens after the committed `tokens`."""
    tokens, out = list(prompt), []
    steps = accepted = 0
    per_pos = [0] * k

    def emit(new):
        for t in new:
            out.append(t)
            tokens.append(t)
            if t in eos or len(out) >= max_tokens:
                return True
        return False

    if not emit([target_argmax(tokens)[-1]]):
        while True:
            draft = propose(list(tokens), k)
            argmax = target_argmax(tokens + draft)[len(tokens) - 1 :]
            a = 0
            while a < k and draft[a] == argmax[a]:
                a += 1
            steps, accepted = steps + 1, accepted + a
            for i in range(a):
                per_pos[i] += 1
            if emit(draft[:a] + [argmax[a]]):
                break
    return dict(steps=steps, accepted=accepted, accepted_per_pos=per_pos, output=out)


def method_rows(method, source, target, prompts, k, max_tokens, runner="paged", **cfg) -> list[dict]:
    """The built-in runner's rows under `method` (a DraftMethod) loaded from `source`; with
    audit_slots=True no KV write may land outside the request's blocks."""
    from alcheck.runner.table import runner_class

    head = method.load(source, target, torch.float32, "cpu")
    cfg.setdefault("block_size", 4)
    built = runner_class(runner)(
        target.model, method.proposer(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=k, **cfg)
    )
    results = built.generate(prompts, max_tokens)
    if cfg.get("audit_slots"):
        assert built.slot_violations == 0
    return [
        dict(steps=r.steps, accepted=r.accepted, accepted_per_pos=r.accepted_per_pos, output=r.output_ids)
        for r in results
    ]


def lossless_p_value(method, source, target, prompts, max_tokens, runner, temperature=1.0, samples=8, **cfg):
    """(p, line): the runner's samples at `temperature` (K=3) against target-only samples at
    temperature 1, by the two-sample permutation test alcheck's lossless check uses."""
    from alcheck.metrics.lossless import permutation_test
    from alcheck.runner.lossless_check import reference_outputs, statistics
    from alcheck.runner.table import runner_class

    head = method.load(source, target, torch.float32, "cpu")
    reference = reference_outputs(target.model, target.eos_token_ids, prompts, samples, max_tokens, 1.0, 0)
    outputs = [[] for _ in prompts]
    for seed in range(samples):
        config = RunnerConfig(
            num_spec_tokens=3, block_size=4, temperature=temperature, seed=100 + seed, **cfg
        )
        built = runner_class(runner)(target.model, method.proposer(head), target.eos_token_ids, config)
        for i, r in enumerate(built.generate(prompts, max_tokens)):
            outputs[i].append(r.output_ids)
    result = permutation_test(
        statistics(target.model, prompts, outputs, 1.0), statistics(target.model, prompts, reference, 1.0)
    )
    return result.p_value, result.line()
