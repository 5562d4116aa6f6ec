"""The chain step on the device: verify -> accept -> draft step 0 over the padded verify rows ->
K-1 draft steps, from one int64 input tensor to one int64 output tensor, with no host sync.

Input `meta` [B, K+2+W] (one host-to-device copy): per lane the last committed token and the K
drafts, the position of that token (start = n-1), and the lane's block table (0 = the null block).
At temperature > 0 the onehot rule takes its draws from a [B, K+1] buffer of uniforms (drafts stay
greedy, as the onehot convention drafts). Output [B, K+3] (one device-to-host copy): accepted a, the target's
token after them (recovered
or bonus), the next K drafts, and whether the target's logits were finite.

Draft step 0 runs the head over all K+1 verify rows (vLLM's padded drafter): row j feeds the
emitted token j at position start+j (a draft LM: start+j+1, its `position_shift`). Rows past a
write draft KV at positions start+a+1.. that the K-1 draft steps overwrite before anything reads
them (each step stores its key before attending), and no query before them sees them; so the
head's output at row a, and everything drafted from it, is what the eager runner computes over
the a+1 committed rows alone. The slots exist: each step allocates 1+K new tokens plus K
lookahead, positions start..start+2K (a draft LM's last write is start+a+K <= start+2K).
"""

from __future__ import annotations

import torch

from alcheck.runner.drafting import draft_chain
from alcheck.runner.paged import logits_finite
from alcheck.runner.sampling import greedy_accept
from alcheck.runner.static.batch import static_batch
from alcheck.runner.static.sampling import onehot_accept_uniform


def chain_step(
    runner, meta: torch.Tensor, k: int, width: int, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """One chain step for every lane of `meta` (see the module docstring); `runner` is the static
    runner (its target forward, proposer and draft context). uniforms [B, K+1]: temperature > 0's
    draws (static/sampling.py); None: greedy."""
    bs, dtype = runner.cfg.block_size, runner.dtype
    num = meta.shape[0]
    tokens, start, table = meta[:, : k + 1], meta[:, k + 1], meta[:, k + 2 : k + 2 + width]
    rows = torch.arange(k + 1, device=meta.device)
    batch = static_batch(table, start[:, None] + rows, bs, dtype)
    hidden, features = runner.run_model(tokens.reshape(-1), batch)
    logits = runner.target.compute_logits(hidden).view(num, k + 1, -1)
    finite = logits_finite(logits)
    drafts = tokens[:, 1:]
    if uniforms is None:
        accepted, next_token = greedy_accept(drafts, logits)
    else:
        accepted, next_token = onehot_accept_uniform(drafts, logits, runner.cfg.temperature, uniforms)
    if k == 0:
        return torch.stack([accepted, next_token, finite.long()], dim=1)
    # row j's input: the emitted token j (draft j+1 while accepted, then the target's token)
    emitted = torch.where(rows[:-1] < accepted[:, None], drafts, next_token[:, None])
    inputs = torch.cat([emitted, next_token[:, None]], dim=1)
    # a draft LM consumes x_p at p (proposers/draft_model.py): its rows sit one position later
    shift = getattr(runner.proposer, "position_shift", 0)
    draft_batch = batch if shift == 0 else static_batch(table, start[:, None] + rows + shift, bs, dtype)
    out = runner.proposer.extend(runner, draft_batch, inputs.reshape(-1), features)
    h = out.view(num, k + 1, -1)[torch.arange(num, device=meta.device), accepted]  # row a: the last committed
    position = (start + accepted + 1 + shift)[:, None]
    new, _ = draft_chain(
        runner.proposer, runner, h, k, lambda step: static_batch(table, position + step, bs, dtype)
    )
    return torch.cat([accepted[:, None], next_token[:, None], new, finite.long()[:, None]], dim=1)
