"""Suffix decoding's tree, the rule arctic-inference's SuffixTree implements (its suffix_tree.cc).

A tree of every suffix of every sequence it holds, each cut at max_depth tokens: the node for a
token string P counts the places P occurs (at most max_depth long). Drafting from a context tries
each match length m = 1 .. len(context) - 1 (stopping at the first m whose last m tokens do not
occur): from the node of the matched string it follows the most frequent child while the product
of count(child) / count(parent) stays >= min_token_prob, for at most min(max_spec_tokens,
m * max_spec_factor) tokens, and keeps the draft with the highest sum of those probabilities (a
later, longer match wins ties).

Two details decide rows and are kept exactly as arctic-inference has them:
- Among children of equal count the "most frequent" is the first in a list that arctic keeps
  ordered by count; ties are broken by where each increment or decrement moves a child (see
  _increment and _decrement), not by token id.
- Probabilities and scores are float32 (C++ float), so a probability on the min_token_prob edge
  compares as it does there.

Arctic compresses chains of single children into one node; this tree keeps one node per token
(simpler, the same counts and child order, more memory). Pure Python, no torch.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

_F32 = struct.Struct("f")
_INDEX_FROM = 8  # children looked up through a dict from this many on (the root has thousands)


def f32(x: float) -> float:
    """x rounded to float32: one IEEE operation on float32 operands done in double and rounded
    once gives float32's own result (53 >= 2 * 24 + 2 bits)."""
    return _F32.unpack(_F32.pack(x))[0]


class _Node:
    __slots__ = ("token", "count", "kids", "index")

    def __init__(self, token: int):
        self.token = token
        self.count = 0
        self.kids: list[_Node] = []  # ordered: count not increasing, ties in arctic's order
        self.index: dict[int, _Node] | None = None

    def child(self, token: int) -> _Node | None:
        if self.index is not None:
            return self.index.get(token)
        for kid in self.kids:
            if kid.token == token:
                return kid
        return None

    def add_child(self, token: int) -> _Node:
        kid = _Node(token)
        kid.count = 1
        self.kids.append(kid)  # count 1 is the lowest: the end of the list
        if self.index is not None:
            self.index[token] = kid
        elif len(self.kids) >= _INDEX_FROM:
            self.index = {k.token: k for k in self.kids}
        return kid

    def drop_child(self, kid: _Node) -> None:
        self.kids.remove(kid)
        if self.index is not None:
            del self.index[kid.token]


def _increment(parent: _Node, kid: _Node) -> None:
    """kid.count += 1 and its new place among its siblings. Arctic's _increment_count: the first
    child of its count moves to the front of the children with count + 1; any other moves to
    their end (it is re-inserted before the first child of its old count)."""
    kids = parent.kids
    i = kids.index(kid)
    c = kid.count
    first_of_count = i == 0 or kids[i - 1].count > c
    del kids[i]
    j = i
    if first_of_count:
        while j > 0 and kids[j - 1].count == c + 1:
            j -= 1
    else:
        while j > 0 and kids[j - 1].count == c:
            j -= 1
    kid.count = c + 1
    kids.insert(j, kid)


def _decrement(parent: _Node, kid: _Node) -> None:
    """kid.count -= 1 (kid.count > 1): it moves to just after the last sibling of its old count,
    the front of those with the new one (arctic's _decrement_count)."""
    kids = parent.kids
    i = kids.index(kid)
    c = kid.count
    del kids[i]
    j = i
    while j < len(kids) and kids[j].count == c:
        j += 1
    kid.count = c - 1
    kids.insert(j, kid)


@dataclass
class Draft:
    """A chain draft: tokens, each one's estimated probability, their float32 sum, and the length
    of the context match it came from (0: no draft)."""

    token_ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class SuffixTree:
    """Sequences by id; each append inserts the suffixes the new token ends, cut at max_depth."""

    def __init__(self, max_depth: int):
        if max_depth < 1:
            raise ValueError(f"max_depth {max_depth} must be >= 1")
        self.max_depth = max_depth
        self._root = _Node(-1)
        self._seqs: dict[int, list[int]] = {}
        # per sequence, the nodes where its last max_depth suffixes end (deepest first)
        self._active: dict[int, deque[_Node]] = {}

    @property
    def num_seqs(self) -> int:
        return len(self._seqs)

    def sequence(self, seq_id: int) -> list[int]:
        return list(self._seqs.get(seq_id, ()))

    def append(self, seq_id: int, token: int) -> None:
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, deque())
        root = self._root
        root.count += 1  # the empty suffix that starts at the new token
        active.append(root)
        if len(active) > self.max_depth:
            active.popleft()  # that suffix is max_depth long: it stops growing
        seq.append(token)
        for n, node in enumerate(active):
            kid = node.child(token)
            if kid is None:
                kid = node.add_child(token)
            else:
                _increment(node, kid)
            active[n] = kid

    def extend(self, seq_id: int, tokens) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def remove(self, seq_id: int) -> None:
        """Take a sequence out: every suffix it put in is counted down; nodes left at 0 go."""
        seq = self._seqs.pop(seq_id, None)
        self._active.pop(seq_id, None)
        if seq is None:
            return
        for start in range(len(seq)):
            node = self._root
            node.count -= 1
            for token in seq[start : start + self.max_depth]:
                kid = node.child(token)
                if kid.count == 1:
                    node.drop_child(kid)  # and the whole branch below it, counted 1 as well
                    break
                _decrement(node, kid)
                node = kid

    def _match(self, pattern) -> _Node | None:
        node = self._root
        for token in pattern:
            node = node.child(token)
            if node is None:
                return None
        return node

    def speculate(
        self, context, max_spec_tokens: int, max_spec_factor: float = 1.0, min_token_prob: float = 0.1
    ) -> Draft:
        """The best chain draft for `context` (a token list; arctic's caller passes at most
        max_depth tokens). Match lengths stop one short of the whole context, as arctic's do."""
        context = list(context)
        factor = f32(max_spec_factor)
        min_prob = f32(min_token_prob)
        best = Draft()
        for match_len in range(1, len(context)):
            node = self._match(context[len(context) - match_len :])
            if node is None:
                break
            # static_cast<int>(match_len * factor + offset 0 + 1e-6), the product in float32
            cap = max(min(max_spec_tokens, int(f32(f32(float(match_len)) * factor) + 1e-6)), 0)
            draft = self._follow(node, cap, min_prob)
            if draft.score >= best.score:
                best = draft
                best.match_len = match_len
        return best

    @staticmethod
    def _follow(node: _Node, cap: int, min_prob: float) -> Draft:
        draft = Draft()
        prob = 1.0
        while len(draft.token_ids) < cap and node.kids:
            kid = node.kids[0]
            prob = f32(prob * f32(f32(float(kid.count)) / f32(float(node.count))))
            if prob < min_prob:
                break
            draft.token_ids.append(kid.token)
            draft.probs.append(prob)
            draft.score = f32(draft.score + prob)
            node = kid
        return draft
