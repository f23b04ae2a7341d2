"""SpecDecodeCache.decode_run: decode steps with the cache touched only where blocks
change (the simulator's fast path) leave the cache as reserve + commit do."""

from __future__ import annotations

import pytest
from test_scheduling import cache_of
from test_sim_replay import TPB

from kvbudget.cache import RequestId, SpecDecodeCache


def test_a_decode_run_matches_reserve_and_commit() -> None:
    """Four decode steps of 3 tokens each through a DecodeRun leave the cache as
    reserve(4) + commit(3) four times do (block counts, hashes, stats)."""
    stepwise, lazy = cache_of(6), cache_of(6)
    rid = RequestId("r0")
    for cache in (stepwise, lazy):
        cache.admit(rid, list(range(1, 15)))  # 14 tokens: one block
    for _ in range(4):
        stepwise.reserve(rid, 4)
        stepwise.commit(rid, [1, 1, 1])
    run = lazy.decode_run([rid], 1)
    assert run is not None and run.hash_at == [TPB + 1]  # EAGLE3: hashed with the next token
    tokens = 14
    for _ in range(4):  # the caller's part: take where the reservation crosses a block
        if tokens + 4 > run.blocks[0] * TPB:
            run.take(0, 1)
        tokens += 3
        run.settle(0, tokens)
    run.close([tokens])
    lazy.check_invariants()
    assert lazy.num_tokens(rid) == stepwise.num_tokens(rid) == 26
    assert lazy.stats() == stepwise.stats()


def test_a_prompt_of_the_run_token_only_is_hashed_from_its_root() -> None:
    """A prompt made only of the run's token id, no block hashed yet: its blocks are
    hashed from the chain's root as commit hashes them."""
    stepwise, lazy = cache_of(8), cache_of(8)
    rid = RequestId("ones")
    for cache in (stepwise, lazy):
        cache.admit(rid, [1] * 15)  # no full block yet
    for _ in range(5):
        stepwise.reserve(rid, 4)
        stepwise.commit(rid, [1, 1, 1, 1])
    run = lazy.decode_run([rid], 1)
    assert run is not None and run.hash_at == [TPB + 1]
    tokens = 15
    for _ in range(5):
        if tokens + 4 > run.blocks[0] * TPB:
            run.take(0, 1)
        tokens += 4
        run.settle(0, tokens)
    run.close([tokens])
    lazy.check_invariants()
    assert len(lazy._requests[rid].hashes) == 2  # 35 tokens: blocks 0 and 1
    assert lazy._requests[rid].hashes == stepwise._requests[rid].hashes
    assert lazy.stats() == stepwise.stats()


def test_a_decode_run_needs_running_requests_without_lookahead() -> None:
    from kvbudget.errors import InvalidCacheOperationError

    cache = cache_of(4, host_blocks=4)
    a, b = RequestId("a"), RequestId("b")
    cache.admit(a, [1] * 20)
    cache.admit(b, [2] * 20)
    cache.reserve(a, 2)
    with pytest.raises(InvalidCacheOperationError, match="reserved"):
        cache.decode_run([a], 1)
    cache.preempt(b, mode="swap")
    with pytest.raises(InvalidCacheOperationError, match="swapped out"):
        cache.decode_run([b], 1)


def test_blocks_of_output_tokens_only_are_hashed_as_commit_hashes_them() -> None:
    """A run long enough to fill blocks made only of the run's own tokens (hashed from one
    packed block of them) leaves the same hashes as commit, and a prompt of the same
    tokens hits every block; a second run (its first block begun before it) too."""
    stepwise, lazy = cache_of(12), cache_of(12)
    rid = RequestId("r0")
    for cache in (stepwise, lazy):
        cache.admit(rid, list(range(1, 15)))  # 14 tokens: one block
    for _ in range(30):  # 14 + 90 tokens: blocks 1..5 hold output tokens only
        stepwise.reserve(rid, 4)
        stepwise.commit(rid, [1, 1, 1])
    tokens = 14
    for steps in (13, 17):  # two runs; the second starts inside block 3
        run = lazy.decode_run([rid], 1)
        assert run is not None
        for _ in range(steps):
            if tokens + 4 > run.blocks[0] * TPB:
                run.take(0, 1)
            tokens += 3
            if tokens >= run.hash_at[0] or tokens <= (run.blocks[0] - 1) * TPB:
                run.settle(0, tokens)
        run.settle(0, tokens)
        run.close([tokens])
    lazy.check_invariants()
    assert lazy.stats() == stepwise.stats()
    assert lazy._requests[rid].hashes == stepwise._requests[rid].hashes
    # 104 tokens: 6 full blocks, the 6th hashed once the 97th token is there (EAGLE3)
    assert lazy.stats().pool("target").cached_blocks == 0
    for cache in (stepwise, lazy):
        cache.free(rid)
        assert cache.stats().pool("target").cached_blocks == 6  # 6 x 16 = 96 tokens hashed
        again = RequestId("again")
        # 14 prompt ids then 90 output ids, plus one: the hit leaves a token to compute
        assert cache.admit(again, [*range(1, 15), *([1] * 91)]) == 6 * TPB
        cache.check_invariants()


def test_kv_counts_are_the_snapshot_s() -> None:
    """kv_counts reads the counters stats() reports, in every tier; an unknown tier is
    refused."""
    from kvbudget.errors import InvalidArgumentError

    cache = cache_of(4, host_blocks=4)
    a, b = RequestId("a"), RequestId("b")
    cache.admit(a, list(range(1, 34)))  # 33 tokens: 3 blocks, 2 hashed
    cache.free(a)
    cache.admit(b, list(range(100, 164)))  # 4 blocks: evicts a's 2 cached ones to host
    stats = cache.stats()
    for tier in ("gpu", "host", "disk"):
        p = stats.pool("target", tier)
        want = (p.used_blocks, p.cached_blocks, p.offloaded_blocks, p.onboarded_blocks)
        assert tuple(cache.kv_counts(tier)) == want
    assert tuple(cache.kv_counts("host")) == (0, 2, 2, 0)
    with pytest.raises(InvalidArgumentError, match="tier"):
        cache.kv_counts("tape")  # type: ignore[arg-type]


def test_finish_is_a_run_s_takes_and_settles_in_one_batch() -> None:
    """Two requests on a GPU with no free block: five decode steps of 3 tokens through
    DecodeRun.finish, with the evictions their reservations make, leave the cache as
    reserve + commit step by step do (block counts, cached blocks, hashes, stats)."""

    def setup() -> SpecDecodeCache:
        cache = cache_of(12)
        cache.admit(RequestId("old"), list(range(200, 264)))  # 4 blocks, 3 hashed (EAGLE3)
        cache.admit(RequestId("fill"), list(range(300, 412)))  # 112 tokens: 7 blocks
        cache.free(RequestId("old"))  # 3 blocks cached; its 4th, unhashed, free: 2 free
        cache.admit(a, list(range(1, 15)))  # 14 tokens: a free block each
        cache.admit(b, list(range(20, 34)))
        return cache

    a, b = RequestId("a"), RequestId("b")
    stepwise, lazy = setup(), setup()
    assert (lazy.kv_counts().used_blocks, lazy.kv_counts().cached_blocks) == (
        9,
        3,
    )  # 7 + 1 + 1 used, 0 free
    # step 1 (14 tokens + 4 > 16): each takes a block, none free, 2 cached evicted; the
    # commits (17 tokens) keep them and hash block 0 (its 16 tokens and the 17th);
    # steps 2-5 need none (29 + 4 <= 32); step 6 would need 2, 1 is left: not run
    for _ in range(5):
        for rid in (a, b):
            stepwise.reserve(rid, 4)
        for rid in (a, b):
            stepwise.commit(rid, [1, 1, 1])
    run = lazy.decode_run([a, b], 1)
    assert run is not None and (run.free(), run.available()) == (0, 3)
    assert run.finish([29, 29], evict=2)
    lazy.check_invariants()
    assert lazy.stats() == stepwise.stats()
    assert lazy.kv_counts() == stepwise.kv_counts()
    assert (lazy.kv_counts().used_blocks, lazy.kv_counts().cached_blocks) == (11, 1)  # 7 + 2 + 2
    for rid in (a, b):
        assert lazy._requests[rid].hashes == stepwise._requests[rid].hashes
        assert len(lazy._requests[rid].hashes) == 1  # (29 - 1) // 16
        assert lazy.num_tokens(rid) == 29
    assert run.blocks == [2, 2] and run.hash_at == [2 * TPB + 1] * 2


def test_finish_refuses_a_run_that_fills_a_block_a_twin_holds() -> None:
    """Two requests with the same prompt fill blocks of equal hashes: finish returns
    False and changes nothing (the caller takes and settles them one by one)."""
    cache = cache_of(8)
    a, b = RequestId("a"), RequestId("b")
    cache.admit(a, list(range(1, 15)))
    cache.admit(b, list(range(1, 15)))  # 14 tokens: no full block, no hit
    before = cache.stats()
    run = cache.decode_run([a, b], 1)
    assert run is not None
    assert not run.finish([20, 20], evict=0)  # both would hash block 0 (17 tokens seen)
    assert cache.stats() == before
    assert (run.tokens, run.blocks) == ([14, 14], [1, 1])
    run.close([14, 14])
    cache.check_invariants()
