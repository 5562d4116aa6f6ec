"""A deliberately lossy `alcheck serve` (the hidden `--lossy` option): proof that the temperature > 0
lossless check (alcheck/metrics/lossless.py) fails a sampler that is wrong.

`recovered-from-target`: the acceptance decisions are the runner's own, but the token emitted after
them is drawn from the target's full p at that position, never from the residual (p with the
rejected draft removed under "onehot", max(0, p - q) under "sampled"). After a rejection the
rejected draft can come back, so drafted tokens are emitted too often: P(emit d) = p(d) + (1 - p(d)) p(d)
under "onehot". The bonus token after K accepted drafts is right either way.

The runner has no hook for its acceptance rule (phase 2 of issue 23 adds one), so the wrapper swaps
the two rules the runner module calls for the duration of each generate(); a lock keeps two lossy
calls from interleaving. Test use only: another runner running in the same process at that moment
would be lossy too.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from alcheck.engine.sampling import probs, sample
from alcheck.serve.config import LOSSY_MODES
_LOCK = threading.Lock()


def recovered_from_target(accept):
    """accept(drafts, ..., target_logits, temperature, generator) with the emitted token redrawn from p."""
    def lossy(drafts, *args):
        accepted, _ = accept(drafts, *args)
        target_logits, temperature, generator = args[-3:]
        p = probs(target_logits, temperature)
        return accepted, sample(p[torch.arange(len(accepted), device=p.device), accepted], generator)
    return lossy


@contextmanager
def _lossy_rules():
    import alcheck.engine.runner as runner

    saved = runner.onehot_accept, runner.rejection_accept
    runner.onehot_accept, runner.rejection_accept = (recovered_from_target(rule) for rule in saved)
    try:
        yield
    finally:
        runner.onehot_accept, runner.rejection_accept = saved


class LossyEngine:
    """A ServeEngine whose generate() emits recovered tokens from the wrong distribution."""

    def __init__(self, engine, mode: str):
        if mode not in LOSSY_MODES:
            raise ValueError(f"lossy mode {mode!r}: use one of {', '.join(LOSSY_MODES)}")
        self.engine, self.mode = engine, mode

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, max_tokens, temperature=0.0, seed=0):
        with _LOCK, _lossy_rules():
            return self.engine.generate(prompts, max_tokens, temperature, seed)
