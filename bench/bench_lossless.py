#!/usr/bin/env python3
"""False-alarm rate and power of the temperature > 0 lossless check (alcheck/metrics/lossless.py),
by seeded simulation on the CPU; writes results/bench-lossless.md.

    python bench/bench_lossless.py [--replicates 1000] [--out results/bench-lossless.md]

The target is a random bigram language model (vocabulary 64, a prompt is a start token), the draft
a noisy copy of it. Each replicate draws `prompts` x `samples` sequences of 32 tokens from each
side and runs the test. Samplers:
- target-only (both sides): the null hypothesis, directly;
- speculative, onehot (greedy drafts, accept with p(d), recovered from p minus d), K = 3: a correct
  speculative sampler, so also the null;
- speculative, sampled (drafts from q, accept min(1, p/q), recovered from max(0, p - q)): the null;
- the same two with the recovered token drawn from p itself (alcheck serve --lossy's bug): lossy.
A null row's rejection rate is the false-alarm rate: at most alpha for an exact test (its binomial
SE is printed). Lossy rows give the power.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alcheck.metrics.lossless import permutation_test, sequence_statistics  # noqa: E402

VOCAB, LENGTH, K = 64, 32, 3


class Bigram:
    def __init__(self, rng, sharpness: float = 2.5, draft_noise: float = 1.0):
        logits = rng.normal(0, sharpness, (VOCAB, VOCAB))
        self.p = _softmax(logits)
        self.q = _softmax(logits + rng.normal(0, draft_noise, (VOCAB, VOCAB)))
        self.logp = np.log(self.p)
        self.entropy = -(self.p * self.logp).sum(1)
        self.var = (self.p * self.logp**2).sum(1) - self.entropy**2
        self.top, self.pmax = self.p.argmax(1), self.p.max(1)

    def stats(self, start: int, seq: list[int]) -> tuple[float, float]:
        prev = np.array([start, *seq[:-1]])
        x = np.array(seq)
        return sequence_statistics(
            self.logp[prev, x], self.entropy[prev], self.var[prev], self.pmax[prev], self.top[prev] == x
        )


def _softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _draw(rng, dist) -> int:
    return int(rng.choice(VOCAB, p=dist))


def target_only(model, rng, start):
    seq, prev = [], start
    for _ in range(LENGTH):
        prev = _draw(rng, model.p[prev])
        seq.append(prev)
    return seq


def speculative(model, rng, start, rule: str, lossy: bool):
    """One sequence by K-draft speculative sampling (rule "onehot" or "sampled")."""
    seq, prev = [], start
    while len(seq) < LENGTH:
        drafts, ctx = [], prev
        for _ in range(K):
            ctx = int(model.q[ctx].argmax()) if rule == "onehot" else _draw(rng, model.q[ctx])
            drafts.append(ctx)
        ctx, emitted = prev, []
        for d in drafts:
            p, q = model.p[ctx], model.q[ctx]
            ok = rng.random() < (p[d] if rule == "onehot" else min(1.0, p[d] / q[d]))
            if ok:
                emitted.append(d)
                ctx = d
                continue
            if lossy:
                residual = p
            elif rule == "onehot":
                residual = p.copy()
                residual[d] = 0.0
            else:
                residual = np.maximum(p - q, 0.0)
            emitted.append(_draw(rng, residual / residual.sum()))
            break
        else:
            emitted.append(_draw(rng, model.p[ctx]))  # the bonus token
        seq.extend(emitted)
        prev = seq[-1]
    return seq[:LENGTH]


SAMPLERS = {
    "target-only": (lambda m, r, s: target_only(m, r, s), False),
    "speculative onehot": (lambda m, r, s: speculative(m, r, s, "onehot", False), False),
    "speculative sampled": (lambda m, r, s: speculative(m, r, s, "sampled", False), False),
    "onehot, recovered from p (lossy)": (lambda m, r, s: speculative(m, r, s, "onehot", True), True),
    "sampled, recovered from p (lossy)": (lambda m, r, s: speculative(m, r, s, "sampled", True), True),
}


def rejection_rate(name, prompts, samples, replicates, resamples, seed):
    sampler, _ = SAMPLERS[name]
    hits = {0.05: 0, 0.01: 0}
    for rep in range(replicates):
        rng = np.random.default_rng([seed, rep])
        model = Bigram(rng)
        starts = rng.choice(VOCAB, prompts, replace=False)
        engine = {
            i: [model.stats(s, sampler(model, rng, s)) for _ in range(samples)] for i, s in enumerate(starts)
        }
        reference = {
            i: [model.stats(s, target_only(model, rng, s)) for _ in range(samples)]
            for i, s in enumerate(starts)
        }
        p = permutation_test(engine, reference, n_resamples=resamples, seed=rep).p_value
        for alpha in hits:
            hits[alpha] += p < alpha
    return {alpha: n / replicates for alpha, n in hits.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=999)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", type=Path, default=Path("results/bench-lossless.md"))
    args = ap.parse_args(argv)
    rows, start = [], time.perf_counter()
    for prompts, samples in ((16, 2), (40, 2)):
        for name, (_, lossy) in SAMPLERS.items():
            rates = rejection_rate(name, prompts, samples, args.replicates, args.resamples, args.seed)
            rows.append((prompts, samples, name, lossy, rates))
            print(f"{prompts} x {samples}  {name:36s} {rates[0.05]:.3f} {rates[0.01]:.3f}", flush=True)
    se = (0.05 * 0.95 / args.replicates) ** 0.5
    lines = [
        "# The lossless check's error rates (bench/bench_lossless.py)",
        "",
        f"Seeded simulation (seed {args.seed}): {args.replicates} "
        f"replicates per row, {args.resamples} permutation "
        f"resamples per test, a random bigram target over {VOCAB} "
        "tokens (a new one per replicate), a noisy copy "
        f"as the draft, K = {K}, sequences of {LENGTH} tokens; "
        "prompts x samples per side. Rejection rate at alpha "
        f"= 0.05 and 0.01: for the rows that are lossless it is the false-alarm rate (binomial SE at 0.05: "
        f"{se:.3f}); for the lossy rows it is the power.",
        "",
        "| prompts x samples | engine sampler | lossless? | rejected at 0.05 | rejected at 0.01 |",
        "|---|---|---|---:|---:|",
    ]
    for prompts, samples, name, lossy, rates in rows:
        lines.append(
            f"| {prompts} x {samples} | {name} | {'no' if lossy else 'yes'} | {rates[0.05]:.3f} | "
            f"{rates[0.01]:.3f} |"
        )
    lines += ["", f"Took {time.perf_counter() - start:.0f} s."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
