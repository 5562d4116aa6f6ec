"""Is a speculative sampler lossless at temperature > 0? A two-sample test on what it generated.

Lossless speculative decoding emits sequences with exactly the target's distribution, so any
function of a sequence has the same distribution under speculative and target-only sampling. The
functions used here are residuals that the target itself predicts to be zero on average, token by
token (p_t = softmax(target logits / T) at generated token x_t):

- surprise: log p_t(x_t) + H(p_t), conditional variance Var_{p_t}(log p). A sampler that emits
  tokens the target finds unlikely (vLLM CPU 0.32's speculative path at T > 0) lowers it.
- top-1:    1[x_t = argmax p_t] - max p_t, conditional variance max p_t (1 - max p_t). A sampler
  that favours the (greedy) draft, such as one that draws recovered tokens from p instead of the
  residual, raises it.

Per sequence each residual is summed over its tokens and divided by the square root of the summed
conditional variances (a standardized martingale sum). Per prompt, the engine's sequences are set
against target-only samples of the same prompt, by their ranks among that prompt's sequences (a few
garbage sequences must not swamp the spread). For each statistic the difference of mean ranks, engine
minus reference, is averaged over prompts and divided by its permutation standard deviation (z); the
test statistic is the larger |z|, and its null distribution comes from shuffling the engine /
reference labels within each prompt (a stratified permutation test, Wilcoxon-style): under
losslessness all sequences of a prompt are exchangeable, so the test is exact at any sample size and
its false-alarm rate is at most alpha (bench/bench_lossless.py measures it). Two-sided. Pure numpy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

ALPHA = 0.05
N_RESAMPLES = 20000
STATISTICS = ("surprise", "top1")


def sequence_statistics(logprob, entropy, logprob_var, top_prob, is_top) -> tuple[float, float]:
    """(surprise, top-1): each residual summed over the sequence, over sqrt(summed conditional variance)."""
    lp, h, v = (np.asarray(x, dtype=float) for x in (logprob, entropy, logprob_var))
    pmax, top = np.asarray(top_prob, dtype=float), np.asarray(is_top, dtype=float)
    if not lp.size or not lp.shape == h.shape == v.shape == pmax.shape == top.shape:
        raise ValueError("a sequence needs one value of each score per generated token, at least one token")
    return _standardized((lp + h).sum(), v.sum()), _standardized(
        (top - pmax).sum(), (pmax * (1 - pmax)).sum()
    )


def _standardized(total: float, variance: float) -> float:
    # a sequence of certain tokens (variance 0) has residual 0 exactly: it says nothing
    return float(total / np.sqrt(variance)) if variance > 1e-12 else 0.0


@dataclass
class LosslessTest:
    prompts: int  # prompts with sequences on both sides
    engine_sequences: int
    reference_sequences: int
    engine_means: dict  # statistic -> mean over prompts of the engine's per-prompt mean (raw values)
    reference_means: dict
    z: dict  # statistic -> the mean rank difference (engine - reference) over its permutation SD
    p_value: float  # of the larger |z|, from the permutation distribution of that maximum
    alpha: float
    lossless: bool  # p_value >= alpha: no evidence of loss
    resamples: int

    def to_dict(self) -> dict:
        def rounded(v):
            if isinstance(v, dict):
                return {key: rounded(x) for key, x in v.items()}
            return round(v, 6) if isinstance(v, float) else v

        return {key: rounded(v) for key, v in asdict(self).items()}

    @property
    def driver(self) -> str:
        """The statistic that decided: the one with the larger |z|."""
        return max(self.z, key=lambda name: abs(self.z[name]))

    def line(self) -> str:
        verdict = "consistent with lossless" if self.lossless else "NOT lossless"
        zs = ", ".join(f"{name} z {self.z[name]:+.2f}" for name in STATISTICS)
        return (
            f"{verdict} (p = {self.p_value:.2g}; {zs}; {self.prompts} prompts, "
            f"{self.engine_sequences} engine + {self.reference_sequences} target-only sequences)"
        )


def permutation_test(
    engine: dict, reference: dict, n_resamples: int = N_RESAMPLES, seed: int = 0, alpha: float = ALPHA
) -> LosslessTest:
    """engine / reference: prompt key -> list of per-sequence statistic tuples (sequence_statistics).
    Prompts missing a side are left out."""
    keys = [key for key in engine if engine[key] and reference.get(key)]
    if not keys:
        raise ValueError("no prompt has sequences from both the engine and the reference")
    rng = np.random.default_rng(seed)
    width = len(STATISTICS)
    observed, null = np.zeros(width), np.zeros((n_resamples, width))
    for key in keys:
        e, r = (
            np.asarray(engine[key], float).reshape(-1, width),
            np.asarray(reference[key], float).reshape(-1, width),
        )
        # ranks within the prompt: a few garbage sequences must not swamp the spread (heavy tails)
        both = np.apply_along_axis(mid_ranks, 0, np.concatenate([e, r]))
        e, r = both[: len(e)], both[len(e) :]
        observed += e.mean(0) - r.mean(0)
        # each resample: a random split of this prompt's sequences into len(e) engine and len(r) reference
        order = np.argsort(rng.random((n_resamples, len(both))), axis=1)[:, : len(e)]
        picked = both[order].sum(axis=1)  # [resamples, width]
        null += picked / len(e) - (both.sum(0) - picked) / len(r)
    sd = null.std(axis=0)
    sd[sd == 0] = np.inf  # a statistic that never varies cannot be extreme
    z, z_null = observed / sd, np.abs(null / sd).max(axis=1)
    # the +1 makes the test exact with finitely many resamples; a hair of slack for float ties
    p = (1 + np.count_nonzero(z_null >= np.abs(z).max() - 1e-12)) / (1 + n_resamples)
    means = [
        np.mean([np.asarray(side[k], float).reshape(-1, width).mean(0) for k in keys], axis=0)
        for side in (engine, reference)
    ]
    named = [dict(zip(STATISTICS, map(float, m))) for m in (*means, z)]
    return LosslessTest(
        len(keys),
        sum(len(engine[k]) for k in keys),
        sum(len(reference[k]) for k in keys),
        named[0],
        named[1],
        named[2],
        float(p),
        alpha,
        bool(p >= alpha),
        n_resamples,
    )


def mid_ranks(values) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    uniq, inverse, counts = np.unique(np.asarray(values, float), return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]


def min_p_value(n_resamples: int = N_RESAMPLES) -> float:
    """The smallest p the test can give (1 / (1 + resamples))."""
    return 1 / (1 + n_resamples)
