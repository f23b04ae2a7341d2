"""Prefix reuse for recurrent layers: states cached at block boundaries (exact)."""

from __future__ import annotations

import pytest
from test_cache_support import tiny_plan

import kvbudget
from kvbudget.cache import RequestId, SpecDecodeCache

A, B, C, D, E = (RequestId(x) for x in "abcde")


def make(**kwargs: object) -> SpecDecodeCache:
    # 4 tokens per block; target state 16 B per running slot, 4 B per cached state
    values: dict[str, object] = dict(
        gpu_blocks=16,
        max_batch_size=4,
        target_state_bytes_per_seq=16,
        target_cached_states=2,
        target_state_bytes_per_checkpoint=4,
    )
    values.update(kwargs)
    return SpecDecodeCache.from_plan(tiny_plan(**values))  # type: ignore[arg-type]


def test_a_hit_restarts_from_the_state_cached_at_its_boundary() -> None:
    cache = make()
    assert cache.prefix_reuse
    cache.admit(A, range(10))  # full blocks 0..7: the state after 8 tokens is saved
    assert cache.state_saves(A, "target") == ((8, 0),)  # cached state 0
    assert cache.state_saves(A, "draft") == ()  # the draft keeps no state
    cache.reserve(A, 4)
    cache.commit(A, [10, 11])  # 12 tokens: block 2 completed -> the state after 12
    assert cache.state_saves(A, "target") == ((12, 1),)
    cache.reserve(A, 4)
    cache.commit(A, [12])  # 13 tokens, no block completed: nothing to save
    assert cache.state_saves(A, "target") == ()
    cache.free(A)
    # same first 10 tokens: at most (11 - 1) // 4 = 2 blocks; the state after 8 is cached
    assert cache.admit(B, [*range(10), 99]) == 8
    # A's first 12 tokens: at most (13 - 1) // 4 = 3 blocks, the state after 12 cached
    assert cache.admit(C, [*range(12), 50]) == 12
    assert cache.state_saves(C, "target") == ()  # its last boundary (12) is the hit's
    stats = cache.stats()
    assert stats.pool("target", "gpu", "state_cache").hit_blocks == 2
    assert stats.pool("target", "gpu", "state_cache").cached_blocks == 2
    cache.check_invariants()


def test_a_hit_needs_the_state_at_that_exact_boundary() -> None:
    cache = make()
    cache.admit(A, range(10))  # cached state 0: after 8 tokens of A
    cache.reserve(A, 4)
    cache.commit(A, [10, 11])  # cached state 1: after 12 tokens of A
    cache.free(A)
    assert cache.admit(B, [*range(10), 99]) == 8  # state 0 is now most recently used
    assert cache.admit(C, [*range(12), 50]) == 12  # state 1 is now most recently used
    # a new prompt with 2 full blocks saves the state after 8 tokens into the least
    # recently used cached state: 0, A's state after 8 tokens, is gone
    cache.admit(D, range(200, 209))
    assert cache.state_saves(D, "target") == ((8, 0),)
    # B's prompt again: its kv blocks are held (by B), but no state after 8 tokens of A
    # is cached any more, nor after 4 (never saved): no hit
    assert cache.admit(E, [*range(10), 99]) == 0
    cache.check_invariants()


def test_drop_last_block_saves_the_prompts_last_two_boundaries() -> None:
    cache = make(spec="eagle3")
    assert cache.draft_prefix == "drop_last_block"
    # 3 blocks hashed, each with the token after it (12 follows block 2): the states
    # after 8 and 12 tokens
    cache.admit(A, range(13))
    assert cache.state_saves(A, "target") == ((8, 0), (12, 1))
    cache.free(A)
    # B diverges at token 12: block 2's hash (its tokens and token 12) differs, so the
    # hit is 2 blocks, restarting from the state after 8 tokens
    assert cache.admit(B, [*range(12), 7]) == 8
    cache.check_invariants()


def test_without_cached_states_there_is_no_reuse() -> None:
    cache = make(target_cached_states=0)
    assert not cache.prefix_reuse
    cache.admit(A, range(10))
    assert cache.state_saves(A, "target") == ()
    cache.free(A)
    assert cache.admit(B, range(10)) == 0
    cache.check_invariants()


def test_a_restored_state_holds_the_saved_bytes() -> None:
    torch = pytest.importorskip("torch")
    cache = SpecDecodeCache.from_plan(
        tiny_plan(
            gpu_blocks=16,
            max_batch_size=4,
            target_state_bytes_per_seq=16,
            target_cached_states=2,
            target_state_bytes_per_checkpoint=4,
        ),
        device="cpu",
    )
    cache.admit(A, range(10))
    ((tokens, checkpoint),) = cache.state_saves(A, "target")
    assert (tokens, checkpoint) == (8, 0)
    saved = torch.tensor([11, 22, 33, 44], dtype=torch.uint8)
    cache.checkpoint_page("target", checkpoint).copy_(saved)  # the engine's write
    cache.state_page(A, "target").fill_(200)  # A's own running state moves on
    cache.free(A)
    assert cache.admit(B, [*range(10), 99]) == 8
    slot = cache.state_page(B, "target")
    # the first 4 bytes (one state) come from the cached state; the rest is the slot's
    assert slot[:4].tolist() == [11, 22, 33, 44]
    with pytest.raises(kvbudget.InvalidCacheOperationError, match="outside role target's 2"):
        cache.checkpoint_page("target", 2)
    with pytest.raises(kvbudget.InvalidCacheOperationError, match="keeps no recurrent state"):
        cache.state_page(B, "draft")
    storage = cache.storage
    assert storage is not None
    # 16 blocks x 32 B kv + 4 slots x 16 B + 2 cached states x 4 B
    assert storage.roles[0].tier_bytes("gpu") == 512 + 64 + 8
    cache.check_invariants()


def test_qwen3_next_reuses_a_prefix_from_a_cached_state() -> None:
    p = kvbudget.plan(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        spec="mtp",
        kv_budget="8GiB",
        host_budget=0,
        max_batch_size=2,
        max_seq_len=8192,
    )
    (target,) = p.managers
    assert target.cached_states == 2  # max_batch_size, by default
    cache = SpecDecodeCache.from_plan(p)
    assert cache.prefix_reuse
    system = list(range(1000, 1100))  # 100 tokens: 3 full blocks of 32
    cache.admit(A, [*system, 1])
    assert cache.state_saves(A, "target") == ((64, 0), (96, 1))  # MTP: the last two
    cache.free(A)
    # 101 tokens: at most (101 - 1) // 32 = 3 blocks; block 2 is hashed with token 96,
    # the system prompt's in both -> 3 blocks, and the state after 96 tokens is cached
    assert cache.admit(B, [*system, 2]) == 96
    assert cache.stats().pool("target", "gpu", "state_cache").hit_blocks == 1
    cache.check_invariants()
