"""The parallel layers of the Megatron split. Column-parallel projections (q/k/v, gate/up) are
plain nn.Linear modules with fewer output rows and need no communication; these are the rest:

- RowParallelLinear: o_proj and down_proj. Each rank holds some input columns; the partial
  products are summed by one all-reduce, and the (replicated) bias is added once, after it.
- VocabParallelEmbedding: each rank holds a contiguous range of the vocabulary's rows; ids
  outside it look up zeros and the all-reduce fills them in. Adding zeros is exact, so the
  embedding equals the unsplit one bit for bit.
- VocabParallelHead: the lm_head's rows split the same way; each rank's logits are gathered, so
  every rank samples from the same full logits and takes the same argmax.

Parameter names stay `weight` / `bias`, so checkpoint names map as for the unsplit model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from alcheck.tp.group import TPGroup


class RowParallelLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TPGroup):
        super().__init__(in_features, out_features, bias=bias)
        self.tp = tp

    def forward(self, x):
        out = self.tp.all_reduce(F.linear(x, self.weight))
        return out if self.bias is None else out + self.bias


class VocabParallelEmbedding(nn.Embedding):
    def __init__(self, vocab_size: int, hidden_size: int, tp: TPGroup):
        self.start, self.stop = tp.part(vocab_size)
        super().__init__(self.stop - self.start, hidden_size)
        self.vocab_size, self.tp = vocab_size, tp

    def forward(self, ids):
        mine = (ids >= self.start) & (ids < self.stop)
        local = F.embedding(torch.where(mine, ids - self.start, 0), self.weight)
        return self.tp.all_reduce(local.masked_fill_(~mine.unsqueeze(-1), 0))


class VocabParallelHead(nn.Linear):
    def __init__(self, hidden_size: int, vocab_size: int, tp: TPGroup):
        start, stop = tp.part(vocab_size)
        super().__init__(hidden_size, stop - start, bias=False)
        self.vocab_size, self.tp = vocab_size, tp

    def forward(self, hidden):
        return self.tp.all_gather_last(F.linear(hidden, self.weight), self.vocab_size)
