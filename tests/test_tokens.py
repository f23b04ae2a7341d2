"""Token ids entering the cache: ints (or int-likes, converted) in the vocabulary."""

from __future__ import annotations

from array import array

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cache.tokens import checked_prompt, checked_tokens
from kvbudget.errors import InvalidCacheOperationError


class Index:
    """An int-like value (as numpy integers are): usable as a token id via __index__."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_a_prompt_comes_back_as_ints_and_their_int64_bytes() -> None:
    for given in ([5, 0, 9], (5, 0, 9), range(5, 8)):
        tokens, packed = checked_prompt(given, "r", 10)
        assert tokens == list(given)
        assert packed == array("q", given).tobytes()  # 8 bytes per id, native order
    tokens, packed = checked_prompt([Index(3), 4], "r", 10)
    assert tokens == [3, 4] and all(type(t) is int for t in tokens)
    assert checked_tokens((Index(7),), "the accepted tokens", "r", 10) == [7]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([1, 2.0], "must be int token ids; got 2.0 of type float"),
        ([1, "2"], "got '2' of type str"),
        ([1, 10], r"in \[0, 10\) \(the target's vocabulary\); got 10"),
        ([-1], "got -1"),
        ([2**70], f"got {2**70}"),  # past int64: refused, not wrapped
        ("abc", "must be a sequence of int token ids"),
        (7, "must be a sequence of int token ids"),
    ],
)
def test_a_bad_prompt_names_its_first_bad_element(given: object, message: str) -> None:
    with pytest.raises(InvalidCacheOperationError, match=message):
        checked_prompt(given, "r", 10)


def test_bool_token_ids_are_refused_and_change_nothing() -> None:
    # bool is an int subclass (True == 1): it used to pass as token 1 (or 0)
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8))
    rid = RequestId("r")
    before = cache.stats()
    for prompt in ([5, True, 7], (False,), [5] * 8 + [True]):
        with pytest.raises(InvalidCacheOperationError, match=r"got (True|False) of type bool"):
            cache.admit(rid, prompt)
    assert cache.stats() == before and rid not in cache
    cache.admit(rid, [5, 6, 7])  # 3 tokens: one block
    cache.reserve(rid, 2)
    before = cache.stats()
    for accepted in ([True], (8, False)):
        with pytest.raises(InvalidCacheOperationError, match="of type bool"):
            cache.commit(rid, accepted)
    assert cache.stats() == before
    assert (cache.num_tokens(rid), cache.num_reserved(rid)) == (3, 2)
    cache.check_invariants()


def test_checked_ids_are_checked_once_and_admitted_by_their_bound() -> None:
    import pytest

    import kvbudget
    from kvbudget.cache import RequestId, SpecDecodeCache
    from kvbudget.cache.tokens import CheckedIds
    from kvbudget.errors import InvalidCacheOperationError

    a, b = CheckedIds.of([5, 7, 9]), CheckedIds.of(range(3))
    joined = CheckedIds.join([a.slice(2), b])
    assert list(joined.ids) == [5, 7, 0, 1, 2] and joined.bound == 10  # max id 9, + 1
    with pytest.raises(InvalidCacheOperationError, match="bool"):
        CheckedIds.of([1, True])
    with pytest.raises(InvalidCacheOperationError):
        CheckedIds.of([-1])
    cache = SpecDecodeCache.from_plan(kvbudget.plan(kv_budget="1GiB", max_seq_len=1024))
    assert cache.admit(RequestId("r"), joined) == 0 and cache.num_tokens(RequestId("r")) == 5
    vocab = cache.plan.vocab_size
    assert vocab is not None
    too_big = CheckedIds.of([1, vocab])
    with pytest.raises(InvalidCacheOperationError, match=f"got {vocab}"):
        cache.admit(RequestId("s"), too_big)
    assert RequestId("s") not in cache


def test_a_prompt_joined_again_hashes_as_its_ids() -> None:
    """A joined prompt joined again (a recomputed request's prompt and its outputs)
    keeps only the ids its first part took from the shared head as the head's: its
    memoized head hashes are the hashes of its own ids (a head of 8 ids, a prompt of
    its first 4 and 4 others, then 4 more: blocks of 2 tokens)."""
    from kvbudget.cache import ROOT_HASH
    from kvbudget.cache.hashing import extend_block_hashes
    from kvbudget.cache.tokens import CheckedIds

    head = CheckedIds.of(range(10, 18))
    prompt = CheckedIds.join([head.slice(4), CheckedIds.of([1, 2, 3, 4])])
    again = CheckedIds.join([prompt, CheckedIds.of([1, 1, 1, 1])])
    cut = again.slice(3)
    for ids in (prompt, again, cut):
        expected: list = []  # type: ignore[type-arg]
        extend_block_hashes(expected, ids.ids, 2, (), root=ROOT_HASH, with_next=False)
        memo = ids.head_hashes(2, False, (), ROOT_HASH)
        assert memo == expected[: len(memo)]
        assert len(memo) == min(4, len(ids)) // 2  # the head's 4 ids: 2 blocks, 1 cut
