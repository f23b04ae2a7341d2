"""``check_invariants`` catches each kind of corruption it promises to catch.

Each test builds a small healthy cache, breaks one piece of bookkeeping on purpose
(reaching into the internals, which only this file does) and expects AssertionError
naming the broken invariant.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import BlockId, BlockPool, RequestId, SpecDecodeCache
from kvbudget.cache.request import SeqBlocks
from kvbudget.cost import WindowGroup

A, B = RequestId("a"), RequestId("b")


def healthy() -> SpecDecodeCache:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8, host_blocks=4))
    cache.admit(A, range(9))  # gpu 0, 1 (full), 2
    cache.admit(B, range(100, 112))  # gpu 3, 4, 5
    cache.free(B)  # 3, 4, 5 cached
    cache.reserve(A, 3)  # 12 tokens: still 3 blocks
    cache.check_invariants()
    return cache


def kv_gpu(cache: SpecDecodeCache) -> BlockPool:
    return cache._kv.gpu  # the GPU kv pool every role shares


def table(cache: SpecDecodeCache, rid: RequestId) -> list[BlockId]:
    return cache._requests[rid].table  # one kv block table for every role


def seq(cache: SpecDecodeCache, rid: RequestId, role: int = 0) -> SeqBlocks:
    return cache._requests[rid].seqs[role]


def lose_a_free_block(c: SpecDecodeCache) -> None:
    kv_gpu(c).free.pop()


def free_a_used_block(c: SpecDecodeCache) -> None:
    kv_gpu(c).free.append(BlockId(0))


def negative_refcount(c: SpecDecodeCache) -> None:
    pool = kv_gpu(c)
    block = pool.free.pop()
    pool.refcount[block] = -1


def own_a_block_twice(c: SpecDecodeCache) -> None:
    pool = kv_gpu(c)
    t = table(c, A)
    t[2] = t[1]
    pool.refcount[t[1]] += 1
    pool.refcount[2] -= 1
    pool.num_used -= 1
    pool.free.append(BlockId(2))


def refcount_without_owner(c: SpecDecodeCache) -> None:
    kv_gpu(c).refcount[0] += 1


def hold_fewer_blocks_than_tokens(c: SpecDecodeCache) -> None:
    pool = kv_gpu(c)
    block = table(c, A).pop()
    pool.refcount[block] = 0
    pool.num_used -= 1
    pool.free.append(block)


def hold_other_tokens(c: SpecDecodeCache) -> None:
    # A's block 1 swaps places with cached block 3 (B's first block)
    pool = kv_gpu(c)
    t = table(c, A)
    del pool.cached[BlockId(3)]
    pool.cached[t[1]] = None
    pool.refcount[t[1]], pool.refcount[3] = 0, 1
    t[1] = BlockId(3)


def exceed_the_plan(c: SpecDecodeCache) -> None:
    kv_gpu(c).plan_blocks = 7


def forget_the_plan(c: SpecDecodeCache) -> None:
    kv_gpu(c).plan_blocks = 9


def reserve_past_the_limit(c: SpecDecodeCache) -> None:
    c._requests[A].num_reserved = c.max_reserve_tokens + 1


def hash_index_points_elsewhere(c: SpecDecodeCache) -> None:
    pool = kv_gpu(c)
    h = pool.block_hash[3]
    assert h is not None
    pool.by_hash[h] = BlockId(4)


CORRUPTIONS: dict[str, Callable[[SpecDecodeCache], None]] = {
    "cached 3 != total 8": lose_a_free_block,
    "owned blocks on free": free_a_used_block,
    "negative refcount": negative_refcount,
    "lists a kv block twice": own_a_block_twice,
    "refcount 2, owners 1": refcount_without_owner,
    "holds 2 kv blocks, want 3": hold_fewer_blocks_than_tokens,
    "kv block 1 holds a foreign hash": hold_other_tokens,
    "uses 8 blocks, plan gives 7": exceed_the_plan,
    "plan_blocks 9 is not the plan's": forget_the_plan,
    "reserved 5 out of range": reserve_past_the_limit,
    "hash index points at block": hash_index_points_elsewhere,
}


@pytest.mark.parametrize("message", list(CORRUPTIONS))
def test_each_corruption_is_caught(message: str) -> None:
    cache = healthy()
    CORRUPTIONS[message](cache)
    with pytest.raises(AssertionError, match=re.escape(message)):
        cache.check_invariants()


def test_window_table_that_outlives_its_window_is_caught() -> None:
    window = WindowGroup(window_tokens=4, num_layers=1, bytes_per_token=2, blocks_per_seq=3)
    cache = SpecDecodeCache.from_plan(
        tiny_plan(gpu_blocks=8, target_window_groups=(window,), max_batch_size=2)
    )
    cache.admit(A, range(10))  # next token 10 sees 7..10 -> blocks 1, 2
    cache.check_invariants()
    s = seq(cache, A)
    s.window_first[0] = 0  # claims blocks 0..1 instead
    with pytest.raises(AssertionError, match="window 4 holds wrong blocks"):
        cache.check_invariants()


def test_request_without_its_state_slot_is_caught() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8, target_state_bytes_per_seq=8))
    cache.admit(A, range(5))
    state = cache._managers[0].state
    assert state is not None
    slot = seq(cache, A).slot
    assert slot is not None
    state.release(slot)
    seq(cache, A).slot = None
    with pytest.raises(AssertionError, match="no recurrent-state slot"):
        cache.check_invariants()


def test_storage_larger_than_the_plan_is_caught() -> None:
    torch = pytest.importorskip("torch")
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4, host_blocks=2), device="cpu")
    cache.check_invariants()
    storage = cache.storage
    assert storage is not None
    role = storage.roles[1]
    role.kv[1] = torch.zeros((3, role.block_bytes), dtype=torch.uint8)
    with pytest.raises(AssertionError, match="draft: host storage exceeds"):
        cache.check_invariants()
