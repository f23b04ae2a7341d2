"""kvbudget.scheduling: the admission and preemption rules the reference engine and the
simulator share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sim_replay import PAIR, TPB

import kvbudget
from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.errors import InvalidArgumentError
from kvbudget.scheduling import BatchRules, Reserved, preempt, reserve_or_preempt


def cache_of(gpu_blocks: int, host_blocks: int = 0) -> SpecDecodeCache:
    plan = kvbudget.plan(
        kv_budget=gpu_blocks * PAIR,
        host_budget=host_blocks * PAIR,
        tokens_per_block=TPB,
        max_seq_len=gpu_blocks * TPB - 3,  # the longest that fits with 3 drafts
        max_batch_size=4,
    )
    return SpecDecodeCache.from_plan(plan)


@given(
    running=st.integers(0, 5),
    swapped=st.integers(0, 2),
    preempted=st.booleans(),
    available=st.integers(0, 20),
    need=st.integers(1, 10),
    while_swapped=st.booleans(),
    watermark=st.booleans(),
)
def test_admission_rule(
    running: int,
    swapped: int,
    preempted: bool,
    available: int,
    need: int,
    while_swapped: bool,
    watermark: bool,
) -> None:
    rules = BatchRules(max_batch_size=4, admit_while_swapped=while_swapped, watermark=watermark)
    got = rules.may_admit(
        running=running,
        swapped=swapped,
        preempted=preempted,
        available_blocks=available,
        need_blocks=need,
    )
    expected = (
        not preempted
        and running < 4
        and (while_swapped or swapped == 0)
        and (not watermark or running == 0 or available - need >= running)
    )
    assert got == expected
    assert rules.may_resume(running=running, preempted=preempted) == (not preempted and running < 4)


def test_batch_rules_need_a_batch() -> None:
    with pytest.raises(InvalidArgumentError, match="max_batch_size"):
        BatchRules(max_batch_size=0, admit_while_swapped=True, watermark=False)


def test_the_youngest_is_preempted_for_the_oldest() -> None:
    cache = cache_of(3)  # 3 blocks of 16 tokens
    ids = [RequestId(f"r{i}") for i in range(3)]
    for i, rid in enumerate(ids):
        cache.admit(rid, [i + 1] * 16)  # one full block each: the cache is full
    running = list(ids)
    order: list[RequestId] = []

    def victim(rid: RequestId) -> None:
        order.append(rid)
        assert preempt(cache, rid, "recompute") == ("recompute", tuple([int(rid[1:]) + 1] * 16))
        running.remove(rid)

    # r0 needs a second block for 4 slots: r2 (the youngest) goes, its block is freed
    assert reserve_or_preempt(cache, running, ids[0], ids[0], 4, victim) is Reserved.RESERVED
    assert order == [ids[2]] and running == ids[:2]
    # r1 now needs a block too: the youngest is r1 itself
    assert reserve_or_preempt(cache, running, ids[1], ids[1], 4, victim) is Reserved.PREEMPTED
    assert order == [ids[2], ids[1]] and running == [ids[0]]


def test_a_request_alone_that_does_not_fit_changes_nothing() -> None:
    cache = cache_of(2)
    rid, other = RequestId("r0"), RequestId("r1")
    cache.admit(rid, [1] * 16)
    cache.admit(other, [2] * 16)  # holds the other block, not in the running list
    before = cache.stats()
    assert reserve_or_preempt(cache, [rid], rid, rid, 4, lambda r: None) is Reserved.ALONE
    assert cache.stats() == before and cache.num_reserved(rid) == 0


def test_a_swap_the_host_cannot_take_is_recomputed() -> None:
    cache = cache_of(4, host_blocks=0)
    rid = RequestId("r0")
    cache.admit(rid, [1] * 20)
    mode, tokens = preempt(cache, rid, "swap")
    assert (mode, len(tokens)) == ("recompute", 20) and rid not in cache
    cache = cache_of(4, host_blocks=4)
    cache.admit(rid, [1] * 20)
    assert preempt(cache, rid, "swap")[0] == "swap" and cache.is_swapped(rid)
