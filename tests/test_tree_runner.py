"""Issue 13: tree drafting in the paged and contiguous runners, on the copy-layer pair (block size 4).

- topk 1 with T = K+1 is the chain: the same results through the chain code and through the tree
  code (forced), K = 1..5.
- Lossless: output == target-only greedy for several (steps, topk, T), also under preemption
  (with the unpreempted run's counts) and with --no-kv-lookahead.
- A drafter whose top-1 branch is always the target's continuation gives AL = steps+1 exactly;
  the paged and contiguous runners agree on it, and on the real head.
- Slots: --audit-slots finds no foreign write with lookahead; without it the draft's tree levels
  write outside their request's blocks (the seed-thread bug, for trees) and acceptance drops.
- Temperature > 0: the EAGLE per-node rule keeps the target's distribution (chi-square).
- Bad settings exit 2 in one line (RunConfig, `alcheck run`) or raise ValueError (RunnerConfig).
"""

from __future__ import annotations

import math

import pytest
import torch
from click.testing import CliRunner
from conftest import MAX_TOKENS, expect_error, pooled_al, run_contiguous, run_spec

from alcheck.methods.table import proposer_for
from alcheck.runner.config import RunnerConfig
from alcheck.runner.drafting import propose_tree
from alcheck.runner.paged import PagedRunner
from alcheck.runner.tree import sample_tree_accept

TREES = [(3, 2, 5), (4, 4, 12), (5, 2, 8)]  # (steps, topk, T)


def key(r):
    return (r.output_ids, r.steps, r.accepted, list(r.accepted_per_pos), r.finish_reason)


def tree_run(pair, prompts, steps, topk, t, **cfg):
    target, head = pair
    return run_spec(
        target.model, head, target.eos_token_ids, prompts, k=steps, topk=topk, num_draft_tokens=t, **cfg
    )


@pytest.mark.parametrize("k", [1, 3, 5])
def test_topk1_is_the_chain(pair, prompts, spec_results, k):
    target, head = pair
    chain = [key(r) for r in spec_results(k)]
    same, _ = run_spec(target.model, head, target.eos_token_ids, prompts, k=k, topk=1, num_draft_tokens=k + 1)
    assert [key(r) for r in same] == chain
    runner = PagedRunner(
        target.model, proposer_for(head), target.eos_token_ids, RunnerConfig(num_spec_tokens=k, block_size=4)
    )
    runner.tree = True  # the tree code on a one-branch tree: drafting, verify, walk, KV moves
    assert [key(r) for r in runner.generate(prompts, MAX_TOKENS)] == chain


@pytest.mark.parametrize("steps, topk, t", TREES)
def test_tree_is_lossless_with_preemption(pair, prompts, greedy, spec_results, steps, topk, t):
    results, runner = tree_run(pair, prompts, steps, topk, t, audit_slots=True)
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]
    assert runner.auditor.violations == 0, runner.auditor.summary()
    for r in results:
        assert len(r.accepted_per_pos) == steps and sum(r.accepted_per_pos) == r.accepted
        assert all(a >= b for a, b in zip(r.accepted_per_pos, r.accepted_per_pos[1:]))
    # a tree never does worse here than the chain of the same depth (its top-1 path is that chain)
    assert pooled_al(results) >= pooled_al(spec_results(steps)) - 1e-9
    small, runner = tree_run(pair, prompts, steps, topk, t, num_blocks=40)
    assert sum(r.preemptions for r in small) > 0
    assert [key(r) for r in small] == [key(r) for r in results]
    assert runner.kv.num_free_blocks == runner.kv.num_usable_blocks


def test_no_lookahead_corrupts_draft_kv_for_trees(pair, prompts, greedy):
    steps, topk, t = 4, 4, 12
    good, runner = tree_run(pair, prompts, steps, topk, t, audit_slots=True)
    bad, bug = tree_run(pair, prompts, steps, topk, t, audit_slots=True, kv_lookahead=False)
    assert runner.auditor.violations == 0
    assert bug.auditor.violations > 0 and set(bug.auditor.by_layer) == {"draft"}, bug.auditor.summary()
    # only draft KV is hit, so the output stays lossless while acceptance drops
    assert [r.output_ids for r in bad] == [g.output_ids for g in greedy]
    assert pooled_al(bad) < pooled_al(good) - 0.1


class ContinuationDrafter:
    """A drafter whose top-1 child is always the target's continuation of the node's sequence and
    whose other children are the next token ids. Its 'hidden' row holds (request, tokens so far)."""

    aux_layers = ()  # the runner feeds it the target's final hidden states
    attention_layers: list = []  # no head: no draft KV

    def __init__(self, sequences, vocab, width):
        self.sequences, self.vocab, self.width = sequences, vocab, width

    def propose_tree(self, runner, reqs, inputs, features, starts, steps, topk, num_draft_tokens):
        self.reqs = reqs
        return propose_tree(self, runner, reqs, inputs, features, starts, steps, topk, num_draft_tokens)

    def extend(self, runner, batch, ids, features):
        rows = []
        for r, n in zip(self.reqs, batch.query_lens):
            seq = self.sequences_index(r.token_ids)
            rows += [[seq, len(r.token_ids)] + [-1] * (self.width - 2)] * n
        return torch.tensor(rows, dtype=torch.float64)

    def sequences_index(self, committed):
        matches = [i for i, s in enumerate(self.sequences) if s[: len(committed)] == committed]
        assert matches, "the runner committed tokens the target would not"
        return matches[0]

    def step(self, runner, batch, tokens, hidden):
        out = hidden.clone()
        count = (out[:, 2:] >= 0).sum(1)
        out[torch.arange(len(out)), 2 + count] = tokens.double()
        return out

    def logits(self, runner, hidden):
        out = torch.full((len(hidden), self.vocab), -50.0)
        for row, h in enumerate(hidden.tolist()):
            path = [int(x) for x in h[2:] if x >= 0]
            seq, n = self.sequences[int(h[0])], int(h[1])
            ok = seq[n : n + len(path)] == path
            nxt = seq[n + len(path)] if ok else 0
            for rank in range(4):
                out[row, (nxt + rank) % self.vocab] = 10.0 - rank
        return out


def test_continuation_drafter_accepts_every_level(pair, prompts):
    target, _ = pair
    steps, topk, t = 3, 3, 9
    longer = MAX_TOKENS + steps + 2
    continuations, _ = run_spec(target.model, None, [], prompts, k=0, max_tokens=longer)
    seqs = [p + r.output_ids for p, r in zip(prompts, continuations)]
    drafter = ContinuationDrafter(seqs, target.model.config.vocab_size, 2 + steps)
    runner = PagedRunner(
        target.model,
        drafter,
        [],
        RunnerConfig(num_spec_tokens=steps, topk=topk, num_draft_tokens=t, block_size=4),
    )
    paged = runner.generate(prompts, MAX_TOKENS)
    contiguous = run_contiguous(
        target.model, None, [], prompts, MAX_TOKENS, steps, topk=topk, num_draft_tokens=t, proposer=drafter
    )
    assert [key(r) for r in paged] == [key(r) for r in contiguous]
    for p, r, seq in zip(prompts, paged, seqs):
        assert p + r.output_ids == seq[: len(p) + MAX_TOKENS]
        assert r.accepted == r.steps * steps and r.accepted_per_pos == [r.steps] * steps
        assert r.steps == math.ceil((MAX_TOKENS - 1) / (steps + 1))
    assert pooled_al(paged) == steps + 1


@pytest.mark.parametrize("steps, topk, t", TREES[:2])
def test_contiguous_tree_equals_paged(pair, prompts, steps, topk, t):
    target, head = pair
    paged, _ = tree_run(pair, prompts, steps, topk, t)
    contiguous = run_contiguous(
        target.model, head, target.eos_token_ids, prompts, MAX_TOKENS, steps, topk=topk, num_draft_tokens=t
    )
    assert [key(r) for r in contiguous] == [key(r) for r in paged]


# -- temperature > 0 -------------------------------------------------------------------------------

VOCAB = 6
ROWS = 12_000
CHI2_DF5_ALPHA_1E4 = 25.745  # scipy.stats.chi2.ppf(1 - 1e-4, 5)


def chi2(tokens, p):
    counts = torch.bincount(torch.tensor(tokens), minlength=len(p)).double()
    expected = p.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


def test_sibling_rejection_keeps_the_target_distribution():
    g = torch.Generator().manual_seed(13)
    # root -> children 2 (node 1), 0 (node 2); node 1 -> children 4 (node 3), 1 (node 4)
    tokens, parents = [2, 0, 4, 1], [0, 0, 1, 1]
    p = torch.softmax(torch.randn(5, VOCAB, generator=g) * 1.5, -1)  # the target at each node
    first, second, depth1 = [], [], 0
    for _ in range(ROWS):
        path, bonus = sample_tree_accept(tokens, parents, p, g)
        emitted = [tokens[n - 1] for n in path[1:]] + [bonus]
        first.append(emitted[0])
        if path[1:2] == [1]:  # token 2 accepted: the next token must follow the target at node 1
            second.append(emitted[1])
        depth1 += len(path) > 1
    assert chi2(first, p[0]) < CHI2_DF5_ALPHA_1E4
    assert chi2(second, p[1]) < CHI2_DF5_ALPHA_1E4
    # acceptance at the root: 1 - P(both siblings rejected) = 1 - (1 - p(2)) (1 - p(0) / (1 - p(2)))
    expect = p[0, 2] + p[0, 0]
    assert abs(depth1 / ROWS - float(expect)) < 0.02
    # the test has power: the drafts alone (the top sibling when accepted) do not follow p
    assert chi2([tokens[0]] * ROWS, p[0]) > 10 * CHI2_DF5_ALPHA_1E4


def test_tree_sampling_is_seeded_and_keeps_counts(pair, prompts):
    kw = dict(temperature=0.9, max_tokens=20)
    a, _ = tree_run(pair, prompts[:4], 3, 2, 6, seed=4, **kw)
    b, _ = tree_run(pair, prompts[:4], 3, 2, 6, seed=4, **kw)
    c, _ = tree_run(pair, prompts[:4], 3, 2, 6, seed=5, **kw)
    assert [key(r) for r in a] == [key(r) for r in b]
    assert [r.output_ids for r in a] != [r.output_ids for r in c]
    for r in a:
        assert r.steps + r.accepted >= len(r.output_ids) - 1 and sum(r.accepted_per_pos) == r.accepted


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, needles",
    [
        (dict(topk=4), ["--topk 4", "--num-draft-tokens"]),
        (dict(topk=4, num_draft_tokens=1), ["--num-draft-tokens 1", ">= 2"]),
        (
            dict(topk=2, num_draft_tokens=8, ks=[1, 2, 3]),
            ["--num-draft-tokens 8", "K=1 holds 3", "K=2 holds 7"],
        ),
        (dict(topk=1, num_draft_tokens=4, ks=[1, 3]), ["--topk 1", "K=1"]),
        (dict(topk=0), ["--topk 0"]),
        (
            dict(topk=2, num_draft_tokens=4, ks=[2], temperature=1.0, draft_sampling="sampled"),
            ["--draft-sampling onehot"],
        ),
    ],
)
def test_bad_tree_settings_exit_in_one_line(kw, needles):
    from alcheck.config import RunConfig

    expect_error(lambda: RunConfig(target="t", draft="d", **kw), *needles)


def test_cli_refuses_a_tree_too_large(pair_args, tmp_path):
    from alcheck.cli.main import cli

    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli, ["run", *pair_args, "--ks", "1-3", "--topk", "2", "--num-draft-tokens", "9", "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--num-draft-tokens 9" in lines[0] and "K=2 holds 7" in lines[0], result.output


@pytest.mark.parametrize(
    "kw",
    [
        dict(topk=3),
        dict(topk=2, num_draft_tokens=8, num_spec_tokens=2),
        dict(topk=1, num_draft_tokens=3, num_spec_tokens=3),
        dict(topk=0),
    ],
)
def test_runner_config_rejects_bad_trees(kw):
    with pytest.raises(ValueError):
        RunnerConfig(**kw)


def test_topk_larger_than_the_heads_vocabulary_exits_before_loading(pair_args, pair_dirs, tmp_path):
    import json

    from alcheck.cli.main import cli

    vocab = json.loads((pair_dirs[0] / "config.json").read_text())["vocab_size"]
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "2",
            "--topk",
            str(vocab + 1),
            "--num-draft-tokens",
            "8",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--topk {vocab + 1}" in lines[0] and f"--topk {vocab} or less" in lines[0]
    assert not (tmp_path / "run" / "run.json").exists()


def test_stable_topk_equals_a_full_stable_sort_under_ties():
    """The fast path (torch.topk over k+1, then ordering by value and lower index) must pick and
    order exactly what a full stable sort does, also when many values tie."""
    from alcheck.runner.tree import stable_topk

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(2, 40, (1,), generator=g))
        x = (
            torch.randint(0, 5, (2, 3, n), generator=g).float()
            if trial % 2
            else torch.randn(2, 3, n, generator=g)
        )
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
        got = stable_topk(x, k)
        assert torch.equal(got[0], values[..., :k]) and torch.equal(got[1], indices[..., :k]), (trial, n, k)
