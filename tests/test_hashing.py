"""The SHA-256 block-hash chain on its own."""

from __future__ import annotations

import hashlib
from array import array

from kvbudget.cache.hashing import (
    ROOT_HASH,
    extend_block_hashes,
    hash_block_tokens,
    valid_extra_keys,
)
from kvbudget.cache.ids import BlockHash


def test_the_chain_is_sha256_of_parent_tokens_and_keys() -> None:
    # by hand: SHA-256(root || tokens as little-endian int64), then the next block
    first = hashlib.sha256(ROOT_HASH + array("q", [1, 2]).tobytes()).digest()
    assert hash_block_tokens(ROOT_HASH, [1, 2]) == first
    second = hashlib.sha256(first + array("q", [3, 4]).tobytes()).digest()
    hashes: list[BlockHash] = []
    assert extend_block_hashes(hashes, [1, 2, 3, 4, 5], 2) == 2  # the partial block waits
    assert hashes == [first, second]
    assert extend_block_hashes(hashes, [1, 2, 3, 4, 5, 6], 2) == 1  # only the new one
    keyed = hash_block_tokens(ROOT_HASH, [1, 2], ("lora",))
    assert (
        keyed
        == hashlib.sha256(
            ROOT_HASH + array("q", [1, 2]).tobytes() + b"\x00" + repr(("lora",)).encode()
        ).digest()
    )


def test_extra_keys_must_have_a_deterministic_repr() -> None:
    assert valid_extra_keys(("a", 1, b"x", None, True, ("nested", 2)))
    assert not valid_extra_keys("lora")  # a string is not a tuple of keys
    assert not valid_extra_keys((1.5,))
    assert not valid_extra_keys((object(),))
