"""Token ids entering the cache: ints (or int-likes, converted) in the vocabulary."""

from __future__ import annotations

from array import array

import pytest

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
