"""Oracles 2 and 3 for the paged speculative runner (float32 CPU, block size 4).

2. Speculative output == target-only greedy token for token (our K=0 path, and transformers'
   generate(do_sample=False)), K = 1..5, prompts of different lengths, to EOS and to max_tokens,
   also under KV preemption and with max_batch_size=2.
3. A proposer that proposes the target's own greedy continuation accepts all K drafts on every
   step (AL = K+1); one that always proposes a wrong token accepts none (AL = 1).
Plus temperature > 0: seeded reproducibility, rejection sampling preserves the target
distribution (chi-square), and exact accept/reject on one-hot distributions.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import MAX_TOKENS, pooled_al, run_spec

from alcheck.runner.sampling import greedy_accept, rejection_accept

KS = [1, 2, 3, 4, 5]


def _same_tokens(results, expected):
    for i, (got, want) in enumerate(zip(results, expected)):
        assert got.output_ids == want.output_ids, f"prompt {i}: speculative output differs from greedy"
        assert got.finish_reason == want.finish_reason


def _check_counts(results, k):
    for r in results:
        assert r.steps >= 1
        assert r.drafted == r.steps * k
        assert len(r.accepted_per_pos) == k
        # per_pos[i] counts steps with >= i+1 accepted: non-increasing, bounded, sums to accepted
        assert all(a >= b for a, b in zip(r.accepted_per_pos, r.accepted_per_pos[1:]))
        assert r.accepted_per_pos[0] <= r.steps
        assert sum(r.accepted_per_pos) == r.accepted
        # every step emits 1 + a tokens, counted before truncation; only the last step truncates
        assert r.steps + r.accepted >= len(r.output_ids) - 1
        assert r.steps + r.accepted - (len(r.output_ids) - 1) <= k


def test_greedy_baseline_hits_eos_and_length(greedy, pair):
    eos = set(pair[0].eos_token_ids)
    reasons = {r.finish_reason for r in greedy}
    assert reasons == {"eos", "length"}, reasons
    for r in greedy:
        if r.finish_reason == "eos":
            assert r.output_ids[-1] in eos and not eos & set(r.output_ids[:-1])
        else:
            assert len(r.output_ids) == MAX_TOKENS and not eos & set(r.output_ids)
        assert r.accepted == 0 and r.steps == len(r.output_ids) - 1  # K=0: one token per step


def test_k0_matches_transformers_generate(pair_dirs, prompts, greedy):
    from transformers import LlamaForCausalLM

    ref = LlamaForCausalLM.from_pretrained(str(pair_dirs[0]), dtype=torch.float32).eval()
    eos_prompt = next(i for i, r in enumerate(greedy) if r.finish_reason == "eos")
    len_prompt = next(i for i, r in enumerate(greedy) if r.finish_reason == "length")
    for i in sorted({0, eos_prompt, len_prompt}):
        with torch.no_grad():
            out = ref.generate(torch.tensor([prompts[i]]), max_new_tokens=MAX_TOKENS, do_sample=False)
        assert out[0, len(prompts[i]) :].tolist() == greedy[i].output_ids, f"prompt {i}"


@pytest.mark.parametrize("k", KS)
def test_speculative_equals_greedy(spec_results, greedy, k):
    results = spec_results(k)
    _same_tokens(results, greedy)
    _check_counts(results, k)
    assert 1.0 < pooled_al(results) < k + 1  # partial acceptance: the pair is a real test


@pytest.mark.parametrize("k", [0, 3])
def test_preemption_changes_nothing(pair, prompts, greedy, spec_results, k):
    target, head = pair
    reference = spec_results(k)
    # the longest request needs cdiv(30 + 60 + 2K, 4) <= 25 blocks: 36 blocks hold about one
    results, runner = run_spec(target.model, head, target.eos_token_ids, prompts, k=k, num_blocks=36)
    _same_tokens(results, greedy)
    assert sum(r.preemptions for r in results) > 0
    for got, want in zip(results, reference):
        assert (got.steps, got.accepted, got.accepted_per_pos) == (
            want.steps,
            want.accepted,
            want.accepted_per_pos,
        )
    assert runner.kv.num_free_blocks == runner.kv.num_usable_blocks  # everything returned


@pytest.mark.parametrize("k", [0, 4])
def test_max_batch_size_two(pair, prompts, greedy, spec_results, k):
    target, head = pair
    reference = spec_results(k)
    results, _ = run_spec(target.model, head, target.eos_token_ids, prompts, k=k, max_batch_size=2)
    _same_tokens(results, greedy)
    for got, want in zip(results, reference):
        assert (got.steps, got.accepted) == (want.steps, want.accepted)


# -- oracle 3: proposers with known acceptance ---------------------------------------------------


class ContinuationProposer:
    """Proposes the target's greedy continuation (or, wrong=True, a token that differs from it)."""

    aux_layers = ()  # the runner feeds it the target's final hidden states
    attention_layers: list = []  # no head: no draft KV

    def __init__(self, sequences: list[list[int]], vocab: int, wrong: bool = False):
        self.sequences, self.vocab, self.wrong = sequences, vocab, wrong
        self.calls = 0

    def propose(self, runner, reqs, inputs, features, starts, k):
        self.calls += 1
        rows = []
        for r in reqs:
            seq, n = self.sequences[r.request_id], len(r.token_ids)
            assert seq[:n] == r.token_ids  # the runner committed exactly the greedy tokens
            cont = seq[n : n + k] + [0] * max(0, n + k - len(seq))
            rows.append([(t + 1) % self.vocab for t in cont] if self.wrong else cont)
        return torch.tensor(rows, dtype=torch.long), None


def _continuations(target, prompts, max_tokens, eos_ids):
    results, _ = run_spec(target.model, None, eos_ids, prompts, max_tokens=max_tokens, k=0)
    return [p + r.output_ids for p, r in zip(prompts, results)]


@pytest.mark.parametrize("k", KS)
def test_oracle_proposer_accepts_everything(pair, prompts, k):
    target, _ = pair
    vocab = target.model.config.vocab_size
    # no EOS: every step is full, so AL is exactly K+1 (drafts known past max_tokens too)
    seqs = _continuations(target, prompts, MAX_TOKENS + k + 1, [])
    oracle = ContinuationProposer(seqs, vocab)
    results, _ = run_spec(target.model, None, [], prompts, k=k, proposer=oracle)
    assert oracle.calls > 0
    for p, r, seq in zip(prompts, results, seqs):
        assert p + r.output_ids == seq[: len(p) + MAX_TOKENS]
        assert r.accepted == r.steps * k and r.accepted_per_pos == [r.steps] * k
        assert r.steps == math.ceil((MAX_TOKENS - 1) / (k + 1))
    assert pooled_al(results) == k + 1


@pytest.mark.parametrize("k", [2, 5])
def test_oracle_proposer_with_eos(pair, prompts, greedy, k):
    """With EOS, every step but the last accepts all K (the continuation ends at EOS)."""
    target, _ = pair
    seqs = [p + r.output_ids for p, r in zip(prompts, greedy)]
    oracle = ContinuationProposer(seqs, target.model.config.vocab_size)
    results, _ = run_spec(target.model, None, target.eos_token_ids, prompts, k=k, proposer=oracle)
    _same_tokens(results, greedy)
    for r in results:
        assert r.steps == math.ceil((len(r.output_ids) - 1) / (k + 1))
        assert r.accepted >= (r.steps - 1) * k
        assert all(n >= r.steps - 1 for n in r.accepted_per_pos)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_wrong_proposer_accepts_nothing(pair, prompts, greedy, k):
    target, _ = pair
    seqs = [p + r.output_ids for p, r in zip(prompts, greedy)]
    wrong = ContinuationProposer(seqs, target.model.config.vocab_size, wrong=True)
    results, _ = run_spec(target.model, None, target.eos_token_ids, prompts, k=k, proposer=wrong)
    _same_tokens(results, greedy)
    for r, g in zip(results, greedy):
        assert r.accepted == 0 and r.accepted_per_pos == [0] * k
        assert r.steps == len(g.output_ids) - 1  # one token per step after the prefill token
    assert pooled_al(results) == 1.0


# -- temperature > 0 -----------------------------------------------------------------------------


def test_sampling_run_is_reproducible(pair, prompts):
    target, head = pair
    kw = dict(k=3, temperature=0.8, max_tokens=30)
    a, _ = run_spec(target.model, head, target.eos_token_ids, prompts, seed=5, **kw)
    b, _ = run_spec(target.model, head, target.eos_token_ids, prompts, seed=5, **kw)
    c, _ = run_spec(target.model, head, target.eos_token_ids, prompts, seed=6, **kw)
    key = [(r.output_ids, r.steps, r.accepted, r.accepted_per_pos) for r in a]
    assert key == [(r.output_ids, r.steps, r.accepted, r.accepted_per_pos) for r in b]
    assert [r.output_ids for r in a] != [r.output_ids for r in c]
    _check_counts(a, 3)


CHI2_DF5_ALPHA_1E4 = 25.745  # scipy.stats.chi2.ppf(1 - 1e-4, 5)
VOCAB = 6
ROWS = 60_000


def _chi2(tokens: torch.Tensor, p: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=len(p)).double()
    expected = p.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


def _dist(g, sharp=1.0):
    return torch.softmax(torch.randn(VOCAB, generator=g) * sharp, -1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("k", [1, 3])
def test_rejection_sampling_preserves_target_distribution(k, temperature):
    g = torch.Generator().manual_seed(100 + k)
    p = torch.stack([_dist(g, 1.5) for _ in range(k + 1)])  # target, per position
    q = torch.stack([_dist(g, 1.5) for _ in range(k)])  # draft, per position
    drafts = torch.multinomial(q, ROWS, replacement=True, generator=g).T  # [ROWS, K]
    logits = (p.log() * temperature).expand(ROWS, k + 1, VOCAB)  # softmax(logits / T) == p
    accepted, nxt = rejection_accept(drafts, q.expand(ROWS, k, VOCAB), logits, temperature, g)
    first = torch.where(accepted >= 1, drafts[:, 0], nxt)
    assert _chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    # given the first draft accepted, the second emitted token follows the target at position 1
    ok = accepted >= 1
    second = torch.where(accepted[ok] >= 2, drafts[ok, 1 if k > 1 else 0], nxt[ok]) if k > 1 else nxt[ok]
    assert _chi2(second, p[1]) < CHI2_DF5_ALPHA_1E4
    # acceptance rate of the first draft is sum(min(p, q))
    assert abs(ok.double().mean() - torch.minimum(p[0], q[0]).sum()) < 0.01
    # the test has power: the drafts themselves do not follow p
    assert _chi2(drafts[:, 0], p[0]) > 10 * CHI2_DF5_ALPHA_1E4


def test_rejection_sampling_with_deterministic_draft():
    """q one-hot (a greedy draft) and random p: still exactly p."""
    g = torch.Generator().manual_seed(7)
    p = torch.stack([_dist(g, 1.5), _dist(g, 1.5)])
    q = torch.zeros(1, VOCAB)
    q[0, 2] = 1.0
    drafts = torch.full((ROWS, 1), 2)
    accepted, nxt = rejection_accept(drafts, q.expand(ROWS, 1, VOCAB), p.log().expand(ROWS, 2, VOCAB), 1.0, g)
    first = torch.where(accepted >= 1, drafts[:, 0], nxt)
    assert _chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    assert abs(accepted.double().mean() - p[0, 2]) < 0.01


def _one_hot_logits(tokens, vocab=VOCAB):
    out = torch.full((len(tokens), vocab), -1e4)
    out[torch.arange(len(tokens)), torch.tensor(tokens)] = 1e4
    return out


@pytest.mark.parametrize(
    "target_tokens, draft_tokens, accepted, emitted",
    [
        ([1, 2, 3, 4], [1, 2, 3], 3, 4),  # all accepted, bonus from the last position
        ([1, 2, 3, 4], [1, 2, 5], 2, 3),  # third rejected, recovered token is the target's
        ([1, 2, 3, 4], [0, 2, 3], 0, 1),  # first rejected: later agreement does not count
        ([5, 0, 0, 0], [5, 1, 0], 1, 0),
    ],
)
def test_one_hot_exact_accept_reject(target_tokens, draft_tokens, accepted, emitted):
    g = torch.Generator().manual_seed(0)
    logits = _one_hot_logits(target_tokens)[None].expand(200, -1, -1)
    q = torch.softmax(_one_hot_logits(draft_tokens), -1)[None].expand(200, -1, -1)
    drafts = torch.tensor(draft_tokens)[None].expand(200, -1)
    for temperature in (1.0, 0.5):
        got_a, got_next = rejection_accept(drafts, q, logits, temperature, g)
        assert got_a.tolist() == [accepted] * 200
        assert got_next.tolist() == [emitted] * 200
    got_a, got_next = greedy_accept(drafts[:1], logits[:1])
    assert (got_a.item(), got_next.item()) == (accepted, emitted)
