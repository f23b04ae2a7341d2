"""BlockPool on its own: the batch operations the managers use, exact block ids."""

from __future__ import annotations

import pytest

from kvbudget.cache import BlockPool
from kvbudget.cache.ids import BlockHash, BlockId

H = [BlockHash(bytes([i]) * 32) for i in range(8)]


def test_take_into_uses_free_blocks_then_the_lru_cached_ones() -> None:
    pool = BlockPool("p", 4)
    table: list[BlockId] = []
    assert pool.take_into(table, 3) == []  # free blocks 0, 1, 2: nothing evicted
    assert table == [0, 1, 2]
    pool.register(table, H[:3], 0)  # all three full: hashed
    pool.release_tail(table, 2)  # tail first: 2 then 1 become cached (2 is LRU)
    assert table == [0] and pool.cached_in_lru_order() == [2, 1]
    other: list[BlockId] = []
    # free block 3 first, then evict 2 (least recently used), then 1
    assert pool.take_into(other, 3) == [(2, H[2]), (1, H[1])]
    assert other == [3, 2, 1]
    assert pool.find(H[2]) is None and pool.find(H[0]) == 0
    pool.check()


def test_register_hands_a_cached_twins_hash_to_the_running_block() -> None:
    pool = BlockPool("p", 4)
    a: list[BlockId] = []
    pool.take_into(a, 1)
    pool.register(a, [H[0]], 0)
    pool.release_table(a)  # block 0 cached under H[0]
    b: list[BlockId] = []
    pool.take_into(b, 1)  # block 1 (free first)
    pool.register(b, [H[0]], 0)  # the running block wins; the twin goes free
    assert pool.find(H[0]) == 1 and pool.owners(BlockId(0)) == 0
    assert pool.num_cached == 0 and pool.num_free == 3
    pool.check()


def test_receive_makes_room_from_the_lru_and_counts_the_offload() -> None:
    pool = BlockPool("host", 2)
    assert pool.receive(H[0]) == (0, None)
    assert pool.receive(H[1]) == (1, None)
    # full: the least recently used cached block (0, H[0]) gives way
    assert pool.receive(H[2]) == (0, H[0])
    assert pool.offloaded_blocks == 3 and pool.cached_in_lru_order() == [1, 0]
    pool.acquire(BlockId(0))
    pool.acquire(BlockId(1))
    assert pool.receive(H[3]) is None  # every block owned
    pool.check()


def test_a_hit_pins_a_cached_block_and_counts_it() -> None:
    pool = BlockPool("p", 2)
    t: list[BlockId] = []
    pool.take_into(t, 1)
    pool.register(t, [H[5]], 0)
    pool.release_table(t)
    pool.acquire_hit(BlockId(0))
    assert pool.owners(BlockId(0)) == 1 and pool.hit_blocks == 1 and pool.num_cached == 0
    assert dict(pool.hashes) == {H[5]: 0}
    with pytest.raises(TypeError):
        pool.hashes[H[6]] = BlockId(1)  # type: ignore[index]  # a read-only view
    pool.check()


def test_receive_all_keeps_arrivals_in_order_and_loses_only_what_cannot_fit() -> None:
    host = BlockPool("host", 2)
    # three blocks arrive from the GPU (src ids 7, 8, 9): free 0 then free 1 take the
    # first two; the third evicts the least recently used arrival (block 0, H[0])
    moved, lost = host.receive_all([(BlockId(7), H[0]), (BlockId(8), H[1]), (BlockId(9), H[2])])
    assert (moved, lost) == ([(7, 0), (8, 1), (9, 0)], 0)
    assert host.find(H[0]) is None and host.find(H[2]) == 0
    assert (host.offloaded_blocks, host.evicted_blocks) == (3, 1)
    assert host.cached_in_lru_order() == [1, 0]
    # an arrival whose hash is held already only refreshes it: H[1] becomes most recent
    assert host.receive_all([(BlockId(5), H[1])]) == ([], 0)
    assert host.cached_in_lru_order() == [0, 1]
    # every block owned (pinned by a swapped-out request): nothing can be kept
    table: list[BlockId] = []
    host.take_into(table, 2)
    assert host.receive_all([(BlockId(6), H[3])]) == ([], 1)
    host.check()
