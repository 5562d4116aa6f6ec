"""The target's view of generated sequences, for the temperature > 0 lossless check
(alcheck/metrics/lossless.py): per generated token, what the target's distribution at the sampling
temperature says of it (TokenScores); and target-only samples to compare an engine with.

Scoring runs the whole sequence (prompt + output) through the target in one forward over a
contiguous cache (one block of the sequence's length), in the target's dtype; the softmax is taken
in float32, as the runner samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alcheck.models.attention import AttnBatch, bind_kv_cache
from alcheck.runner.config import RunnerConfig
from alcheck.runner.paged import PagedRunner


@dataclass
class TokenScores:
    """Per generated token x_t, under the target's p_t at the sampling temperature."""

    logprob: list[float]  # log p_t(x_t)
    entropy: list[float]  # H(p_t) = -E[log p_t]
    logprob_var: list[float]  # Var_{x~p_t}(log p_t(x))
    top_prob: list[float]  # max p_t
    is_top: list[bool]  # x_t is the argmax of p_t


@torch.inference_mode()
def token_scores(target, prompt: list[int], output: list[int], temperature: float) -> TokenScores:
    """The target's distribution p_T = softmax(logits / temperature) at every output token x_t."""
    if temperature <= 0:
        raise ValueError("scoring needs a temperature > 0 (a greedy output has no distribution to test)")
    if not prompt or not output:
        raise ValueError("scoring needs a prompt and at least one output token")
    param = next(target.parameters())
    ids = list(prompt) + list(output[:-1])  # the inputs whose next-token predictions are the output
    n = len(ids)
    bind_kv_cache(target.attention_layers, 1, n, param.dtype, param.device)
    positions = torch.arange(n, device=param.device)
    table = torch.zeros(1, 1, dtype=torch.int32, device=param.device)
    batch = AttnBatch.build(
        positions, positions.clone(), table, [n], [n], n, "torch", param.dtype, all_stored=True
    )
    hidden = target(torch.tensor(ids, device=param.device), batch)
    logp = torch.log_softmax(target.compute_logits(hidden[len(prompt) - 1 :]).float() / temperature, dim=-1)
    p = logp.exp()
    plogp = (p * logp).nan_to_num(0.0)  # 0 * -inf = 0 for tokens p gives no mass
    entropy = -plogp.sum(-1)
    second = (p * logp.nan_to_num(0.0, neginf=0.0) ** 2).sum(-1)
    out = torch.tensor(output, device=param.device)
    pmax, top = p.max(-1)
    return TokenScores(
        logp.gather(1, out[:, None]).squeeze(1).tolist(),
        entropy.tolist(),
        (second - entropy**2).clamp_min(0).tolist(),
        pmax.tolist(),
        (top == out).tolist(),
    )


@torch.inference_mode()
def target_samples(
    target,
    eos_ids,
    prompts: list[list[int]],
    max_tokens: int,
    temperature: float,
    seed: int,
    block_size: int = 16,
) -> list[list[int]]:
    """One target-only sample per prompt (the runner at K=0), seeded; outputs in prompt order."""
    cfg = RunnerConfig(
        num_spec_tokens=0,
        temperature=temperature,
        seed=seed,
        block_size=block_size,
        max_batch_size=max(len(prompts), 1),
        device=str(next(target.parameters()).device),
    )
    return [r.output_ids for r in PagedRunner(target, None, eos_ids, cfg).generate(prompts, max_tokens)]
