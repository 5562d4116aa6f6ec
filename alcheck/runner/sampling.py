"""Acceptance rules: greedy (exact match) and the two temperature > 0 conventions.

`--draft-sampling onehot` (default; vLLM's draft_probs=None path with its greedy drafter, and
the EAGLE repo's evaluate_posterior with qx = 1.0): the draft is the argmax of the draft
distribution, i.e. q is one-hot. d_i is accepted with probability p_i(d_i); at the first
rejection the emitted token is drawn from p_i with d_i removed and renormalised; when all K
are accepted a bonus token is drawn from p_K. P(emit x) = p(d)[x = d] + (1 - p(d)) p(x) /
(1 - p(d)) [x != d] = p(x): lossless.

`--draft-sampling sampled` (Leviathan et al. / Chen et al.): d_i ~ q_i is accepted with
probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection the emitted token is drawn from
normalise(max(0, p_i - q_i)). Also lossless, and its acceptance is Σ min(p, q) per position,
much higher than p(argmax q) when q is flat: the two conventions give different AL, so a
run's convention is recorded and compared.
"""

from __future__ import annotations

import torch


def greedy_accept(drafts: torch.Tensor, target_logits: torch.Tensor):
    """drafts [B, K], target_logits [B, K+1, V] -> (accepted counts [B], next token [B])."""
    target = target_logits.argmax(-1)
    k = drafts.shape[1]
    match = (drafts == target[:, :k]).long()
    accepted = match.cumprod(dim=1).sum(dim=1)
    next_token = target.gather(1, accepted[:, None]).squeeze(1)
    return accepted, next_token


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(p: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of p [..., V]."""
    flat = p.reshape(-1, p.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).view(p.shape[:-1])


def onehot_accept(drafts, target_logits, temperature, generator):
    """Greedy drafts [B, K], target_logits [B, K+1, V] -> (accepted [B], next [B]); see above."""
    p = probs(target_logits, temperature)
    num, k = drafts.shape
    p_draft = p[:, :k].gather(2, drafts[..., None]).squeeze(2)
    u = torch.rand(num, k, generator=generator, device=drafts.device)
    ok = (u < p_draft).long()  # accept with probability p(d)
    accepted = ok.cumprod(dim=1).sum(dim=1)
    rows = torch.arange(num, device=drafts.device)
    p_next = p[rows, accepted]  # [B, V]
    rejected = accepted < k
    if rejected.any():
        removed = drafts.gather(1, accepted.clamp(max=k - 1)[:, None])  # the rejected draft
        residual = p_next.scatter(1, removed, 0.0)
        norm = residual.sum(-1, keepdim=True)
        # p(d) == 1 leaves no mass (u < 1 always accepts it, so this is float rounding only)
        residual = torch.where(norm > 0, residual / norm.clamp_min(1e-30), p_next)
        p_next = torch.where(rejected[:, None], residual, p_next)
    return accepted, sample(p_next, generator)


def rejection_accept(drafts, draft_probs, target_logits, temperature, generator):
    """drafts [B, K], draft_probs q [B, K, V], target_logits [B, K+1, V] -> (accepted [B], next [B])."""
    p = probs(target_logits, temperature)
    num, k = drafts.shape
    p_draft = p[:, :k].gather(2, drafts[..., None]).squeeze(2)
    q_draft = draft_probs.gather(2, drafts[..., None]).squeeze(2)
    u = torch.rand(num, k, generator=generator, device=drafts.device)
    ok = (u * q_draft <= p_draft).long()  # u < p/q without dividing by q
    accepted = ok.cumprod(dim=1).sum(dim=1)
    rows = torch.arange(num, device=drafts.device)
    p_next = p[rows, accepted]  # [B, V]
    rejected = accepted < k
    if rejected.any():
        q_pad = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)
        residual = (p_next - q_pad[rows, accepted]).clamp_min(0)
        norm = residual.sum(-1, keepdim=True)
        # p == q exactly leaves no residual mass; then p itself is the right distribution
        residual = torch.where(norm > 0, residual / norm.clamp_min(1e-30), p_next)
        p_next = torch.where(rejected[:, None], residual, p_next)
    return accepted, sample(p_next, generator)


def target_token(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """The target's own token per row: argmax, or a draw at the temperature."""
    if temperature > 0:
        return sample(probs(logits, temperature), generator)
    return logits.argmax(-1)


def draft_token(logits: torch.Tensor, temperature: float, draft_sampling: str, generator: torch.Generator):
    """A chain's draft per row and, under the "sampled" convention at temperature > 0, the draft
    distribution q it was drawn from (else None: greedy drafts, one-hot q)."""
    if temperature > 0 and draft_sampling == "sampled":
        q = probs(logits, temperature)
        return sample(q, generator), q
    return logits.argmax(-1), None
