"""The SHA-256 block-hash chain on its own."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cache.hashing import (
    ROOT_HASH,
    chain_root,
    extend_block_hashes,
    hash_block_tokens,
    num_hashed_blocks,
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


def test_an_extra_key_cannot_pose_as_the_cache_salt() -> None:
    # issue #21: tenant A's 17 tokens with cache_salt="tenant-A"; tpb 4, a same_tokens
    # draft: (17 - 1) // 4 = 4 blocks = 16 tokens could hit. The salt used to enter the
    # hash as the extra key ("cache_salt", "tenant-A"), so passing that key by hand hit
    # all 16; the salt now picks the chain's root instead: 0 hit tokens.
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=16))
    prompt = list(range(11, 28))  # 17 tokens: blocks 0..3 full, 1 token in block 4
    assert cache.admit(RequestId("a"), prompt, cache_salt="tenant-A") == 0
    forged = (("cache_salt", "tenant-A"),)
    assert cache.admit(RequestId("b"), prompt, extra_keys=forged) == 0
    assert cache.admit(RequestId("c"), prompt, cache_salt="tenant-A") == 16  # 4 x 4
    cache.check_invariants()


_KEY_ATOMS = st.one_of(
    st.text(max_size=10), st.integers(), st.binary(max_size=6), st.booleans(), st.none()
)
_KEYS = st.lists(
    st.recursive(_KEY_ATOMS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=5),
    max_size=3,
).map(tuple)


@settings(max_examples=150, deadline=None)
@given(salt=st.text(max_size=10), salted_keys=_KEYS, data=st.data())
def test_no_extra_keys_reproduce_a_salted_chain(
    salt: str, salted_keys: tuple[Hashable, ...], data: st.DataObject
) -> None:
    # a salted prompt of 9 tokens (2 full blocks of 4) is cached; an unsalted prompt of
    # the same tokens with any extra keys (the old encoding of the salt among them)
    # hits none of its (9 - 1) // 4 = 2 blocks
    forged = data.draw(
        st.one_of(st.just((("cache_salt", salt), *salted_keys)), _KEYS), label="forged"
    )
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8))
    prompt = list(range(9))
    cache.admit(RequestId("tenant"), prompt, extra_keys=salted_keys, cache_salt=salt)
    assert cache.admit(RequestId("forger"), prompt, extra_keys=forged) == 0
    # and the hashes themselves: no block of one chain is a block of the other
    salted: list[BlockHash] = []
    extend_block_hashes(salted, prompt, 4, salted_keys, root=chain_root(salt))
    plain: list[BlockHash] = []
    extend_block_hashes(plain, prompt, 4, forged)
    assert len(salted) == len(plain) == 2 and not set(salted) & set(plain)


def test_the_salted_root() -> None:
    # by hand: SHA-256 of the domain string, a NUL byte and the UTF-8 salt
    want = hashlib.sha256(b"kvbudget prefix cache salted root\x00tenant-A").digest()
    assert chain_root("tenant-A") == want
    assert chain_root(None) == ROOT_HASH
    assert chain_root("") != ROOT_HASH  # an empty salt is still a salt
    assert chain_root("\ud800") != chain_root("\ufffd")  # lone surrogates stay distinct


def test_a_chain_with_next_covers_the_token_after_each_block() -> None:
    # by hand, tpb 2, tokens 1..5: block 0 = SHA-256(root || 1, 2 || 3), block 1 =
    # SHA-256(block 0 || 3, 4 || 5); (5 - 1) // 2 = 2 blocks, block 2 waits for token 6
    first = hashlib.sha256(ROOT_HASH + array("q", [1, 2, 3]).tobytes()).digest()
    second = hashlib.sha256(first + array("q", [3, 4, 5]).tobytes()).digest()
    tokens = [1, 2, 3, 4, 5]
    for packed in (None, array("q", tokens).tobytes()):
        hashes: list[BlockHash] = []
        assert extend_block_hashes(hashes, tokens, 2, packed=packed, with_next=True) == 2
        assert hashes == [first, second]
    assert extend_block_hashes(hashes, [*tokens, 6], 2, with_next=True) == 0  # 6 is in block 2
    assert extend_block_hashes(hashes, [*tokens, 6, 7], 2, with_next=True) == 1
    assert hashes[2] == hash_block_tokens(second, [5, 6, 7])
    assert num_hashed_blocks(7, 2, with_next=True) == 3
    assert num_hashed_blocks(6, 2, with_next=True) == 2
    assert num_hashed_blocks(6, 2, with_next=False) == 3
    assert num_hashed_blocks(0, 2, with_next=True) == 0
