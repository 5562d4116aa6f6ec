"""`--draft-sampling onehot` (the default at temperature > 0): greedy drafts accepted with
probability p(d); on rejection the token comes from p with d removed and renormalised. This is
what vLLM (draft_probs=None: draft_prob = 1, recovered from p with the draft zeroed) and the
EAGLE repo (evaluate_posterior: qx = 1.0, gtp[x] = 0 and renormalise) do.

Oracles: exact accept/reject on one-hot distributions; the emitted tokens follow the target
distribution (chi-square against target-only sampling); the acceptance rate is p(d); the
contiguous runner's rule written out agrees; the runner drafts greedily in this mode."""

from __future__ import annotations

import pytest
import torch
from conftest import run_spec

from alcheck.runner.contiguous import _Picker
from alcheck.runner.sampling import onehot_accept, rejection_accept

VOCAB = 6
ROWS = 60_000
CHI2_DF5_ALPHA_1E4 = 25.745  # scipy.stats.chi2.ppf(1 - 1e-4, 5)


def chi2(tokens: torch.Tensor, p: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=len(p)).double()
    expected = p.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


def dist(g, sharp=1.5):
    return torch.softmax(torch.randn(VOCAB, generator=g) * sharp, -1)


def one_hot_logits(tokens, vocab=VOCAB):
    out = torch.full((len(tokens), vocab), -1e4)
    out[torch.arange(len(tokens)), torch.tensor(tokens)] = 1e4
    return out


CASES = [
    ([1, 2, 3, 4], [1, 2, 3], 3, 4),  # all accepted: the bonus comes from the last position
    ([1, 2, 3, 4], [1, 2, 5], 2, 3),  # third rejected: p without the draft is the target's token
    ([1, 2, 3, 4], [0, 2, 3], 0, 1),  # first rejected: later agreement does not count
    ([5, 0, 0, 0], [5, 1, 0], 1, 0),
]


@pytest.mark.parametrize("target_tokens, draft_tokens, accepted, emitted", CASES)
def test_onehot_exact_accept_reject(target_tokens, draft_tokens, accepted, emitted):
    g = torch.Generator().manual_seed(0)
    logits = one_hot_logits(target_tokens)[None].expand(200, -1, -1)
    drafts = torch.tensor(draft_tokens)[None].expand(200, -1)
    for temperature in (1.0, 0.5):
        got_a, got_next = onehot_accept(drafts, logits, temperature, g)
        assert got_a.tolist() == [accepted] * 200
        assert got_next.tolist() == [emitted] * 200
        picker = _Picker(temperature, 0, "cpu", "onehot")
        for _ in range(20):
            assert picker.accept(list(draft_tokens), [None] * 3, logits[0]) == (accepted, emitted)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("k", [1, 3])
def test_onehot_output_follows_the_target_distribution(k, temperature):
    g = torch.Generator().manual_seed(200 + k)
    p = torch.stack([dist(g) for _ in range(k + 1)])  # the target, per position
    q = torch.stack([dist(g) for _ in range(k)])  # the draft model; onehot drafts its argmax
    drafts = q.argmax(-1)[None].expand(ROWS, k)
    logits = (p.log() * temperature).expand(ROWS, k + 1, VOCAB)  # softmax(logits / T) == p
    accepted, nxt = onehot_accept(drafts, logits, temperature, g)
    first = torch.where(accepted >= 1, drafts[:, 0], nxt)
    target_only = torch.multinomial(p[0], ROWS, replacement=True, generator=g)
    assert chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    assert chi2(target_only, p[0]) < CHI2_DF5_ALPHA_1E4  # the oracle passes its own test
    # acceptance of the first draft is p(d), not Σ min(p, q)
    ok = accepted >= 1
    assert abs(ok.double().mean() - p[0, drafts[0, 0]]) < 0.01
    if k > 1:  # given the first draft accepted, the next emitted token follows p at position 1
        second = torch.where(accepted[ok] >= 2, drafts[ok, 1], nxt[ok])
        assert chi2(second, p[1]) < CHI2_DF5_ALPHA_1E4
    # the test has power: a rule that skipped the renormalisation would emit d too often
    wrong = torch.where(
        accepted >= 1, drafts[:, 0], torch.multinomial(p[0], ROWS, replacement=True, generator=g)
    )
    assert chi2(wrong, p[0]) > 10 * CHI2_DF5_ALPHA_1E4


def test_the_two_conventions_accept_at_different_rates():
    """On a flat draft and a peaked target, onehot accepts p(argmax q) and sampled Σ min(p, q)."""
    g = torch.Generator().manual_seed(3)
    p = torch.tensor([[0.05, 0.05, 0.7, 0.1, 0.05, 0.05]] * 2)
    q = torch.tensor([[0.2, 0.19, 0.18, 0.16, 0.14, 0.13]])
    logits = p.log().expand(ROWS, 2, VOCAB)
    greedy = q.argmax(-1)[None].expand(ROWS, 1)
    a_onehot, _ = onehot_accept(greedy, logits, 1.0, g)
    sampled = torch.multinomial(q[0], ROWS, replacement=True, generator=g)[:, None]
    a_sampled, _ = rejection_accept(sampled, q.expand(ROWS, 1, VOCAB), logits, 1.0, g)
    assert abs(a_onehot.double().mean() - 0.05) < 0.01
    assert abs(a_sampled.double().mean() - torch.minimum(p[0], q[0]).sum()) < 0.01


def test_contiguous_picker_onehot_follows_the_target():
    g = torch.Generator().manual_seed(5)
    p = torch.stack([dist(g), dist(g)])
    picker = _Picker(1.0, 11, "cpu", "onehot")
    d = int(dist(g).argmax())
    rows = 6000
    first = torch.tensor(
        [(lambda a, t: d if a >= 1 else t)(*picker.accept([d], [None], p.log())) for _ in range(rows)]
    )
    assert chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    assert abs((first == d).double().mean() - p[0, d]) < 0.03
    assert picker.draft(torch.tensor([0.1, 3.0, 0.2])) == (1, None)  # greedy draft, no q kept
    sampled = _Picker(1.0, 11, "cpu", "sampled")
    token, q = sampled.draft(torch.tensor([0.1, 3.0, 0.2]))
    assert q is not None and abs(float(q.sum()) - 1) < 1e-6


@pytest.mark.parametrize("draft_sampling", ["onehot", "sampled"])
def test_runner_drafts_greedily_in_onehot_mode(pair, prompts, draft_sampling, monkeypatch):
    from alcheck.runner.proposers.eagle import EagleProposer

    target, head = pair
    seen = []
    real = EagleProposer.propose

    def spy(self, runner, reqs, inputs, features, starts, k):
        drafts, dists = real(self, runner, reqs, inputs, features, starts, k)
        seen.append(dists)
        return drafts, dists

    monkeypatch.setattr(EagleProposer, "propose", spy)
    results, runner = run_spec(
        target.model,
        head,
        target.eos_token_ids,
        prompts[:2],
        k=2,
        max_tokens=12,
        temperature=1.0,
        seed=3,
        draft_sampling=draft_sampling,
    )
    assert seen and all(r.steps >= 1 for r in results)
    if draft_sampling == "onehot":
        assert all(d is None for d in seen)  # argmax drafts: no draft distribution kept
    else:
        assert all(d is not None for d in seen)
    # the draft at greedy must be the argmax of the head's logits
    logits = torch.randn(3, 40)
    token, q = runner.draft_sample(logits)
    if draft_sampling == "onehot":
        assert q is None and token.tolist() == logits.argmax(-1).tolist()


def test_runs_saved_before_the_option_resume_with_their_own_rule():
    """A run.json written before --draft-sampling existed sampled its drafts: resuming it must not
    switch it silently to onehot."""
    from alcheck.config import RunConfig

    old = RunConfig(target="t", draft="d", temperature=1.0).to_dict()
    del old["draft_sampling"]
    assert RunConfig.from_dict(old).draft_sampling == "sampled"
    assert RunConfig.from_dict({**old, "draft_sampling": "onehot"}).draft_sampling == "onehot"
