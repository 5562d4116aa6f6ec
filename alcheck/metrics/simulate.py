"""A cheap, seeded model of per-question acceptance counts (bench/bench_stats.py and tests).

- A question has a difficulty z ~ N(0, 1) and needs T tokens after its prefill token (half
  hit max_tokens, the rest are uniform in [max_tokens/4, max_tokens)).
- At K, a step accepts a drafts with P(a >= i) = p**i (i <= K), p = sigmoid(base + 0.6 z);
  `base` is calibrated so the expected pooled AL on the question set is the requested value.
- A generation takes S = round(T / AL_q) steps; its accepted drafts are the sum of S
  independent per-step draws (a multinomial over a = 0..K).
- Every repeat redraws every step of every question: run-to-run noise as at temperature > 0
  (the harshest case; on GPU bf16 greedy only the questions whose argmax flips move).

A true change of delta is a second `base` calibrated to AL - delta on the same questions. A fault
at one draft position is a `scale` on the conditional acceptance there (metrics/positions.py):
P(a >= i | a >= i - 1) = p * scale[i], on the same base, so the positions before it keep theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

TRUE_AL = {1: 1.71, 2: 2.13, 3: 2.32, 4: 2.42, 5: 2.48}  # the seed thread's EAGLE-repo row
QUESTION_SD = 0.6
MAX_TOKENS = 256


@dataclass(frozen=True)
class QuestionSet:
    z: np.ndarray  # difficulty per question
    tokens: np.ndarray  # tokens each generation needs after its prefill token

    @classmethod
    def draw(cls, n: int, rng: np.random.Generator, max_tokens: int = MAX_TOKENS) -> QuestionSet:
        z = rng.standard_normal(n)
        full = rng.random(n) < 0.5
        tokens = np.where(full, max_tokens - 1, rng.integers(max_tokens // 4, max_tokens, n))
        return cls(z, tokens.astype(float))

    def __len__(self) -> int:
        return len(self.z)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def expected_al(p, k: int):
    """Expected tokens per step when P(a >= i) = p**i for i <= k: 1 + Σ p**i."""
    p = np.asarray(p, dtype=float)
    return 1.0 + sum(p**i for i in range(1, k + 1))


def calibrate(questions: QuestionSet, k: int, targets) -> np.ndarray:
    """Base logits (one per target AL) giving that expected pooled AL on these questions."""
    targets = np.atleast_1d(np.asarray(targets, dtype=float))
    if ((targets <= 1.0) | (targets >= 1.0 + k)).any():
        raise ValueError(f"AL targets {targets} impossible at K={k}: must lie in (1, {1 + k})")
    lo, hi = np.full(targets.shape, -30.0), np.full(targets.shape, 30.0)
    weights = questions.tokens
    for _ in range(50):
        mid = (lo + hi) / 2.0
        al_q = expected_al(_sigmoid(mid[:, None] + QUESTION_SD * questions.z[None, :]), k)
        pooled = weights.sum() / (weights / al_q).sum(axis=1)
        low = pooled < targets
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return (lo + hi) / 2.0


def _accept_probs(questions: QuestionSet, k: int, base: float, scale=None) -> tuple[np.ndarray, np.ndarray]:
    """(p per question, P(a = j) for j = 0..K); `scale[i - 1]` multiplies the conditional
    acceptance at draft position i (None: every position accepts with p)."""
    p = np.clip(_sigmoid(base + QUESTION_SD * questions.z), 1e-9, 1 - 1e-9)
    if scale is None:
        dist = np.stack([p**j * (1 - p) for j in range(k)] + [p**k], axis=1)  # P(a = j)
        return p, dist / dist.sum(axis=1, keepdims=True)
    scale = np.asarray(scale, dtype=float)
    if scale.shape != (k,) or (scale < 0).any():
        raise ValueError(f"scale must hold K={k} factors >= 0, got {scale.tolist()}")
    conditional = np.clip(p[:, None] * scale[None, :], 0.0, 1.0)  # [q, K]
    at_least = np.concatenate([np.ones((len(p), 1)), np.cumprod(conditional, axis=1)], axis=1)  # P(a >= j)
    dist = at_least - np.concatenate([at_least[:, 1:], np.zeros((len(p), 1))], axis=1)
    return p, dist


@dataclass(frozen=True)
class Arm:
    """One engine at one K on one question set: per-question step counts and P(a = j)."""

    k: int
    dist: np.ndarray  # [q, K+1]
    steps: np.ndarray  # [q]

    @classmethod
    def make(cls, questions: QuestionSet, k: int, base: float, scale=None) -> Arm:
        """`scale`: K factors on the conditional acceptance per draft position (None: all 1)."""
        p, dist = _accept_probs(questions, k, base, scale)
        # expected tokens per step, per question
        al_q = expected_al(p, k) if scale is None else dist @ np.arange(k + 1) + 1.0
        steps = np.maximum(1.0, np.round(questions.tokens / al_q))
        return cls(k, dist, steps)

    def conditional(self) -> np.ndarray:
        """True pooled conditional acceptance at positions 1..K on these prompts: expected steps
        that accepted at i over expected steps that reached i."""
        at_least = np.flip(np.cumsum(np.flip(self.dist, 1), 1), 1)  # [q, j] P(a >= j), j = 0..K
        reached = self.steps @ at_least
        return reached[1:] / reached[:-1]

    @property
    def truth(self) -> float:
        """The true AL on these prompts (what infinitely many repeats converge to)."""
        per_step = self.dist @ np.arange(self.k + 1)
        return float(1.0 + (self.steps * per_step).sum() / self.steps.sum())

    @property
    def run_sd(self) -> float:
        """Run-to-run SD of one repeat's pooled AL (exact for this model)."""
        a = np.arange(self.k + 1)
        var_a = self.dist @ (a * a) - (self.dist @ a) ** 2
        return float(np.sqrt((self.steps * var_a).sum()) / self.steps.sum())

    def simulate(self, repeats: int, rng: np.random.Generator):
        """(E[r, q], S[r, q], per_pos[r, q, i]) for `repeats` runs of this arm."""
        n, k = len(self.steps), self.k
        # multinomial over a = 0..K as a chain of binomials (vectorised over repeats, questions)
        left = np.broadcast_to(self.steps.astype(np.int64), (repeats, n)).copy()
        mass = np.ones(n)
        counts = np.empty((repeats, n, k + 1), dtype=np.int64)
        for a in range(k):
            counts[..., a] = rng.binomial(left, np.clip(self.dist[:, a] / np.maximum(mass, 1e-300), 0.0, 1.0))
            left -= counts[..., a]
            mass = mass - self.dist[:, a]
        counts[..., k] = left
        accepted = counts @ np.arange(k + 1)
        per_pos = np.flip(np.cumsum(np.flip(counts[..., 1:], -1), -1), -1)  # steps with a >= i+1
        steps = np.broadcast_to(self.steps, (repeats, n))
        return steps + accepted, steps.copy(), per_pos


def questions_frame(questions: QuestionSet, runs: dict[int, tuple], first_id: int = 81) -> pd.DataFrame:
    """questions.csv rows (turn 1 only) from {K: Arm.simulate(...) output}."""
    frames = []
    ids = np.arange(first_id, first_id + len(questions))
    for k, (emitted, steps, per_pos) in sorted(runs.items()):
        for repeat in range(emitted.shape[0]):
            s = steps[repeat].astype(np.int64)
            frames.append(
                pd.DataFrame(
                    {
                        "k": k,
                        "repeat": repeat,
                        "question_id": ids,
                        "turn": 1,
                        "category": "writing",
                        "prompt_tokens": 50,
                        "generated_tokens": (questions.tokens + 1).astype(np.int64),
                        "steps": s,
                        "drafted": s * k,
                        "accepted": (emitted[repeat] - steps[repeat]).astype(np.int64),
                        "accepted_per_pos": [";".join(map(str, row)) for row in per_pos[repeat]],
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)
