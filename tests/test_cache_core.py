"""Exact tests of SpecDecodeCache: block ids, eviction order, hit lengths, lookahead.

Plans come from ``tiny_plan``: tokens_per_block 4, a target (32-byte blocks) and a draft
(8-byte blocks) with the same block counts. Free lists hand out the lowest id first.
"""

from __future__ import annotations

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.errors import (
    CacheError,
    InvalidArgumentError,
    InvalidCacheOperationError,
    OutOfBlocksError,
    UnknownRequestError,
)

A, B, C, D = RequestId("a"), RequestId("b"), RequestId("c"), RequestId("d")


def make(**kwargs: object) -> SpecDecodeCache:
    return SpecDecodeCache.from_plan(tiny_plan(**kwargs))  # type: ignore[arg-type]


def tables(cache: SpecDecodeCache, rid: RequestId) -> tuple[tuple[int, ...], ...]:
    return tuple(cache.block_table(rid, role) for role in cache.roles)


def test_admit_gives_the_lowest_ids_in_both_roles() -> None:
    cache = make(gpu_blocks=8)
    assert cache.roles == ("target", "draft")
    # 10 tokens = 2 full blocks + 2 tokens -> 3 blocks; nothing cached yet
    assert cache.admit(A, range(10)) == 0
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    stats = cache.stats()
    for role in cache.roles:
        p = stats.pool(role)
        assert (p.total_blocks, p.used_blocks, p.free_blocks, p.cached_blocks) == (8, 3, 5, 0)
    cache.check_invariants()


def test_freed_tail_is_evicted_before_the_head() -> None:
    cache = make(gpu_blocks=10)
    cache.admit(A, range(12))  # blocks 0, 1, 2, all full -> hashed
    cache.free(A)  # released tail first: LRU (oldest first) = 2, 1, 0
    assert cache.stats().pool("target").cached_blocks == 3
    cache.admit(B, range(100, 120))  # 5 blocks: free ones first -> 3..7, cache untouched
    assert cache.block_table(B, "target") == (3, 4, 5, 6, 7)
    cache.admit(C, range(200, 208))  # 2 blocks: the last free ones 8, 9
    assert cache.block_table(C, "target") == (8, 9)
    cache.admit(D, range(300, 308))  # no free block: evicts A's tail 2, then 1
    assert tables(cache, D) == ((2, 1), (2, 1))
    cache.free(D)  # D's full blocks released 1 then 2: LRU = 0 (A's head), 1, 2
    # A's first 8 tokens + 1: at most 8 // 4 = 2 hit blocks; A's block 0 survives,
    # its block 1 was evicted -> 1 hit block = 4 tokens; 2 new blocks evict 1, 2
    assert cache.admit(A, [*range(8), 99]) == 4
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    assert cache.stats().hit_tokens == 4
    cache.check_invariants()


def test_hit_leaves_one_token_to_compute() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(8))
    cache.free(A)
    # the same 8 tokens: (8 - 1) // 4 = 1 block may hit, the last block is recomputed
    assert cache.admit(B, range(8)) == 4
    assert cache.block_table(B, "target")[0] == 0
    cache.check_invariants()


def test_running_blocks_are_shared_with_refcounts() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(9))  # blocks 0, 1 (full), 2
    assert cache.admit(B, range(9)) == 8  # (9 - 1) // 4 = 2 blocks shared
    assert cache.block_table(B, "target") == (0, 1, 3)
    p = cache.stats().pool("draft")
    assert (p.used_blocks, p.hit_blocks) == (4, 2)
    cache.free(A)
    assert cache.stats().pool("target").used_blocks == 3  # 0, 1 still owned by B
    cache.check_invariants()


def test_eagle_draft_hashes_a_block_with_the_token_after_it() -> None:
    cache = make(gpu_blocks=8, spec="eagle3")
    assert cache.draft_prefix == "drop_last_block"
    cache.admit(A, range(12))
    cache.free(A)
    # the draft's K/V at the end of block i reads token 4 (i + 1): A's 12 tokens hash
    # blocks 0 and 1 (followed by 4 and 8); block 2 waits for token 12. B's 13 tokens:
    # (13 - 1) // 4 = 3 may hit, blocks 0, 1 match -> 8 tokens reused
    assert cache.admit(B, [*range(12), 5]) == 8
    cache.free(B)  # B's block 2 is now hashed with its token 12 = 5
    # C repeats B's prompt: block 2 is followed by 5 here too -> 3 blocks = 12 tokens
    assert cache.admit(C, [*range(12), 5]) == 12
    # D differs at token 12 only: block 2's hash covers it -> 2 blocks
    assert cache.admit(D, [*range(12), 6]) == 8
    cache.check_invariants()


def test_eagle_hit_blocks_were_drafted_with_the_same_next_token() -> None:
    # issue #21: an EAGLE3 / MTP draft's K/V at position i reads the token at i + 1, so a
    # block's draft K/V is reusable only where the token after the block matches too.
    cache = make(gpu_blocks=16, spec="eagle3")
    x, y, z = RequestId("x"), RequestId("y"), RequestId("z")
    prompt_x = list(range(11, 19))  # 8 tokens: blocks 0, 1
    cache.admit(x, prompt_x)
    cache.reserve(x, 1)
    cache.commit(x, [100])  # X's next token: X's draft K/V at position 7 read 100
    assert cache.block_table(x, "draft") == (0, 1, 2)
    # Y = X + [200..204], 13 tokens: block 1 is X's tokens but followed by 200, not 100:
    # only X's block 0 (followed by 15 in both) is reusable -> 4 hit tokens; new 3, 4, 5
    assert cache.admit(y, [*prompt_x, *range(200, 205)]) == 4
    assert cache.block_table(y, "draft") == (0, 3, 4, 5)
    # Z = X + [200..203, 30..34], 17 tokens: block 0 (X's, followed by 15), block 1
    # (Y's block 3, followed by 200 as in Z); block 2 is Y's tokens followed by 204, not
    # 30: 2 blocks = 8 hit tokens. X's block 1 (drafted from 100) must not be among them.
    assert cache.admit(z, [*prompt_x, *range(200, 204), *range(30, 35)]) == 8
    assert cache.block_table(z, "draft") == (0, 3, 6, 7, 8)
    assert cache.block_table(z, "target") == cache.block_table(z, "draft")  # lockstep
    cache.check_invariants()


def test_extra_keys_separate_prefixes() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(9), extra_keys=("lora-1",))
    assert cache.admit(B, range(9), extra_keys=("lora-2",)) == 0
    assert cache.admit(C, range(9), extra_keys=("lora-1",)) == 8
    cache.check_invariants()


def test_reserve_and_commit_roll_back_the_rest() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(6))  # blocks 0, 1
    cache.reserve(A, 4)  # 6 + 4 = 10 tokens -> 3 blocks
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    assert cache.num_reserved(A) == 4
    cache.commit(A, [6])  # 7 tokens -> 2 blocks; block 2 had only lookahead -> freed
    assert tables(cache, A) == ((0, 1), (0, 1))
    assert (cache.num_tokens(A), cache.num_reserved(A)) == (7, 0)
    assert cache.stats().pool("target").free_blocks == 6
    cache.reserve(A, 4)  # block 2 is reused (last freed, first taken)
    cache.commit(A, [7, 8, 9, 10])  # 11 tokens: block 1 (tokens 4..7) is now full
    assert tables(cache, A) == ((0, 1, 2), (0, 1, 2))
    cache.check_invariants()
    # block 1 got hashed at commit: a new prompt with the same 9 tokens hits 2 blocks
    assert cache.admit(B, range(9)) == 8


def test_commit_without_reserve_only_accepts_nothing() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(3))
    cache.commit(A, [])
    with pytest.raises(InvalidCacheOperationError, match="only 0 are reserved"):
        cache.commit(A, [3])
    assert cache.num_tokens(A) == 3


def test_bad_input_raises_typed_errors_and_keeps_state() -> None:
    cache = make(gpu_blocks=8)
    cache.admit(A, range(6))
    cache.reserve(A, 2)
    before = (cache.stats(), tables(cache, A), cache.num_tokens(A), cache.num_reserved(A))
    with pytest.raises(InvalidCacheOperationError, match="only 2 are reserved"):
        cache.commit(A, [1, 2, 3])
    with pytest.raises(InvalidCacheOperationError, match="max_reserve_tokens=4"):
        cache.reserve(A, 3)  # 2 + 3 > lookahead 3 + bonus 1
    with pytest.raises(InvalidCacheOperationError):
        cache.reserve(A, -1)
    with pytest.raises(InvalidCacheOperationError, match="already admitted"):
        cache.admit(A, range(3))
    with pytest.raises(InvalidCacheOperationError, match="empty prompt"):
        cache.admit(B, [])
    for op in (
        lambda: cache.reserve(B, 1),
        lambda: cache.commit(B, []),
        lambda: cache.free(B),
        lambda: cache.block_table(B, "target"),
        lambda: cache.preempt(B, mode="swap"),
        lambda: cache.resume(B),
    ):
        with pytest.raises(UnknownRequestError, match="not in the cache"):
            op()
    with pytest.raises(InvalidArgumentError):
        cache.block_table(A, "drafty")  # type: ignore[arg-type]
    after = (cache.stats(), tables(cache, A), cache.num_tokens(A), cache.num_reserved(A))
    assert after == before
    cache.free(A)
    with pytest.raises(UnknownRequestError):
        cache.free(A)  # double free
    assert issubclass(UnknownRequestError, CacheError)
    cache.check_invariants()


def test_out_of_blocks_changes_nothing() -> None:
    cache = make(gpu_blocks=4)
    cache.admit(A, range(10))  # 3 blocks
    before = (cache.stats(), tables(cache, A))
    with pytest.raises(OutOfBlocksError, match=r"needs 2 more GPU blocks.*1 are free"):
        cache.admit(B, range(100, 108))
    assert B not in cache
    assert (cache.stats(), tables(cache, A)) == before
    cache.check_invariants()


def test_out_of_blocks_on_reserve_keeps_the_request() -> None:
    cache = make(gpu_blocks=4)
    cache.admit(A, range(8))  # blocks 0, 1
    cache.admit(B, range(100, 108))  # blocks 2, 3
    before = (cache.stats(), tables(cache, A))
    shared = r"kv pool of target and draft \(one block table\)"
    with pytest.raises(OutOfBlocksError, match=shared + " needs 1 more GPU blocks"):
        cache.reserve(A, 1)
    assert (cache.stats(), tables(cache, A), cache.num_reserved(A)) == (*before, 0)
    cache.check_invariants()


def test_roles_with_different_plan_blocks_use_the_smaller_count() -> None:
    cache = make(gpu_blocks=8, draft_gpu_blocks=7)
    stats = cache.stats()
    assert (stats.pool("target").plan_blocks, stats.pool("target").total_blocks) == (8, 7)
    assert (stats.pool("draft").plan_blocks, stats.pool("draft").total_blocks) == (7, 7)
    cache.admit(A, range(28))  # 7 blocks: every usable block
    with pytest.raises(OutOfBlocksError):
        cache.admit(B, [1])
    cache.check_invariants()


def test_target_only_plan() -> None:
    cache = make(gpu_blocks=4, draft=False, spec="ngram")
    assert cache.roles == ("target",)
    cache.admit(A, range(5))
    cache.reserve(A, 4)
    cache.commit(A, [5, 6])
    assert cache.block_table(A, "target") == (0, 1)
    with pytest.raises(InvalidArgumentError, match="no 'draft' manager"):
        cache.block_table(A, "draft")
    cache.check_invariants()


def test_spec_none_reserves_one_token_per_step() -> None:
    cache = make(gpu_blocks=4, draft=False, spec="none")
    assert cache.max_reserve_tokens == 1
    cache.admit(A, range(4))
    cache.reserve(A, 1)
    with pytest.raises(InvalidCacheOperationError):
        cache.reserve(A, 1)
    cache.commit(A, [4])
    assert cache.block_table(A, "target") == (0, 1)


def test_reserve_stops_at_the_plans_max_seq_len() -> None:
    import kvbudget
    from kvbudget import RequestId, SpecDecodeCache

    # 64-token sequences in blocks of 32: the plan counts 2 blocks per sequence, not 3
    plan = kvbudget.plan(kv_budget="1GiB", host_budget=0, max_seq_len=64, max_batch_size=4)
    cache = SpecDecodeCache.from_plan(plan)
    rid = RequestId("r")
    cache.admit(rid, list(range(62)))
    cache.reserve(rid, 4)  # K + 1 = 4 asked; 64 - 62 = 2 tokens of room are left
    assert len(cache.block_table(rid, "target")) == 2  # ceil(64 / 32)
    cache.commit(rid, [7, 8])
    cache.reserve(rid, 4)  # at max_seq_len: nothing more to reserve
    assert len(cache.block_table(rid, "target")) == 2
    cache.check_invariants()


def test_a_hit_never_serves_another_prompts_blocks() -> None:
    from kvbudget.cache import ROOT_HASH, hash_block_tokens

    # Python's hash() collides on these (hash(-1) == hash(-2); k and k + 2**61 - 1);
    # the SHA-256 chain does not
    assert hash((-1,)) == hash((-2,))
    assert hash_block_tokens(ROOT_HASH, [-1] * 4) != hash_block_tokens(ROOT_HASH, [-2] * 4)
    assert hash_block_tokens(ROOT_HASH, [5]) != hash_block_tokens(ROOT_HASH, [5 + 2**61 - 1])
    # the chain: the same block after different parents hashes differently
    a = hash_block_tokens(ROOT_HASH, [1, 2])
    assert hash_block_tokens(a, [3, 4]) != hash_block_tokens(ROOT_HASH, [3, 4])


def test_token_ids_outside_the_vocabulary_are_refused() -> None:
    import kvbudget
    from kvbudget import InvalidCacheOperationError, RequestId, SpecDecodeCache

    plan = kvbudget.plan(kv_budget="1GiB", host_budget=0, max_seq_len=256, max_batch_size=4)
    assert plan.vocab_size == 128_256  # Llama-3.1's vocabulary
    cache = SpecDecodeCache.from_plan(plan)
    for bad in ([-1] * 4 + [7], [128_256], [5 + 2**61 - 1]):
        with pytest.raises(InvalidCacheOperationError, match=r"in \[0, 128256\)"):
            cache.admit(RequestId("r"), bad)
    assert cache.stats().running_requests == 0  # nothing changed
    cache.admit(RequestId("r"), [128_255] * 40)
    cache.reserve(RequestId("r"), 2)
    with pytest.raises(InvalidCacheOperationError, match="vocabulary"):
        cache.commit(RequestId("r"), [1, -3])


def test_cache_salt_isolates_tenants() -> None:
    import kvbudget
    from kvbudget import InvalidCacheOperationError, RequestId, SpecDecodeCache

    plan = kvbudget.plan(
        spec="ngram", kv_budget="1GiB", host_budget=0, max_seq_len=256, max_batch_size=4
    )
    cache = SpecDecodeCache.from_plan(plan)
    prompt = list(range(100))  # 3 full blocks of 32 + 4 tokens
    cache.admit(RequestId("a"), prompt, cache_salt="tenant-a")
    cache.free(RequestId("a"))
    assert cache.admit(RequestId("b"), prompt, cache_salt="tenant-b") == 0
    assert cache.admit(RequestId("c"), prompt) == 0  # no salt: a third tenant
    assert cache.admit(RequestId("d"), prompt, cache_salt="tenant-a") == 96  # 3 x 32
    with pytest.raises(InvalidCacheOperationError, match="cache_salt must be a string"):
        cache.admit(RequestId("e"), prompt, cache_salt=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidCacheOperationError, match="extra_keys must be a tuple"):
        cache.admit(RequestId("e"), prompt, extra_keys="lora")  # type: ignore[arg-type]
    cache.check_invariants()


def test_a_refusal_carries_role_tier_pool_and_counts() -> None:
    from kvbudget import OutOfBlocksError

    # 8 GPU blocks of 4 tokens per role; a 9-token prompt takes 3
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8, host_blocks=2))
    cache.admit(RequestId("a"), range(9))
    cache.admit(RequestId("b"), range(100, 109))
    with pytest.raises(OutOfBlocksError) as info:
        cache.admit(RequestId("c"), range(200, 209))  # 3 more needed, 8 - 6 = 2 free
    err = info.value
    assert (err.role, err.tier, err.pool, err.needed, err.available) == (
        "target",
        "gpu",
        "kv",
        3,
        2,
    )
    with pytest.raises(OutOfBlocksError) as info:
        cache.preempt(RequestId("a"), mode="swap")  # 3 blocks to move, 2 on the host
    err = info.value
    assert (err.role, err.tier, err.pool, err.needed, err.available) == (
        "target",
        "host",
        "kv",
        3,
        2,
    )
    cache.reserve(RequestId("a"), 4)  # 13 tokens: a 4th block (2 free -> 1)
    cache.reserve(RequestId("b"), 4)  # b's 4th block (1 free -> 0)
    cache.commit(RequestId("a"), [1, 2, 3, 4])  # 13 tokens kept in 4 blocks
    with pytest.raises(OutOfBlocksError) as info:
        cache.reserve(RequestId("a"), 4)  # 17 tokens: a 5th block, none left
    err = info.value
    assert (err.role, err.tier, err.pool, err.needed, err.available) == (
        "target",
        "gpu",
        "kv",
        1,
        0,
    )


def test_the_facade_settings_are_read_only() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4))
    for name in ("plan", "tokens_per_block", "draft_prefix", "max_reserve_tokens"):
        with pytest.raises(AttributeError):
            setattr(cache, name, None)
