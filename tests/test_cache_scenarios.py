"""Exact tests of the cache's harder interleavings: shared prefixes under eviction, hits
that span tiers, rollback edges, preemption edges, salts, windows and state slots.

Plans come from ``tiny_plan``: tokens_per_block 4, a target and a draft with the same
block counts, so both roles always show the same block ids. Free lists hand out the
lowest id first; a released request's blocks enter the LRU tail first.
"""

from __future__ import annotations

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cost import WindowGroup
from kvbudget.errors import InvalidCacheOperationError, OutOfBlocksError, UnknownRequestError

A, B, C, D, E = (RequestId(x) for x in "abcde")


def make(**kwargs: object) -> SpecDecodeCache:
    return SpecDecodeCache.from_plan(tiny_plan(**kwargs))  # type: ignore[arg-type]


def tables(cache: SpecDecodeCache, rid: RequestId) -> tuple[tuple[int, ...], ...]:
    return tuple(cache.block_table(rid, role) for role in cache.roles)


def snapshot(cache: SpecDecodeCache, *rids: RequestId) -> object:
    """Everything a refused operation must leave alone (for the requests named)."""
    rows = []
    for rid in rids:
        rows.append(
            (
                rid,
                cache.num_tokens(rid),
                cache.num_reserved(rid),
                cache.is_swapped(rid),
                None if cache.is_swapped(rid) else tables(cache, rid),
            )
        )
    return cache.stats(), rows


# ---------------------------------------------------------------------- prefix hits
def test_hit_spans_gpu_and_host_at_once() -> None:
    cache = make(gpu_blocks=4, host_blocks=4)
    cache.admit(A, range(13))  # gpu 0, 1, 2 full (hashed), 3 partial
    cache.free(A)  # 3 -> free; LRU [2, 1, 0]
    cache.admit(B, range(100, 108))  # free 3, then evicts A's block 2 -> host 0
    assert cache.block_table(B, "target") == (3, 2)
    cache.free(B)  # B: 2 (hashed) -> LRU [1, 0, 2], 3 (hashed) -> LRU [1, 0, 2, 3]
    # (13 - 1) // 4 = 3 may hit: A's blocks 0, 1 on the gpu, block 2 in host block 0.
    # gpu hits first (0, 1 pinned); the onboard takes the LRU gpu block 2 (B's head,
    # offloaded to host 1); the 4th block takes gpu 3 (B's tail, offloaded to host 2)
    assert cache.admit(C, [*range(12), 50]) == 12
    assert tables(cache, C) == ((0, 1, 2, 3), (0, 1, 2, 3))
    for role in cache.roles:
        gpu, host = cache.stats().pool(role), cache.stats().pool(role, "host")
        assert (gpu.hit_blocks, host.hit_blocks, host.onboarded_blocks) == (2, 1, 1)
        assert (host.offloaded_blocks, host.cached_blocks) == (3, 3)
    cache.check_invariants()


def test_host_hit_is_not_lost_to_an_offload_of_the_same_admit() -> None:
    cache = make(gpu_blocks=2, host_blocks=1)
    cache.admit(A, range(5))  # gpu 0 (full), 1 (partial)
    cache.free(A)  # 1 -> free, 0 -> LRU
    cache.admit(B, range(100, 108))  # free 1, then evicts A's 0 -> host 0 (the only one)
    cache.free(B)  # B's table is (1, 0): LRU [0, 1] (B's tail first), both hashed
    # A's block 0 hits in host block 0. Its onboard evicts gpu 0 (B's tail), whose
    # offload finds the single host block pinned by this very hit: B's tail is lost,
    # A's block is not. The second block evicts gpu 1 -> host: the host block was
    # released after the copy, so B's head replaces A's block there (A's is on the gpu).
    assert cache.admit(C, [*range(4), 9]) == 4
    assert tables(cache, C) == ((0, 1), (0, 1))
    host, gpu = cache.stats().pool("target", "host"), cache.stats().pool("target")
    assert (host.hit_blocks, host.onboarded_blocks, host.offloaded_blocks) == (1, 1, 2)
    assert (host.evicted_blocks, gpu.evicted_blocks) == (1, 1)
    cache.check_invariants()


def test_shared_prefix_survives_eviction_pressure() -> None:
    cache = make(gpu_blocks=6)
    cache.admit(A, range(9))  # 0, 1 (full), 2
    assert cache.admit(B, range(9)) == 8  # shares 0, 1; new 3
    cache.free(A)  # 2 -> free; 0, 1 still owned by B (refcount 1): not evictable
    # 3 new blocks: free 2, 4, 5; nothing cached to evict -> the 4th would not fit
    cache.admit(C, range(100, 112))
    assert cache.block_table(C, "target") == (2, 4, 5)
    with pytest.raises(OutOfBlocksError, match="0 are free or evictable"):
        cache.admit(D, [1])
    assert cache.block_table(B, "target") == (0, 1, 3)
    # B's prefix is still indexed: a third request shares it while B runs
    cache.free(C)
    assert cache.admit(D, [*range(8), 7]) == 8
    assert cache.block_table(D, "target")[:2] == (0, 1)
    cache.check_invariants()


def test_running_prefix_stays_indexed_when_its_cached_twin_is_evicted() -> None:
    cache = make(gpu_blocks=7)
    cache.admit(A, range(8))
    cache.free(A)  # 0, 1 cached; LRU [1, 0]
    # the same 8 tokens: (8 - 1) // 4 = 1 block may hit; block 1 of the prompt is
    # computed again in a new block (2). B holds those tokens, so the index should
    # now point at B's block, and the cached twin (1) becomes a plain free block.
    assert cache.admit(B, range(8)) == 4
    assert cache.block_table(B, "target") == (0, 2)
    pool = cache.stats().pool("target")
    assert (pool.used_blocks, pool.cached_blocks, pool.free_blocks) == (2, 0, 5)
    cache.admit(C, range(100, 120))  # 5 blocks: 1, 3, 4, 5, 6
    # B still holds tokens 0..7: a prompt with that prefix hits both blocks
    cache.free(C)
    assert cache.admit(D, [*range(8), 9]) == 8
    assert cache.block_table(D, "target")[:2] == (0, 2)
    cache.check_invariants()


def test_commit_registers_over_a_cached_twin() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(8))
    cache.free(A)  # 0, 1 cached
    cache.admit(B, range(6))  # hits block 0 ((6 - 1) // 4 = 1); new block 2
    cache.reserve(B, 2)
    cache.commit(B, [6, 7])  # block 2 now holds tokens 4..7, like cached block 1
    pool = cache.stats().pool("target")
    assert (pool.used_blocks, pool.cached_blocks) == (2, 0)  # 1 became free
    assert cache.admit(C, [*range(8), 1]) == 8
    assert cache.block_table(C, "target")[:2] == (0, 2)
    cache.check_invariants()


def test_extra_keys_isolate_prefixes_in_every_tier() -> None:
    cache = make(gpu_blocks=3, host_blocks=8)
    cache.admit(A, range(9), extra_keys=("salt-1",))  # 0, 1 hashed with the salt
    cache.free(A)
    cache.admit(B, range(100, 112))  # evicts A's blocks to host: host holds 2
    cache.free(B)
    assert cache.admit(C, range(9)) == 0  # same tokens, no salt: nothing shared
    cache.free(C)  # host holds A's 2 + B's 3 blocks
    assert cache.admit(D, range(9), extra_keys=("salt-2",)) == 0
    cache.free(D)  # host: + C's 2 full blocks = 7 of 8, A's two never evicted
    assert cache.admit(E, range(9), extra_keys=("salt-1",)) == 8
    assert cache.stats().pool("draft", "host").hit_blocks == 2
    cache.check_invariants()


# ---------------------------------------------------------------------- lookahead
def test_commit_of_nothing_rolls_back_the_whole_lookahead() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(7))  # blocks 0, 1
    cache.reserve(A, 4)  # 11 tokens -> 3 blocks
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    cache.commit(A, [])
    assert (cache.num_tokens(A), cache.num_reserved(A)) == (7, 0)
    assert tables(cache, A) == ((0, 1), (0, 1))
    assert cache.stats().pool("draft").free_blocks == 6
    cache.check_invariants()


def test_reserve_after_a_commit_that_crosses_blocks() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(3))  # block 0
    cache.reserve(A, 4)  # 7 tokens -> blocks 0, 1
    cache.reserve(A, 0)  # nothing more
    cache.commit(A, [3, 4])  # 5 tokens: block 0 full (hashed), block 1 holds token 4
    assert tables(cache, A) == ((0, 1), (0, 1))
    cache.reserve(A, 4)  # 9 tokens -> block 2 as well
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    cache.commit(A, [5, 6, 7, 8])  # 9 tokens: blocks 0, 1 full; 2 holds token 8
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    cache.reserve(A, 3)  # 12 tokens: still 3 blocks
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    cache.commit(A, [9])  # 10 tokens
    cache.free(A)  # 2 unhashed -> free; LRU [1, 0]
    assert cache.admit(B, range(9)) == 8
    cache.check_invariants()


# ---------------------------------------------------------------------- preemption
def test_resume_with_a_full_host_drops_offloads_not_the_request() -> None:
    cache = make(gpu_blocks=4, host_blocks=2)
    cache.admit(A, range(6))  # gpu 0 (full), 1 (partial)
    cache.preempt(A, mode="swap")  # host 0, 1 (pinned); gpu 0 stays cached, 1 free
    cache.admit(B, range(100, 112))  # gpu 1, 2, 3 (free first); hashed 1, 2, 3
    cache.free(B)  # gpu LRU [0, 3, 2, 1]
    # resume: A's block 0 is still cached on the gpu (shared, no copy); block 1 needs
    # one gpu block: evicts LRU gpu 3 (B's tail), whose offload meets a host whose
    # 2 blocks are both pinned by A: lost
    cache.resume(A)
    assert tables(cache, A) == ((0, 3), (0, 3))
    for role in cache.roles:
        gpu, host = cache.stats().pool(role), cache.stats().pool(role, "host")
        assert (gpu.evicted_blocks, host.onboarded_blocks) == (1, 1)
        assert (host.used_blocks, host.cached_blocks, host.free_blocks) == (0, 1, 1)
    cache.check_invariants()


def test_swap_refused_when_the_host_is_pinned_by_another_swap() -> None:
    cache = make(gpu_blocks=6, host_blocks=2)
    cache.admit(A, range(6))
    cache.preempt(A, mode="swap")  # A pins both host blocks
    cache.admit(B, range(100, 105))
    cache.reserve(B, 2)
    before = snapshot(cache, A, B)
    with pytest.raises(OutOfBlocksError, match=r"needs 2 free host blocks.*0 are free"):
        cache.preempt(B, mode="swap")
    assert snapshot(cache, A, B) == before
    assert cache.num_reserved(B) == 2  # the lookahead is rolled back only on success
    cache.check_invariants()


def test_free_of_a_swapped_request_caches_its_host_blocks() -> None:
    cache = make(gpu_blocks=4, host_blocks=4)
    cache.admit(A, range(6))  # gpu 0 (full), 1 (partial)
    cache.preempt(A, mode="swap")  # host 0 (hashed), 1 (partial)
    cache.free(A)
    assert A not in cache
    host = cache.stats().pool("target", "host")
    assert (host.used_blocks, host.cached_blocks, host.free_blocks) == (0, 1, 3)
    with pytest.raises(UnknownRequestError):
        cache.resume(A)
    cache.check_invariants()


def test_recompute_readmit_hits_its_own_prefix_even_after_pressure() -> None:
    cache = make(gpu_blocks=5)
    cache.admit(A, range(12))  # 0, 1, 2 hashed
    tokens = cache.preempt(A, mode="recompute")  # LRU [2, 1, 0]
    # 12 tokens: (12 - 1) // 4 = 2 blocks hit; block 2 of the prompt is computed
    # again in free block 3 and takes over the index from cached block 2
    assert cache.admit(A, tokens) == 8
    assert cache.block_table(A, "target") == (0, 1, 3)
    cache.admit(B, range(100, 108))  # 2 blocks: free 2 (the twin), 4
    assert cache.block_table(B, "target") == (2, 4)
    cache.free(B)
    tokens = cache.preempt(A, mode="recompute")
    assert cache.admit(A, [*tokens, 12]) == 12  # all three blocks still indexed
    assert cache.stats().recomputed == 2
    cache.check_invariants()


# ---------------------------------------------------------------------- fixed pools
def test_window_blocks_leave_as_tokens_leave_the_window() -> None:
    window = WindowGroup(window_tokens=6, num_layers=1, bytes_per_token=2, blocks_per_seq=4)
    cache = make(gpu_blocks=16, target_window_groups=(window,), max_batch_size=2)
    cache.admit(A, range(5))  # next token 5 sees 0..5 -> block 0, 1 (1 holds token 4)
    assert cache.window_tables(A, "target") == ((0, (0, 1)),)
    cache.reserve(A, 4)  # 9 tokens -> block 2 too
    assert cache.window_tables(A, "target") == ((0, (0, 1, 2)),)
    cache.commit(A, [5, 6, 7])  # 8 tokens: next token 8 sees 3..8 -> blocks 0, 1
    assert cache.window_tables(A, "target") == ((0, (0, 1)),)
    cache.reserve(A, 4)  # 12 tokens -> block 2 again (last freed, first taken)
    cache.commit(A, [8, 9, 10, 11])  # 12 tokens: token 12 sees 7..12 -> blocks 1, 2
    assert cache.window_tables(A, "target") == ((1, (1, 2)),)
    cache.reserve(A, 1)  # 13 tokens -> a 4th block: block 3, the next free one (block 0,
    # full and hashed when it left the window, stays cached for prefix reuse)
    cache.commit(A, [12])  # 13 tokens: token 13 sees 8..13 -> blocks 2, 3
    assert cache.window_tables(A, "target") == ((2, (2, 3)),)
    w = cache.stats().pool("target", "gpu", "window6")
    # 8 blocks: 2 used, blocks 0 and 1 (tokens 0..7) cached, 4 free
    assert (w.used_blocks, w.cached_blocks, w.free_blocks) == (2, 2, 4)
    cache.check_invariants()


def test_state_slots_are_reused_and_refusals_change_nothing() -> None:
    cache = make(gpu_blocks=16, target_state_bytes_per_seq=8, max_batch_size=3)
    for rid in (A, B, C):
        cache.admit(rid, range(4))
    assert [cache.state_slot(r, "target") for r in (A, B, C)] == [0, 1, 2]
    cache.free(B)
    cache.preempt(A, mode="recompute")
    before = snapshot(cache, C)
    with pytest.raises(InvalidCacheOperationError, match="recompute"):
        cache.preempt(C, mode="swap")
    assert snapshot(cache, C) == before
    cache.admit(D, range(4))  # last freed slot (A's 0) first
    cache.admit(E, range(4))
    assert (cache.state_slot(D, "target"), cache.state_slot(E, "target")) == (0, 1)
    with pytest.raises(OutOfBlocksError, match="state slot"):
        cache.admit(B, range(4))
    cache.check_invariants()
