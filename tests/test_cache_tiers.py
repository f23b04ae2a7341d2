"""Host and disk tiers, preemption, sliding-window pools and recurrent-state slots."""

from __future__ import annotations

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cost import WindowGroup
from kvbudget.errors import InvalidCacheOperationError, OutOfBlocksError

A, B, C = RequestId("a"), RequestId("b"), RequestId("c")


def test_gpu_eviction_offloads_and_host_hits_onboard() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4, host_blocks=4))
    cache.admit(A, range(9))  # gpu 0, 1 (full, hashed), 2 (partial)
    cache.free(A)  # 2 -> free list; 1, 0 -> gpu LRU [1, 0]
    cache.admit(B, range(100, 116))  # free 2, 3, then evicts 1 and 0 to host 0 and 1
    assert cache.block_table(B, "target") == (2, 3, 1, 0)
    host = cache.stats().pool("target", "host")
    assert (host.offloaded_blocks, host.cached_blocks, host.free_blocks) == (2, 2, 2)
    cache.free(B)  # gpu LRU [0, 1, 3, 2] (B's tail first)
    # A's 2 full blocks are in the host tier: both hit and are onboarded into gpu 0 and 1
    # (evicting B's blocks 3 and 2 to host 2, 3); the new third block evicts gpu 3, whose
    # offload finds the host full and evicts host LRU block 2 (lost: no disk tier)
    assert cache.admit(C, [*range(8), 77]) == 8
    assert cache.block_table(C, "target") == (0, 1, 3)
    assert cache.block_table(C, "draft") == (0, 1, 3)
    for role in cache.roles:
        h = cache.stats().pool(role, "host")
        assert (h.hit_blocks, h.onboarded_blocks, h.offloaded_blocks) == (2, 2, 5)
        assert (h.evicted_blocks, h.cached_blocks) == (1, 4)
    cache.check_invariants()


def test_disk_tier_catches_host_evictions() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=3, host_blocks=1, disk_blocks=4))
    cache.admit(A, range(8))
    cache.free(A)  # gpu LRU [1, 0]
    # 3 blocks: free 2, then evicts 1 -> host, then 0 -> host (pushing 1 on to disk)
    cache.admit(B, range(100, 112))
    stats = cache.stats()
    assert stats.pool("target", "host").offloaded_blocks == 2
    assert stats.pool("target", "disk").offloaded_blocks == 1
    cache.free(B)
    # block 0 of A (tokens 0..3) sits in the host tier, block 1 on disk: (9-1)//4 = 2 hit
    assert cache.admit(C, [*range(8), 1]) == 8
    stats = cache.stats()
    assert stats.pool("draft", "host").onboarded_blocks == 1
    assert stats.pool("draft", "disk").onboarded_blocks == 1
    cache.check_invariants()


def test_host_tier_needs_every_role() -> None:
    # the draft has no host budget: target blocks cannot go to the host alone
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=2, host_blocks=4, draft_host_blocks=0))
    assert cache.stats().pool("target", "host").total_blocks == 0
    cache.admit(A, range(8))
    cache.free(A)
    cache.admit(B, range(100, 108))
    assert cache.stats().pool("target", "gpu").evicted_blocks == 2
    cache.check_invariants()


def test_swap_out_and_resume() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4, host_blocks=4))
    cache.admit(A, range(6))  # gpu 0 (full), 1 (partial)
    cache.reserve(A, 3)  # 9 tokens -> gpu 2 as well
    assert cache.preempt(A, mode="swap") == tuple(range(6))  # lookahead rolled back
    assert cache.is_swapped(A)
    with pytest.raises(InvalidCacheOperationError, match="swapped out"):
        cache.reserve(A, 1)
    with pytest.raises(InvalidCacheOperationError, match="swapped out"):
        cache.block_table(A, "target")
    stats = cache.stats()
    assert stats.swapped_requests == 1
    assert stats.pool("target", "host").used_blocks == 2
    assert stats.pool("target", "gpu").cached_blocks == 1  # block 0 stays cached on gpu
    cache.admit(B, range(100, 116))  # all 4 gpu blocks
    with pytest.raises(OutOfBlocksError, match="cannot resume"):
        cache.resume(A)
    cache.check_invariants()
    cache.free(B)
    cache.resume(A)
    assert cache.num_tokens(A) == 6
    assert len(cache.block_table(A, "draft")) == 2
    with pytest.raises(InvalidCacheOperationError, match="not swapped out"):
        cache.resume(A)
    cache.reserve(A, 2)
    cache.commit(A, [6, 7])
    cache.check_invariants()


def test_swap_refused_without_host_room() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4, host_blocks=1))
    cache.admit(A, range(6))
    before = cache.stats()
    with pytest.raises(OutOfBlocksError, match="needs 2 free host blocks"):
        cache.preempt(A, mode="swap")
    assert cache.stats() == before
    assert not cache.is_swapped(A)
    cache.check_invariants()


def test_recompute_drops_the_request_and_keeps_its_prefix_cached() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4))
    cache.admit(A, range(6))
    cache.reserve(A, 4)
    cache.commit(A, [6, 7, 8])
    tokens = cache.preempt(A, mode="recompute")
    assert tokens == tuple(range(9))
    assert A not in cache
    assert cache.admit(A, tokens) == 8  # both full blocks hit
    assert cache.stats().recomputed == 1
    with pytest.raises(InvalidCacheOperationError, match="mode must be"):
        cache.preempt(A, mode="drop")  # type: ignore[arg-type]
    cache.check_invariants()


WINDOW = WindowGroup(window_tokens=8, num_layers=1, bytes_per_token=4, blocks_per_seq=4)
# blocks_per_seq = ceil((8 + 3 lookahead - 1) / 4) + 1 = 4


def test_window_pool_keeps_only_the_window() -> None:
    plan = tiny_plan(gpu_blocks=16, target_window_groups=(WINDOW,), max_batch_size=2)
    cache = SpecDecodeCache.from_plan(plan)
    assert cache.prefix_reuse  # window blocks are hashed and cached like kv blocks
    # 20 tokens in blocks of 4: the next token (position 20) sees 13..19 -> blocks 3, 4;
    # the prefill slides past prompt blocks 0..2, which it leaves cached (ids 0, 1, 2)
    cache.admit(A, range(20))
    ((first, blocks),) = cache.window_tables(A, "target")
    assert (first, blocks) == (3, (3, 4))
    assert cache.window_tables(A, "draft") == ()
    cache.reserve(A, 4)  # 24 tokens -> block 5 too
    assert cache.window_tables(A, "target") == ((3, (3, 4, 5)),)
    cache.commit(A, [20, 21, 22, 23])  # 24 tokens: keep 17..23 -> blocks 4, 5
    assert cache.window_tables(A, "target") == ((4, (4, 5)),)
    cache.check_invariants()
    # B shares A's 20 prompt tokens: 4 blocks hit (one token must be computed); the
    # window at 16 tokens needs blocks 2, 3, both cached; B keeps block 3 and takes one
    assert cache.admit(B, range(20)) == 16
    assert cache.window_tables(B, "target") == ((3, (3, 6)),)
    w = cache.stats().pool("target", "gpu", "window8")
    # 8 = 4 per sequence x batch 2; hits: blocks 2 and 3, the window at 16 tokens
    assert (w.total_blocks, w.used_blocks, w.hit_blocks) == (8, 4, 2)
    with pytest.raises(InvalidCacheOperationError, match="recompute"):
        cache.preempt(A, mode="swap")
    cache.free(A)
    cache.check_invariants()


def test_state_slots_cap_the_batch() -> None:
    plan = tiny_plan(gpu_blocks=16, target_state_bytes_per_seq=64, max_batch_size=2)
    cache = SpecDecodeCache.from_plan(plan)
    cache.admit(A, range(4))
    cache.admit(B, range(4))
    assert (cache.state_slot(A, "target"), cache.state_slot(B, "target")) == (0, 1)
    assert cache.state_slot(A, "draft") is None
    before = cache.stats()
    with pytest.raises(OutOfBlocksError, match="no free recurrent-state slot"):
        cache.admit(C, range(4))
    assert cache.stats() == before
    cache.free(A)
    cache.admit(C, range(4))
    assert cache.state_slot(C, "target") == 0
    cache.check_invariants()


def test_a_window_hit_that_does_not_fit_is_admitted_without_it() -> None:
    # one sequence: a pool of 4 window blocks (8-token window, blocks of 4). B shares A's
    # first 4 blocks; its 29 tokens end in a 3-block window (blocks 5..7), and a hit would
    # hold blocks 2, 3 (the window at 16 tokens) meanwhile: 3 new > 4 - 2, so no hit
    plan = tiny_plan(gpu_blocks=16, target_window_groups=(WINDOW,), max_batch_size=1)
    cache = SpecDecodeCache.from_plan(plan)
    cache.admit(A, range(20))
    cache.free(A)
    assert cache.admit(B, [*range(16), *range(100, 113)]) == 0
    cache.check_invariants()
    # the same, but 28 tokens end in a 2-block window (blocks 5, 6): 2 new + 2 held fit
    cache = SpecDecodeCache.from_plan(plan)
    cache.admit(A, range(20))
    cache.free(A)
    assert cache.admit(C, [*range(16), *range(200, 212)]) == 16
    cache.check_invariants()
