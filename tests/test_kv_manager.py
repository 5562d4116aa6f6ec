"""Exact-expectation tests for the KV bookkeeping: BlockPool, KVCacheManager, SlotAuditor."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from alcheck.kv.audit import SlotAuditor, SlotViolation
from alcheck.kv.block_pool import BlockPool
from alcheck.kv.manager import KVCacheManager, cdiv


@dataclass
class Req:
    request_id: str
    num_computed_tokens: int = 0


def snapshot(manager: KVCacheManager) -> tuple:
    tables = {rid: manager.block_ids(rid) for rid in manager.request_ids()}
    return manager.block_pool.free_block_ids(), tables


# -- BlockPool -----------------------------------------------------------------------------


def test_pool_hands_out_fifo_and_skips_null_block():
    pool = BlockPool(5)
    assert pool.num_free_blocks == 4
    assert pool.free_block_ids() == [1, 2, 3, 4]
    assert pool.allocate(2) == [1, 2]
    assert pool.allocate(0) == []
    assert pool.allocate(3) is None  # only 2 free
    assert pool.free_block_ids() == [3, 4]
    pool.free([2, 1])
    assert pool.free_block_ids() == [3, 4, 2, 1]
    assert pool.allocate(4) == [3, 4, 2, 1]
    assert pool.num_free_blocks == 0
    assert pool.allocate(1) is None


def test_pool_without_null_block_hands_out_block_0():
    pool = BlockPool(3, reserve_null_block=False)
    assert pool.null_block_id is None
    assert pool.num_usable_blocks == 3
    assert pool.allocate(3) == [0, 1, 2]
    pool.free([0])
    assert pool.free_block_ids() == [0]


def test_pool_free_errors_change_nothing():
    pool = BlockPool(5)
    pool.allocate(3)  # 1, 2, 3
    with pytest.raises(ValueError, match="null block"):
        pool.free([0])
    with pytest.raises(ValueError, match="double free of block 4"):
        pool.free([1, 4])  # 4 was never allocated
    with pytest.raises(ValueError, match="double free of block 2"):
        pool.free([2, 2])
    with pytest.raises(ValueError, match="out of range"):
        pool.free([5])
    assert pool.free_block_ids() == [4]  # all-or-nothing: none of the above freed anything
    pool.free([1])
    with pytest.raises(ValueError, match="double free of block 1"):
        pool.free([1])
    assert pool.free_block_ids() == [4, 1]


@pytest.mark.parametrize(
    "args, match",
    [((1,), "num_blocks must be >= 2"), ((0, False), "num_blocks must be >= 1"), ((2.0,), "int")],
)
def test_pool_rejects_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        BlockPool(*args)


def test_pool_rejects_negative_allocation():
    with pytest.raises(ValueError, match=">= 0"):
        BlockPool(4).allocate(-1)


# -- KVCacheManager ------------------------------------------------------------------------


def test_manager_exact_blocks_growth_and_free_order():
    m = KVCacheManager(12, 4)  # usable blocks 1..11
    assert m.num_free_blocks == 11
    a = Req("a")
    assert m.allocate_slots(a, 10) == [1, 2, 3]
    assert m.block_ids("a") == [1, 2, 3]
    assert [m.owner(b) for b in (0, 1, 3, 4)] == [None, "a", "a", None]
    a.num_computed_tokens = 10
    assert m.allocate_slots(a, 2) == []  # 12 tokens fit in 3 blocks
    assert m.allocate_slots(a, 3) == [4]  # 13 tokens
    b = Req("b")
    assert m.allocate_slots(b, 16) == [5, 6, 7, 8]
    assert m.num_free_blocks == 3
    assert m.usage == pytest.approx(8 / 11)

    m.free(a)  # last-allocated first: the tail blocks enter the queue first
    assert m.block_pool.free_block_ids() == [9, 10, 11, 4, 3, 2, 1]
    assert m.block_ids("a") == []
    assert m.owner(1) is None
    assert m.request_ids() == ["b"]
    assert m.allocate_slots(Req("c"), 17) == [9, 10, 11, 4, 3]
    m.free(Req("never-admitted"))  # no-op
    assert m.block_pool.free_block_ids() == [2, 1]


def test_manager_exhaustion_returns_none_and_changes_nothing():
    m = KVCacheManager(6, 4)  # 5 usable
    a, b = Req("a"), Req("b")
    assert m.allocate_slots(a, 12) == [1, 2, 3]
    before = snapshot(m)
    assert m.allocate_slots(b, 9) is None  # needs 3, 2 free
    assert snapshot(m) == before
    assert m.block_ids("b") == [] and "b" not in m.request_ids()
    a.num_computed_tokens = 12
    assert m.allocate_slots(a, 1, 8) is None  # 21 tokens: 6 blocks, holds 3, 2 free
    assert snapshot(m) == before
    assert m.allocate_slots(a, 1, 7) == [4, 5]  # exactly fits
    assert m.num_free_blocks == 0
    assert m.usage == 1.0


def test_manager_returned_list_is_a_copy():
    m = KVCacheManager(6, 4)
    m.allocate_slots(Req("a"), 4)
    m.block_ids("a").append(99)
    assert m.block_ids("a") == [1]


def test_null_block_never_handed_out():
    m = KVCacheManager(12, 16)
    got = m.allocate_slots(Req("a"), 11 * 16)
    assert got == list(range(1, 12))
    assert m.allocate_slots(Req("b"), 1) is None
    assert m.owner(0) is None


def test_without_null_block_block_0_is_owned():
    m = KVCacheManager(12, 16, reserve_null_block=False)
    assert m.num_free_blocks == 12
    assert m.allocate_slots(Req("a"), 12 * 16) == list(range(12))
    assert m.owner(0) == "a"


def test_rollback_keeps_blocks():
    m = KVCacheManager(12, 4)
    r = Req("r", 0)
    assert m.allocate_slots(r, 5, 3) == [1, 2]  # prefill P=5, K=3: 8 tokens
    r.num_computed_tokens = 5  # n = 6 committed
    assert m.allocate_slots(r, 1 + 3, 3) == [3]  # 5 + 4 + 3 = 12 tokens
    # target wrote positions 5..8; a = 0 accepted: the KV at 6..8 is stale, no call needed
    r.num_computed_tokens = 6
    assert m.block_ids("r") == [1, 2, 3]
    assert m.allocate_slots(r, 1 + 3, 3) == [4]  # 13 tokens; stale slots get overwritten
    r.num_computed_tokens = 2  # even a deep rollback never shrinks
    assert m.allocate_slots(r, 1) == []
    assert m.block_ids("r") == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_new_tokens": -1}, "num_new_tokens"),
        ({"num_new_tokens": 1, "num_lookahead_tokens": -2}, "num_lookahead_tokens"),
        ({"num_new_tokens": 1.5}, "num_new_tokens"),
    ],
)
def test_allocate_rejects_bad_counts(kwargs, match):
    m = KVCacheManager(4, 4)
    with pytest.raises(ValueError, match=match):
        m.allocate_slots(Req("a"), **kwargs)
    with pytest.raises(ValueError, match="num_computed_tokens"):
        m.allocate_slots(Req("a", -1), 1)
    assert m.request_ids() == []


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((4, 0), {}, "block_size"),
        ((4, 4), {"num_preallocate_tokens": -1}, "num_preallocate_tokens"),
        ((1, 4), {}, "num_blocks must be >= 2"),
    ],
)
def test_manager_rejects_bad_config(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        KVCacheManager(*args, **kwargs)


def test_num_blocks_needed():
    m = KVCacheManager(4, 16)
    assert [m.num_blocks_needed(t) for t in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]
    assert [cdiv(a, 4) for a in (0, 3, 4, 5)] == [0, 1, 1, 2]
    with pytest.raises(ValueError):
        m.num_blocks_needed(-1)


def test_block_table_and_slot_mapping():
    m = KVCacheManager(12, 4)
    m.allocate_slots(Req("x"), 4)  # block 1 goes to x
    m.allocate_slots(Req("r"), 6)  # blocks 2, 3
    assert m.block_table("r") == [2, 3]
    assert m.block_table("r", 4) == [2, 3, 0, 0]  # unset entries read as block 0
    with pytest.raises(ValueError, match="width 1"):
        m.block_table("r", 1)
    assert m.slot_mapping("r", [0, 3, 4, 7, -1]) == [8, 11, 12, 15, -1]
    with pytest.raises(ValueError, match="position 8 .* holds 2 blocks"):
        m.slot_mapping("r", [8])


# -- vLLM test_allocate_with_lookahead (block size 4, 3 new tokens) ---------------------------
# v0.8.4 (PR #16370): num_preallocate_blocks = cdiv(4, 4) = 1, minus lookahead // block_size.


@pytest.mark.parametrize(
    "num_preallocate_tokens, lookahead, expected",
    [
        (0, 2, 2),  # ceil((3 + 2) / 4) = 2
        (0, 4, 2),  # ceil((3 + 4) / 4) = 2
        (4, 2, 3),  # 2 + max(0, 1 - 2 // 4) = 3
        (4, 4, 2),  # 2 + max(0, 1 - 4 // 4) = 2: more lookahead, fewer blocks
    ],
)
def test_allocate_with_lookahead_vllm_cases(num_preallocate_tokens, lookahead, expected):
    m = KVCacheManager(10, 4, num_preallocate_tokens=num_preallocate_tokens)
    blocks = m.allocate_slots(Req("0"), 3, lookahead)
    assert len(blocks) == expected


def test_preallocation_sweep_is_not_monotonic_in_lookahead():
    # What v0.8.4's arithmetic gives for lookahead 0..8 (3 new tokens, block 4, 4 prealloc
    # tokens). The PR thread said 1, 2, 3 -> 3 and 5+ -> ceil((L + 4) / 4); the merged code
    # gives 2 for L=1 (4 tokens fit one block) and 2 for L=5 (8 tokens fit two).
    got = []
    for lookahead in range(9):
        m = KVCacheManager(20, 4, num_preallocate_tokens=4)
        got.append(len(m.allocate_slots(Req("0"), 3, lookahead)))
    assert got == [2, 2, 3, 3, 2, 2, 3, 3, 3]


def test_preallocation_only_when_blocks_are_needed_and_capped_by_free():
    m = KVCacheManager(8, 4, num_preallocate_tokens=8)  # 2 extra blocks, 7 usable
    r = Req("r")
    assert m.allocate_slots(r, 3) == [1, 2, 3]  # 1 needed + 2 preallocated
    r.num_computed_tokens = 3
    assert m.allocate_slots(r, 9) == []  # 12 tokens: the preallocated blocks cover it
    r.num_computed_tokens = 12
    assert m.allocate_slots(r, 1) == [4, 5, 6]
    # 1 needed + 2 extra, only 1 free: takes what is free instead of failing
    r.num_computed_tokens = 24
    assert m.allocate_slots(r, 1) == [7]
    assert m.num_free_blocks == 0
    r.num_computed_tokens = 28
    assert m.allocate_slots(r, 1) is None  # the needed block itself is missing


def test_preallocation_off_by_default():
    m = KVCacheManager(10, 4)
    assert m.allocate_slots(Req("0"), 3) == [1]


# -- SlotAuditor ---------------------------------------------------------------------------


def test_auditor_counts_exactly_and_skips_padding():
    audit = SlotAuditor(block_size=4, max_examples=2)
    assert audit.check("a", [4, 5, 7, -1, 8], owned_blocks=[1, 2], layer="target") == 0
    assert audit.ok
    assert audit.check("a", [-1, 0, 3, 12, 9, -1], owned_blocks=[2], layer="draft") == 3
    assert audit.check("b", [1], owned_blocks=[], layer="target") == 1
    assert audit.violations == 4
    assert audit.by_layer == {"draft": 3, "target": 1}
    assert audit.examples == [SlotViolation("a", 0, 0, "draft"), SlotViolation("a", 3, 0, "draft")]
    assert audit.num_checked == 4 + 4 + 1  # padding not counted
    assert "4 KV writes outside" in audit.summary() and "draft: 3" in audit.summary()
    with pytest.raises(ValueError, match="-2"):
        audit.check("a", [-2], [1], "target")
    audit.reset()
    assert audit.ok and audit.by_layer == {} and audit.examples == []
    assert audit.summary() == "no slot violations in 0 KV writes"
