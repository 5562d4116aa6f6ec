"""A deliberately lossy `alcheck serve` (the hidden `--lossy` option): proof that the temperature > 0
lossless check (alcheck/metrics/lossless.py) fails a sampler that is wrong.

`recovered-from-target`: the acceptance decisions are the runner's own, but the token emitted after
them is drawn from the target's full p at that position, never from the residual (p with the
rejected draft removed under "onehot", max(0, p - q) under "sampled"). After a rejection the
rejected draft can come back, so drafted tokens are emitted too often: P(emit d) = p(d) + (1 - p(d)) p(d)
under "onehot". The bonus token after K accepted drafts is right either way.

The wrong rule lives in a PagedRunner subclass (its `accept` method), so only this server's runner
is lossy.
"""

from __future__ import annotations

import torch

from alcheck.runner.paged import PagedRunner
from alcheck.runner.sampling import probs, sample
from alcheck.serve.config import LOSSY_MODES


class RecoveredFromTarget(PagedRunner):
    def accept(self, running, drafts, logits):
        accepted, _ = super().accept(running, drafts, logits)
        if self.cfg.temperature == 0:
            return accepted, _
        p = probs(logits, self.cfg.temperature)
        return accepted, sample(p[torch.arange(len(accepted), device=p.device), accepted], self.generator)


LOSSY_RUNNERS = {"recovered-from-target": RecoveredFromTarget}


class LossyPair:
    """A ServedPair whose runner emits recovered tokens from the wrong distribution."""

    def __init__(self, pair, mode: str):
        if mode not in LOSSY_MODES:
            raise ValueError(f"lossy mode {mode!r}: use one of {', '.join(LOSSY_MODES)}")
        self.pair, self.mode = pair, mode

    def __getattr__(self, name):
        return getattr(self.pair, name)

    def generate(self, prompts, max_tokens, temperature=0.0, seed=0):
        return self.pair.generate(
            prompts, max_tokens, temperature, seed, runner_class=LOSSY_RUNNERS[self.mode]
        )
