"""Oracle 5 (issue 2) and the KV-lookahead ablation (issue 6), on the copy-layer pair.

With kv_lookahead off the runner allocates only the 1+K verified tokens per step and block 0
is an ordinary block (the pre-fix state of vLLM, PR #16370): the draft's lookahead positions run
past the request's blocks, read unset block-table entries as block 0 and overwrite the draft
KV of whichever request owns block 0. A spy proposer wraps the real EAGLE proposer, records
the slots each request's draft writes, and snapshots both KV tensors around every propose call,
so the test sees another request's draft KV change under its feet. With lookahead on, every
draft write stays in the writer's own blocks. Either way only draft KV is touched, so the
output equals target-only greedy; the corruption costs acceptance only.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conftest import pooled_al, run_spec

from alcheck.runner.proposers.eagle import EagleProposer


@dataclass
class ProposeCall:
    owners: dict[int, int]  # block -> owning request at call time
    writes: list[tuple[int, list[int]]]  # (request, draft slots it wrote)
    draft_changed: set[int]  # slots whose draft KV changed during the call
    target_changed: bool


class _RecordingRunner:
    """Stands in for the runner inside propose(): records every draft slot mapping."""

    def __init__(self, runner, writes):
        self._runner, self._writes = runner, writes

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def attn_batch(self, reqs, starts, lens, layer):
        batch = self._runner.attn_batch(reqs, starts, lens, layer)
        flat, at = batch.slot_mapping.tolist(), 0
        for r, n in zip(reqs, lens):
            self._writes.append((r.request_id, [s for s in flat[at : at + n] if s >= 0]))
            at += n
        return batch


class SpyProposer:
    aux_layers = ()  # the runner feeds it the target's final hidden states

    def __init__(self, head):
        self.inner = EagleProposer(head)
        self.calls: list[ProposeCall] = []

    @property
    def attention_layers(self):
        return self.inner.attention_layers

    def propose(self, runner, reqs, inputs, features, starts, k):
        kv, bs = runner.kv, runner.cfg.block_size
        owners = {b: kv.owner(b) for b in range(kv.num_blocks) if kv.owner(b) is not None}
        draft_before, target_before = runner.draft_kv_cache.clone(), runner.kv_cache.clone()
        writes: list[tuple[int, list[int]]] = []
        out = self.inner.propose(_RecordingRunner(runner, writes), reqs, inputs, features, starts, k)
        # draft cache [2, layers, blocks, block_size, kv_heads, dim] -> changed per slot
        diff = (runner.draft_kv_cache != draft_before).flatten(4).any(-1).any(1).any(0).flatten()
        self.calls.append(
            ProposeCall(
                owners,
                writes,
                set(diff.nonzero().flatten().tolist()),
                not torch.equal(runner.kv_cache, target_before),
            )
        )
        assert diff.numel() == kv.num_blocks * bs
        return out


def foreign_writes(call: ProposeCall, block_size: int):
    """(writer, victim, slot) for draft writes into a block another live request owns."""
    own: dict[int, set[int]] = {}
    for rid, slots in call.writes:
        own.setdefault(rid, set()).update(slots)
    hits = []
    for rid, slots in call.writes:
        for s in slots:
            victim = call.owners.get(s // block_size)
            if victim is not None and victim != rid:
                hits.append((rid, victim, s))
    return hits, own


def _run(pair, prompts, k, lookahead):
    target, head = pair
    spy = SpyProposer(head)
    results, runner = run_spec(
        target.model,
        head,
        target.eos_token_ids,
        prompts,
        k=k,
        proposer=spy,
        kv_lookahead=lookahead,
        audit_slots=True,
    )
    return results, runner, spy


@pytest.fixture(scope="module")
def runs(pair, prompts):
    return {(k, la): _run(pair, prompts, k, la) for k in (4, 5) for la in (False, True)}


@pytest.mark.parametrize("k", [4, 5])
def test_without_lookahead_draft_overwrites_another_request(runs, greedy, k):
    results, runner, spy = runs[(k, False)]
    bs = runner.cfg.block_size
    # the auditor sees draft writes outside the writer's blocks, and only draft writes
    assert runner.auditor.violations > 0
    assert set(runner.auditor.by_layer) == {"draft"}
    assert runner.kv.null_block_id is None  # block 0 is a real block, as before the fix
    victims = []
    for call in spy.calls:
        assert not call.target_changed  # proposing never touches target KV
        hits, own = foreign_writes(call, bs)
        for writer, victim, slot in hits:
            # the victim did not write that slot itself in this call, yet its draft KV changed
            if slot not in own.get(victim, set()) and slot in call.draft_changed:
                victims.append((writer, victim, slot))
    assert victims, "expected another request's draft KV to be overwritten"
    assert {slot // bs for _, _, slot in victims} == {0}  # through unset table entries: block 0
    assert len({w for w, _, _ in victims}) > 1  # several requests corrupt it
    # lossless anyway: only the draft's KV is hit
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]


@pytest.mark.parametrize("k", [4, 5])
def test_with_lookahead_every_draft_write_is_owned(runs, greedy, k):
    results, runner, spy = runs[(k, True)]
    bs = runner.cfg.block_size
    assert runner.auditor.violations == 0 and runner.auditor.num_checked > 0
    assert runner.kv.null_block_id == 0
    for call in spy.calls:
        assert not call.target_changed
        for rid, slots in call.writes:
            owned = {b for b, owner in call.owners.items() if owner == rid}
            assert {s // bs for s in slots} <= owned
        # nothing lands in the null block or anywhere but the written slots
        assert all(s // bs != 0 for s in call.draft_changed)
        assert call.draft_changed <= {s for _, slots in call.writes for s in slots}
    assert [r.output_ids for r in results] == [g.output_ids for g in greedy]


def test_corruption_costs_acceptance(runs):
    for k in (4, 5):
        off, on = pooled_al(runs[(k, False)][0]), pooled_al(runs[(k, True)][0])
        assert off < on, (k, off, on)
    # same verified work either way: the drafts differ, the committed tokens do not
    assert pooled_al(runs[(5, True)][0]) > 4.0
