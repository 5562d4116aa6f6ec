"""Temperature > 0 on the device without a host sync: the onehot rule (runner/sampling.py's
onehot_accept, the default convention) from uniforms drawn before the step.

The eager rule asks the host whether any draft was rejected (`rejected.any()`) and draws with
torch.multinomial. Here the runner fills a [B, K+1] buffer from its seeded generator before each
step (outside any CUDA graph, so replays draw fresh numbers): K acceptance draws, then one for
the emitted token, taken by the inverse CDF. The rule is the same, so the output still follows
the target exactly (chi-square and the lossless permutation test, tests/test_static_sampling.py);
the random stream is not the eager runner's, so seeded outputs differ from --runner paged's.
"""

from __future__ import annotations

import torch

from alcheck.runner.sampling import probs


def sample_from(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row of weights [B, V] (non-negative, any scale) from uniforms u [B] in [0, 1):
    the first token whose cumulative weight exceeds u * total; never a token of zero weight."""
    cdf = weights.cumsum(-1)
    index = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    vocab = torch.arange(weights.shape[-1], device=weights.device)
    last = torch.where(weights > 0, vocab, 0).amax(-1)  # float rounding can put u * total at the end
    return torch.minimum(index, last)


def onehot_accept_uniform(drafts: torch.Tensor, logits: torch.Tensor, temperature: float, u: torch.Tensor):
    """Greedy drafts [B, K], target logits [B, K+1, V], uniforms u [B, K+1] -> (accepted [B], next [B]):
    d_i accepted while u_i < p_i(d_i); then the token from p without the rejected draft, or the
    bonus from p_K (onehot_accept's rule, no branch)."""
    p = probs(logits, temperature)
    num, k = drafts.shape
    rows = torch.arange(num, device=drafts.device)
    if k == 0:
        return torch.zeros(num, dtype=torch.long, device=drafts.device), sample_from(p[:, 0], u[:, 0])
    p_draft = p[:, :k].gather(2, drafts[..., None]).squeeze(2)
    accepted = (u[:, :k] < p_draft).long().cumprod(dim=1).sum(dim=1)
    p_next = p[rows, accepted]
    removed = drafts.gather(1, accepted.clamp(max=k - 1)[:, None])  # the rejected draft
    residual = p_next.scatter(1, removed, 0.0)
    # p(d) == 1 leaves no mass (u < 1 always accepts it: float rounding only), as the eager rule
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_next)
    weights = torch.where((accepted < k)[:, None], residual, p_next)
    return accepted, sample_from(weights, u[:, k])
