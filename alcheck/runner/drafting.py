"""The two drafting loops, written once for every head kind.

A proposer (runner/proposers/) supplies the per-head part: extend, step and logits over TARGET
ids. `ctx` is the draft context (runner/context.py): `ctx.attn_batch` places every draft write in
the request's paged KV (and audits it).

Chain (EAGLE-NOTES section 4): extend, then K-1 single-token steps, one position further each.

Tree (EAGLE-2, TREE-NOTES 1.1-1.2): extend; the root's top-k are level 1. Then steps-1 times:
feed the k frontier nodes (each with its parent's hidden, all at the same RoPE position, one
further per level), take each node's top-k children by cumulative log-prob, add all k^2 to the
pool and keep the best k as the next frontier. Level i's k nodes write draft KV into scratch
slots at positions base + (i-1)*k + j, base = the first position after the committed tokens;
a tree mask lets each see the committed prefix, its ancestors' scratch slots and itself.
The next step's extend overwrites those scratch positions, and nothing reads them after.
"""

from __future__ import annotations

import torch

from alcheck.runner.tree import DraftTrees, select_tree, stable_topk


def _flat(inputs, device):
    return torch.tensor([t for x in inputs for t in x], device=device)


def propose_chain(
    drafter, ctx, reqs, inputs: list[list[int]], features: torch.Tensor, starts: list[int], k: int
):
    """inputs[b]: tokens x_{p+1} for positions starts[b].. ; features: target rows aligned with them.
    Returns (drafts [B, K] long, draft probs [B, K, V] or None when greedy)."""
    h = extend_last(drafter, ctx, reqs, inputs, features, starts)
    positions = [s + len(x) for s, x in zip(starts, inputs)]
    return draft_chain(
        drafter,
        ctx,
        h,
        k,
        lambda step: ctx.attn_batch(reqs, [p + step for p in positions], [1] * len(reqs), "draft"),
    )


def extend_last(drafter, ctx, reqs, inputs: list[list[int]], features, starts: list[int]) -> torch.Tensor:
    """Step 0: the head over each request's committed tokens (writing their draft KV); returns each
    request's last output row [B, H]. A context may compute it its own way with the same result:
    `ctx.prefill_extend` (the CPU paged runner's prompt cache) answers None where it does not."""
    own = getattr(ctx, "prefill_extend", None)
    h = own(ctx, drafter, reqs, inputs, features, starts) if own is not None else None
    if h is not None:
        return h
    lens = [len(x) for x in inputs]
    hidden = drafter.extend(
        ctx, ctx.attn_batch(reqs, starts, lens, "draft"), _flat(inputs, ctx.device), features
    )
    return hidden[torch.tensor(lens, device=ctx.device).cumsum(0) - 1]


def draft_chain(drafter, ctx, h: torch.Tensor, k: int, step_batch):
    """The chain from the extend's last row h [B, H]: K drafts, each step feeding the head its own
    output one position further; step_batch(i) is the metadata of draft step i+1 (one token per
    request). The eager loop and the static step (runner/static/chain.py) share it."""
    tokens, dists = [], []
    for step in range(k):
        token, dist = drafter.draft(ctx, h)
        tokens.append(token)
        dists.append(dist)
        if step == k - 1:
            break
        h = drafter.step(ctx, step_batch(step), token, h)
    drafts = torch.stack(tokens, dim=1)
    return drafts, (torch.stack(dists, dim=1) if dists[0] is not None else None)


def _log_probs(drafter, ctx, h):
    return torch.log_softmax(drafter.logits(ctx, h).float(), dim=-1)


def propose_tree(
    drafter,
    ctx,
    reqs,
    inputs: list[list[int]],
    features: torch.Tensor,
    starts: list[int],
    steps: int,
    topk: int,
    num_draft_tokens: int,
) -> DraftTrees:
    """The same inputs as propose_chain -> one tree of num_draft_tokens nodes (root included) per request."""
    k, num = topk, len(reqs)
    h = extend_last(drafter, ctx, reqs, inputs, features, starts)  # [B, H]: the root's output
    base = [s + len(x) for s, x in zip(starts, inputs)]  # level 1's RoPE position and first scratch slot

    def level_batch(level: int, mask: torch.Tensor):
        return ctx.attn_batch(
            reqs,
            [b + (level - 1) * k for b in base],
            [k] * num,
            "draft",
            rope_positions=[b + level - 1 for b in base for _ in range(k)],
            tree_masks=mask,
        )

    return expand_tree(drafter, ctx, h, steps, topk, num_draft_tokens, level_batch, stable_topk)


def expand_tree(
    drafter, ctx, h: torch.Tensor, steps: int, topk: int, num_draft_tokens: int, level_batch, top
) -> DraftTrees:
    """The tree from the root's output h [B, H]: level 1 is the root's top-k, then steps-1 levels of
    expansion. level_batch(level, mask) is the metadata of the level's k nodes per request (mask
    [B, k, level * k] over the scratch slots); top is the top-k rule (runner/tree.stable_topk, or the
    static step's sync-free equal). The eager loop and the static step share it."""
    device, k, num = h.device, topk, h.shape[0]
    score, token = top(_log_probs(drafter, ctx, h), k)  # level 1
    pool_scores, pool_tokens = [score], [token]
    pool_parents = [torch.full((num, k), -1, dtype=torch.long, device=device)]
    front_index = torch.arange(k, device=device).expand(num, k)  # the frontier's candidate indices
    front_score, front_token = score, token
    front_hidden = h[:, None].expand(num, k, h.shape[-1])
    ancestry = torch.zeros(num, k, 0, dtype=torch.bool, device=device)  # over earlier scratch slots
    eye = torch.eye(k, dtype=torch.bool, device=device).expand(num, k, k)
    for level in range(1, steps):
        mask = torch.cat([ancestry, eye], dim=2)  # [B, k, level * k]: ancestors and itself
        out = drafter.step(
            ctx, level_batch(level, mask), front_token.reshape(-1), front_hidden.reshape(num * k, -1)
        )
        out = out.view(num, k, -1)
        child_lp, child_token = top(_log_probs(drafter, ctx, out.view(num * k, -1)).view(num, k, -1), k)
        cumulative = (front_score[:, :, None] + child_lp).view(num, k * k)
        pool_scores.append(cumulative)
        pool_tokens.append(child_token.reshape(num, k * k))
        pool_parents.append(front_index.repeat_interleave(k, dim=1))
        if level == steps - 1:
            break
        front_score, pick = top(cumulative, k)
        parent = pick.div(k, rounding_mode="floor")  # which frontier node each new one hangs from
        front_index = k + (level - 1) * k * k + pick
        front_token = child_token.reshape(num, k * k).gather(1, pick)
        front_hidden = out.gather(1, parent[..., None].expand(num, k, out.shape[-1]))
        ancestry = mask.gather(1, parent[..., None].expand(num, k, mask.shape[-1]))
    return select_tree(
        torch.cat(pool_scores, 1),
        torch.cat(pool_tokens, 1),
        torch.cat(pool_parents, 1),
        num_draft_tokens,
        k,
        top,
    )
