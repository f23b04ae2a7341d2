"""A prompt joined from a shared prefix (CheckedIds.join of a slice) has that prefix's
block hashes from a memo kept on the prefix: the same hashes as hashing the prompt
itself (kvbudget.cache.hashing.extend_block_hashes), computed once per prefix."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_scheduling import cache_of
from test_sim_replay import TPB

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cache.hashing import ROOT_HASH, chain_root, extend_block_hashes
from kvbudget.cache.ids import BlockHash
from kvbudget.cache.tokens import CheckedIds


@given(
    head=st.integers(0, 80),
    used=st.integers(0, 80),
    own=st.integers(0, 40),
    tpb=st.sampled_from([1, 4, 16]),
    with_next=st.booleans(),
    salt=st.sampled_from([None, "tenant"]),
    keys=st.sampled_from([(), ("lora",)]),
)
def test_head_hashes_are_the_prompt_s_own_first_hashes(
    head: int,
    used: int,
    own: int,
    tpb: int,
    with_next: bool,
    salt: str | None,
    keys: tuple[str, ...],
) -> None:
    group = CheckedIds.of([(7 * k + 3) % 50 for k in range(head)])
    prompt = CheckedIds.join([group.slice(min(used, head)), CheckedIds.of([99] * own)])
    root = chain_root(salt)
    want: list[BlockHash] = []
    extend_block_hashes(want, prompt.ids, tpb, keys, root=root, with_next=with_next)
    got = prompt.head_hashes(tpb, with_next, keys, root)
    # the blocks within the prefix's first min(used, head) ids (and, with_next, the id
    # after each block): (tokens - with_next) // tpb of them
    assert len(got) == max(0, min(used, head) - with_next) // tpb
    assert got == want[: len(got)]


def test_a_prefix_s_block_hashes_are_computed_once() -> None:
    """Two prompts on one 40-token prefix (EAGLE3: a block's hash covers the next token,
    so blocks 0 and 1 lie inside it: (40 - 1) // 16 = 2): the second prompt's first two
    hashes are the memo's own objects, and both caches report what admitting plain
    lists reports."""
    group = CheckedIds.of(list(range(100, 140)))
    joined, plain = cache_of(16), cache_of(16)
    for i in range(2):
        rid = RequestId(f"r{i}")
        own = [1 + i, 7, 7, 7, 7]
        joined.admit(rid, CheckedIds.join([group.slice(40), CheckedIds.of(own)]))
        plain.admit(rid, [*range(100, 140), *own])
    assert list(group._chains) == [(TPB, True, (), ROOT_HASH)]
    memo = group._chains[(TPB, True, (), ROOT_HASH)]
    assert len(memo) == 2  # the whole 40-token group: (40 - 1) // 16
    second = joined._requests[RequestId("r1")].hashes
    assert second[0] is memo[0] and second[1] is memo[1]
    assert second == plain._requests[RequestId("r1")].hashes
    assert joined.stats() == plain.stats()
    assert joined.stats().hit_tokens == 2 * TPB  # r1 hit the prefix's two blocks
    joined.check_invariants()


def test_a_prefix_memo_is_per_hashing_setting() -> None:
    """A cache that hashes without the next token (same_tokens) keeps its own memo
    entry on the same prefix: 40 tokens are 2 full blocks either way."""
    group = CheckedIds.of(list(range(100, 140)))
    eagle = cache_of(16)
    same = SpecDecodeCache.from_plan(eagle.plan, draft_prefix="same_tokens")
    for cache in (eagle, same):
        cache.admit(RequestId("a"), CheckedIds.join([group.slice(40), CheckedIds.of([5])]))
    assert sorted(k[1] for k in group._chains) == [False, True]
    plain = SpecDecodeCache.from_plan(eagle.plan, draft_prefix="same_tokens")
    plain.admit(RequestId("a"), [*range(100, 140), 5])
    assert same._requests[RequestId("a")].hashes == plain._requests[RequestId("a")].hashes
