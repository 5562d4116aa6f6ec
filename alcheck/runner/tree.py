"""EAGLE-2 dynamic trees (TREE-NOTES sections 1.3-1.7): selecting the verified nodes from the
candidate pool, the tree tensors, and acceptance. The drafting loop that fills the pool is in
runner/drafting.py.

Nodes: node 0 is the root (the last committed token, not yet in the target's KV); nodes
1..T-1 are the selected drafts in ascending candidate index, so level order, and a node always
follows its parent. depth(root) = 0; a node's depth is its level (1..steps).

Tie rule (exact ties in log-probabilities or cumulative scores): the lower index wins, everywhere
- a node's top-k children: the lower token id;
- the frontier (top-k of a level's k^2 children) and the final top T-1: the lower candidate
  index (earlier level, then earlier parent, then higher-ranked child).
Because a child's cumulative score never exceeds its parent's and the parent has the lower
index, a selected node's parent is always selected, even under ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def stable_topk(x: torch.Tensor, k: int):
    """(values, indices) of the k largest along the last dim; ties go to the lower index.

    torch.topk over a vocabulary is ~70x faster than a full sort on a CPU (128k entries), but its
    order among equal values is unspecified: take k+1, order those by (value, lower index), and
    fall back to the full stable sort only when the k-th and (k+1)-th values tie, where the
    lower-index rule decides which of them is kept."""
    if k >= x.shape[-1]:
        return _sorted_topk(x, k)
    values, indices = torch.topk(x, k + 1, dim=-1)
    if bool((values[..., k - 1] == values[..., k]).any()):
        return _sorted_topk(x, k)
    values, indices = values[..., :k], indices[..., :k]
    by_index = indices.argsort(dim=-1)  # lower index first, then a stable sort by value keeps that
    values, indices = values.gather(-1, by_index), indices.gather(-1, by_index)
    values, order = torch.sort(values, dim=-1, descending=True, stable=True)
    return values, indices.gather(-1, order)


def _sorted_topk(x: torch.Tensor, k: int):
    values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
    return values[..., :k], indices[..., :k]


@dataclass
class DraftTrees:
    """One tree per request: drafts [B, T-1] (target ids), their parents' node indices [B, T-1]
    (0 = the root) and depths [B, T-1] (1 = a child of the root)."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor


def select_tree(scores, tokens, parents, num_draft_tokens: int, topk: int, top=stable_topk) -> DraftTrees:
    """The candidate pool [B, N] (cumulative log-probs, target ids, parent candidate index with
    -1 = the root), N = topk + (steps-1)*topk^2 -> the best T-1 candidates in index order. `top`:
    the top-k rule (the static step passes its sync-free equal of stable_topk)."""
    _, best = top(scores, num_draft_tokens - 1)
    chosen, _ = best.sort(dim=-1)
    parent_cand = parents.gather(1, chosen)
    # a parent is always chosen (see the tie rule): its node index is its place among the chosen + 1
    parent_node = torch.searchsorted(chosen, parent_cand.clamp_min(0)) + 1
    parent_node = torch.where(parent_cand < 0, torch.zeros_like(parent_node), parent_node)
    depth = torch.where(chosen < topk, 1, 2 + (chosen - topk).div(topk * topk, rounding_mode="floor"))
    return DraftTrees(tokens.gather(1, chosen), parent_node, depth)


def full_parents(parents: torch.Tensor) -> torch.Tensor:
    """[B, T-1] parents of nodes 1.. -> [B, T] with the root as its own parent."""
    return torch.cat([torch.zeros_like(parents[:, :1]), parents], dim=1)


def ancestor_mask(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """[B, T, T] bool: node n sees node c iff c is n itself or one of its ancestors (root included)."""
    full = full_parents(parents)
    num, t = full.shape
    mask = torch.eye(t, dtype=torch.bool, device=parents.device).expand(num, t, t).clone()
    cur = full
    for _ in range(max_depth):  # walk up one level per pass; the root is its own parent
        mask.scatter_(2, cur[..., None], True)
        cur = full.gather(1, cur)
    return mask


def children_lists(parents: list[int]) -> list[list[int]]:
    """parents of nodes 1..T-1 -> children of each node 0..T-1, in node order."""
    children: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents, start=1):
        children[parent].append(node)
    return children


def greedy_tree_accept(
    tokens: list[int], parents: list[int], target_argmax: list[int]
) -> tuple[list[int], int]:
    """Walk down from the root taking the child equal to the target's argmax (siblings are
    distinct, so at most one matches). Returns (path of node indices from the root, bonus)."""
    children = children_lists(parents)
    path = [0]
    while True:
        want = target_argmax[path[-1]]
        nxt = next((c for c in children[path[-1]] if tokens[c - 1] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)


def sample_tree_accept(
    tokens: list[int], parents: list[int], p: torch.Tensor, generator: torch.Generator
) -> tuple[list[int], int]:
    """The EAGLE repo's rule at temperature > 0 (evaluate_posterior, TREE-NOTES 1.7): at the
    current node with target distribution p, try its children in node order; accept child x
    with probability p(x) (q = 1: the drafts are deterministic top-k); on a rejection set
    p(x) = 0, renormalise and try the next sibling. When no child is accepted the bonus comes
    from the adjusted p (so p itself at a leaf). p [T, V]: target probabilities per node.
    Lossless: P(emit x) = p(x) at every level, as for onehot chains."""
    children = children_lists(parents)
    path = [0]
    while True:
        dist = p[path[-1]].clone()
        accepted = None
        for c in children[path[-1]]:
            x = tokens[c - 1]
            px = float(dist[x])
            u = float(torch.rand((), generator=generator, device=p.device))
            if u < px:
                accepted = c
                break
            dist[x] = 0.0
            total = float(dist.sum())
            if total <= 0:  # float rounding only: p(x) == 1 is always accepted
                dist = p[path[-1]].clone()
                break
            dist /= total
        if accepted is None:
            bonus = int(torch.multinomial(dist, 1, generator=generator))
            return path, bonus
        path.append(accepted)
