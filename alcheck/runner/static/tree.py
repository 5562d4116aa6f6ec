"""The tree step on the device (EAGLE-2 dynamic trees; the eager form is runner/paged.py's
_tree_step and runner/drafting.py's propose_tree, TREE-NOTES section 5): verify the T nodes with a
tree mask, the greedy walk, the accepted path's KV move, draft step 0 over the padded path rows,
and the K-1 expansion levels with the exact sync-free top-k; no host sync.

Input `meta` [B, 3T-1+W]: per lane the root (the last committed token) and the T-1 drafts, the
root's position (start = n-1), the drafts' parents (node index, 0 = the root) and depths, the
block table. Output [B, 2+K+1+3(T-1)]: accepted a, the bonus token, the path's nodes 1..K (0 past
a), whether the target's logits were finite, the next tree's tokens, parents and depths.

Fixed sizes where the eager runner uses lists: the walk marks every node whose token is the
target's argmax at its parent and whose parent is marked (siblings are distinct, so the marked
nodes form one path); the KV move copies K+1 slots per lane, the unaccepted ones onto themselves;
draft step 0 runs over K+1 rows, those past a writing scratch slots that the expansion levels
overwrite before reading (each level stores its keys, then attends) or never see (later positions).
"""

from __future__ import annotations

import torch

from alcheck.runner.drafting import expand_tree
from alcheck.runner.paged import by_slot, logits_finite
from alcheck.runner.static.batch import slots_of, static_batch
from alcheck.runner.static.topk import exact_topk
from alcheck.runner.tree import ancestor_mask


def tree_step(runner, meta: torch.Tensor, k: int, width: int) -> torch.Tensor:
    cfg = runner.cfg
    t, topk, bs, dtype = cfg.num_verify_tokens, cfg.topk, cfg.block_size, runner.dtype
    num, device = meta.shape[0], meta.device
    tokens, start = meta[:, :t], meta[:, t]
    parents, depths = meta[:, t + 1 : 2 * t], meta[:, 2 * t : 3 * t - 1]
    table = meta[:, 3 * t - 1 : 3 * t - 1 + width]
    nodes = torch.arange(t, device=device)
    depth = torch.cat([torch.zeros_like(depths[:, :1]), depths], dim=1)  # [B, T], the root at 0
    batch = static_batch(
        table,
        start[:, None] + nodes,
        bs,
        dtype,
        rope_positions=start[:, None] + depth,
        tree_mask=ancestor_mask(parents, k),
        tree_width=t,
    )
    hidden, features = runner.run_model(tokens.reshape(-1), batch)
    logits = runner.target.compute_logits(hidden).view(num, t, -1)
    finite = logits_finite(logits)
    path, accepted, bonus = greedy_walk(tokens, parents, depths, logits.argmax(-1), k)
    move_path_kv(runner.kv_cache, table, start, path, accepted, bs)
    # draft step 0 over the path's rows: row j feeds the token after path node j (the next path
    # node's, then the bonus) at position start+j, with the target's features at path node j
    steps = torch.arange(k + 1, device=device)
    after = torch.where(steps[None, :-1] < accepted[:, None], tokens.gather(1, path[:, 1:]), bonus[:, None])
    inputs = torch.cat([after, bonus[:, None]], dim=1)
    feats = features.view(num, t, -1).gather(1, path[..., None].expand(num, k + 1, features.shape[-1]))
    extend = static_batch(table, start[:, None] + steps, bs, dtype)
    out = runner.proposer.extend(runner, extend, inputs.reshape(-1), feats.reshape(num * (k + 1), -1))
    h = out.view(num, k + 1, -1)[torch.arange(num, device=device), accepted]
    base = start + accepted + 1  # level 1's RoPE position and first scratch slot
    lanes = torch.arange(topk, device=device)

    def level_batch(level: int, mask: torch.Tensor):
        rope = (base + level - 1)[:, None].expand(num, topk)
        return static_batch(
            table,
            base[:, None] + (level - 1) * topk + lanes,
            bs,
            dtype,
            rope_positions=rope,
            tree_mask=mask,
            tree_width=level * topk,
        )

    tree = expand_tree(runner.proposer, runner, h, k, topk, t, level_batch, exact_topk)
    return torch.cat(
        [
            accepted[:, None],
            bonus[:, None],
            path[:, 1:],
            finite.long()[:, None],
            tree.tokens,
            tree.parents,
            tree.depths,
        ],
        dim=1,
    )


def greedy_walk(tokens, parents, depths, argmax, k: int):
    """(path [B, K+1] node per depth (0 past a), accepted a [B], bonus [B]): the longest path from
    the root whose every node is the target's argmax at its parent (runner/tree.greedy_tree_accept)."""
    num = tokens.shape[0]
    match = tokens[:, 1:] == argmax.gather(
        1, parents
    )  # [B, T-1]: node c is the target's choice at its parent
    on = match & (parents == 0)
    for _ in range(k - 1):  # one level further per pass: a node is on the path when its parent is
        parent_on = torch.cat([torch.ones_like(on[:, :1]), on], dim=1).gather(1, parents)
        on = match & parent_on
    levels = torch.arange(1, k + 1, device=tokens.device)
    at_level = on[:, None, :] & (depths[:, None, :] == levels[None, :, None])  # [B, K, T-1]
    node = (at_level.long() * torch.arange(1, tokens.shape[1], device=tokens.device)).sum(-1)  # 0 when none
    path = torch.cat([torch.zeros(num, 1, dtype=torch.long, device=tokens.device), node], dim=1)
    accepted = on.long().sum(-1)
    bonus = argmax.gather(1, path.gather(1, accepted[:, None])).squeeze(1)
    return path, accepted, bonus


def move_path_kv(kv_cache, table, start, path, accepted, block_size: int) -> None:
    """The accepted path's target KV (every layer) from slots start+p_j to start+j, j = 0..K; the
    rest copy onto themselves. Gathers first, then scatters, as the eager runner's fix-up does."""
    steps = torch.arange(path.shape[1], device=path.device)
    src_pos = start[:, None] + torch.where(steps[None] <= accepted[:, None], path, steps[None])
    src = slots_of(table, src_pos, block_size).reshape(-1)
    dst = slots_of(table, start[:, None] + steps, block_size).reshape(-1)
    flat = by_slot(kv_cache)
    flat[:, :, dst] = flat[:, :, src]
