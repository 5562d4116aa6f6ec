"""Property tests: a simulated EAGLE runner drives KVCacheManager; every KV write must land in
blocks the writing request owns (EAGLE-NOTES section 4).

Per request: admit (prefill P prompt tokens) -> steps (verify K drafts, accept a) -> finish.
With n committed tokens (num_computed = n - 1) a step allocates
`allocate_slots(num_new=1+K, lookahead=K)`, the target writes positions n-1 .. n-1+K, the draft
re-runs the a+1 committed positions and proposes K-1 more: positions n-1 .. n-1+a+K-1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from alcheck.kv.audit import SlotAuditor
from alcheck.kv.manager import KVCacheManager


@dataclass
class Req:
    request_id: str
    num_computed_tokens: int = 0


@dataclass
class Live:
    req: Req
    num_committed: int  # n
    k: int


class SimRunner:
    """Drives the manager like the speculative runner; `lookahead=False` is the pre-fix bug."""

    def __init__(self, manager: KVCacheManager, lookahead: bool = True) -> None:
        self.m = manager
        self.bs = manager.block_size
        self.lookahead = lookahead
        self.audit = SlotAuditor(manager.block_size)
        self.live: dict[str, Live] = {}
        self.num_admitted = 0
        self.num_exhausted = 0
        self.num_steps = 0
        self.cross_request_writes = 0  # slots in a block another live request owns

    # -- runner operations ---------------------------------------------------------------

    def admit(self, prompt_len: int, k: int) -> None:
        req = Req(f"r{self.num_admitted}")
        self.num_admitted += 1
        if self._allocate(req, prompt_len, k) is None:
            return
        self.live[req.request_id] = Live(req, num_committed=prompt_len + 1, k=k)
        # prefill: target over the prompt; draft over the (shifted) prompt, then K-1 more
        self._write(req.request_id, "target", range(0, prompt_len))
        self._write(req.request_id, "draft", range(0, prompt_len + k - 1))
        req.num_computed_tokens = prompt_len
        self.check_invariants()

    def step(self, request_id: str, num_accepted: int) -> None:
        live = self.live[request_id]
        n, k, req = live.num_committed, live.k, live.req
        assert req.num_computed_tokens == n - 1
        assert 0 <= num_accepted <= k
        tables_before = {rid: self.m.block_ids(rid) for rid in self.live}
        if self._allocate(req, 1 + k, k) is None:
            # preempt: give the blocks back; the request would be re-admitted from scratch
            self.m.free(req)
            del self.live[request_id]
            self.check_invariants()
            return
        self.num_steps += 1
        self._write(request_id, "target", range(n - 1, n + k))
        self._write(request_id, "draft", range(n - 1, n - 1 + num_accepted + k))
        req.num_computed_tokens = n + num_accepted
        live.num_committed = n + num_accepted + 1
        for rid, before in tables_before.items():  # blocks only ever appended
            assert self.m.block_ids(rid)[: len(before)] == before
        self.check_invariants()

    def finish(self, request_id: str) -> None:
        self.m.free(self.live.pop(request_id).req)
        self.check_invariants()

    # -- helpers -------------------------------------------------------------------------

    def _allocate(self, req: Req, num_new: int, k: int) -> list[int] | None:
        before = self.snapshot()
        got = self.m.allocate_slots(req, num_new, k if self.lookahead else 0)
        if got is None:
            self.num_exhausted += 1
            assert self.snapshot() == before, "a failed allocation left partial state"
        return got

    def _write(self, request_id: str, layer: str, positions: range) -> None:
        if not positions:
            return
        # the runner's block-table row: zero-initialised, so unset entries read as block 0
        owned = self.m.block_ids(request_id)
        width = max(len(owned), positions[-1] // self.bs + 1)
        row = self.m.block_table(request_id, width)
        slots = [row[p // self.bs] * self.bs + p % self.bs for p in positions]
        self.audit.check(request_id, slots, owned, layer)
        for slot in slots:
            owner = self.m.owner(slot // self.bs)
            if owner is not None and owner != request_id:
                self.cross_request_writes += 1

    def snapshot(self) -> tuple:
        tables = {rid: self.m.block_ids(rid) for rid in self.m.request_ids()}
        return self.m.block_pool.free_block_ids(), tables, self.m.num_free_blocks

    def check_invariants(self) -> None:
        m = self.m
        free = m.block_pool.free_block_ids()
        assert sorted(m.request_ids()) == sorted(self.live)
        owned = [b for rid in self.live for b in m.block_ids(rid)]
        assert len(owned) == len(set(owned)), "a block is owned by two live requests"
        assert not set(owned) & set(free), "an owned block is on the free queue"
        assert len(free) + len(owned) == m.num_usable_blocks  # conservation
        usable = set(range(m.num_blocks)) - {m.null_block_id}
        assert set(free) | set(owned) == usable
        for rid in self.live:
            assert all(m.owner(b) == rid for b in m.block_ids(rid))
        if m.null_block_id is not None:
            assert m.owner(m.null_block_id) is None
        if self.lookahead:
            assert self.audit.ok, self.audit.summary()


def run_ops(runner: SimRunner, ops: list[tuple]) -> None:
    for op in ops:
        if op[0] == "admit":
            runner.admit(op[1], op[2])
        elif runner.live:
            rids = list(runner.live)
            rid = rids[op[1] % len(rids)]
            if op[0] == "step":
                runner.step(rid, op[2] % (runner.live[rid].k + 1))
            else:
                runner.finish(rid)


def _decode_op(raw: tuple[int, int, int, int]) -> tuple:
    kind, a, b, c = raw  # kind 0..7: step, 8: admit, 9: finish
    if kind == 8:
        return ("admit", a, b)  # prompt length 1..12, K 1..4
    if kind == 9:
        return ("finish", c)
    return ("step", c, a)  # which live request, accepted (mod K+1)


raw_op = st.tuples(st.integers(0, 9), st.integers(1, 12), st.integers(1, 4), st.integers(0, 7))
ops_strategy = st.lists(raw_op.map(_decode_op), min_size=10, max_size=80).map(
    lambda ops: [("admit", 8, 3), *ops]  # start with a live request
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block_size=st.sampled_from([1, 2, 4, 8]),
    num_blocks=st.integers(2, 32),
    reserve_null_block=st.booleans(),
    num_preallocate_tokens=st.sampled_from([0, 0, 4, 16]),
    ops=ops_strategy,
)
def test_runner_writes_stay_in_owned_blocks(
    block_size, num_blocks, reserve_null_block, num_preallocate_tokens, ops
):
    manager = KVCacheManager(
        num_blocks,
        block_size,
        reserve_null_block=reserve_null_block,
        num_preallocate_tokens=num_preallocate_tokens,
    )
    runner = SimRunner(manager)
    run_ops(runner, ops)
    event(f"exhausted: {runner.num_exhausted > 0}")
    event(f"steps > 5: {runner.num_steps > 5}")
    assert runner.audit.violations == 0
    assert runner.cross_request_writes == 0
    for rid in list(runner.live):
        runner.finish(rid)
    assert manager.num_free_blocks == manager.num_usable_blocks


def random_ops(rng: random.Random, count: int) -> list[tuple]:
    ops = []
    for _ in range(count):
        kind = rng.choices(["admit", "step", "finish"], weights=[2, 8, 1])[0]
        if kind == "admit":
            ops.append(("admit", rng.randint(1, 24), rng.randint(1, 4)))
        elif kind == "step":
            ops.append(("step", rng.randint(0, 7), rng.randint(0, 4)))
        else:
            ops.append(("finish", rng.randint(0, 7)))
    return ops


def test_long_seeded_runs_exhaust_often_and_stay_clean():
    # longer than hypothesis' examples: many exhaustions and preemptions per run
    total_exhausted = total_steps = 0
    for seed in range(6):
        rng = random.Random(seed)
        manager = KVCacheManager(10, 4, reserve_null_block=seed % 2 == 0)
        runner = SimRunner(manager)
        run_ops(runner, random_ops(rng, 400))
        assert runner.audit.ok, runner.audit.summary()
        total_exhausted += runner.num_exhausted
        total_steps += runner.num_steps
    assert total_exhausted >= 50
    assert total_steps >= 500


# -- the pre-fix bug: no lookahead slots ------------------------------------------------------


def full_acceptance_step(lookahead: bool) -> SimRunner:
    # block 4, K=2, prompt 5: prefill holds blocks [1, 2] (positions 0..7); n=6,
    # num_computed=5. Without lookahead the step needs 5 + 3 = 8 tokens (no new block), yet
    # with a=2 accepted the draft writes positions 5..8.
    manager = KVCacheManager(12, 4)
    runner = SimRunner(manager, lookahead=lookahead)
    runner.admit(prompt_len=5, k=2)
    assert manager.block_ids("r0") == [1, 2]
    runner.step("r0", num_accepted=2)
    return runner


def test_lookahead_zero_full_acceptance_writes_past_allocated_blocks():
    buggy = full_acceptance_step(lookahead=False)
    assert buggy.m.block_ids("r0") == [1, 2]
    assert buggy.audit.violations == 1
    assert buggy.audit.by_layer == {"draft": 1}
    # position 8 read the unset block-table entry 2 -> block 0 (the null block), slot 0
    assert [(v.slot, v.block) for v in buggy.audit.examples] == [(0, 0)]

    fixed = full_acceptance_step(lookahead=True)
    assert fixed.m.block_ids("r0") == [1, 2, 3]  # 5 + 3 + 2 = 10 tokens
    assert fixed.audit.ok


def test_lookahead_zero_corrupts_the_owner_of_block_0():
    # Without a reserved null block, block 0 is a real block: request A gets it, and request
    # B's draft (prompt 4, K=3, positions 0..5) writes positions 4, 5 through the unset entry.
    for lookahead in (False, True):
        manager = KVCacheManager(8, 4, reserve_null_block=False)
        runner = SimRunner(manager, lookahead=lookahead)
        runner.admit(prompt_len=4, k=1)  # A: gets block 0 first
        runner.admit(prompt_len=4, k=3)  # B
        if lookahead:
            assert manager.block_ids("r0") == [0, 1]  # 4 + 1 tokens
            assert manager.block_ids("r1") == [2, 3]  # 4 + 3 tokens
            assert runner.audit.ok and runner.cross_request_writes == 0
        else:
            assert manager.block_ids("r0") == [0]
            assert manager.block_ids("r1") == [1]
            assert runner.audit.violations == 2
            assert [(v.request_id, v.slot, v.block) for v in runner.audit.examples] == [
                ("r1", 0, 0),
                ("r1", 1, 0),
            ]
            assert manager.owner(0) == "r0"
            assert runner.cross_request_writes == 2


def test_lookahead_zero_violates_in_random_runs():
    rng = random.Random(0)
    manager = KVCacheManager(40, 4, reserve_null_block=False)
    runner = SimRunner(manager, lookahead=False)
    run_ops(runner, random_ops(rng, 300))
    assert runner.audit.violations > 0
    assert runner.cross_request_writes > 0
    assert runner.audit.by_layer.keys() == {"draft"}  # the target never runs past its slots
