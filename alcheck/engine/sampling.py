"""Acceptance rules: greedy (exact match) and standard speculative rejection sampling.

Rejection sampling (Leviathan et al. / Chen et al.): draft token d_i ~ q_i is accepted with
probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection the emitted token is drawn from
normalise(max(0, p_i - q_i)); when all K are accepted a bonus token is drawn from p_K. The output
is then distributed exactly as sampling from the target alone.
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
