"""Chained block hashes for prefix reuse: SHA-256, so a hit never serves another prefix.

``hash(block i) = SHA-256(hash(block i - 1) || token ids of block i as int64 || extra
keys)``: equal hashes mean equal whole prefixes (and equal extra keys) unless SHA-256
collides, which no one knows how to make happen. A fast non-cryptographic hash (Python's
``hash``: ``hash(-1) == hash(-2)``, ids ``k`` and ``k + 2**61 - 1`` alike) would let one
request's prompt hit blocks written for another's (vLLM moved its prefix hashes to
SHA-256 for the same reason). Extra keys (a LoRA name, ...) are strings, ints, bytes,
bools, None or tuples of those, encoded by ``repr`` (deterministic for these types), and
enter every block's hash.

A tenant's ``cache_salt`` is not an extra key: it picks the chain's root
(:func:`chain_root`, the parent of block 0), a SHA-256 of its own domain string and the
salt. Every unsalted chain starts at :data:`ROOT_HASH`, so no choice of extra keys
reproduces a salted chain (block 0's SHA-256 input would have to start with the salted
root), and two salts never share a root."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable, Sequence

from kvbudget.cache.ids import BlockHash

ROOT_HASH = BlockHash(hashlib.sha256(b"kvbudget prefix cache root").digest())
"""The parent of the first block of every sequence without a ``cache_salt``."""

_SALT_DOMAIN = b"kvbudget prefix cache salted root\x00"

_KEY_TYPES = (str, int, bytes, bool, type(None))


def valid_extra_keys(extra_keys: object) -> bool:
    """Whether ``extra_keys`` is a tuple of values whose ``repr`` is deterministic."""

    def ok(value: object) -> bool:
        if isinstance(value, tuple):
            return all(ok(v) for v in value)
        return isinstance(value, _KEY_TYPES)

    return isinstance(extra_keys, tuple) and ok(extra_keys)


def chain_root(cache_salt: str | None) -> BlockHash:
    """The parent of block 0 of a sequence with ``cache_salt``: :data:`ROOT_HASH` for
    None, else ``SHA-256(b"kvbudget prefix cache salted root\\x00" || UTF-8 salt)``
    (lone surrogates kept as their code points, so the encoding stays one-to-one). Pure."""
    if cache_salt is None:
        return ROOT_HASH
    salt = cache_salt.encode("utf-8", "surrogatepass")
    return BlockHash(hashlib.sha256(_SALT_DOMAIN + salt).digest())


def _suffix(extra_keys: tuple[Hashable, ...]) -> bytes:
    return b"\x00" + repr(extra_keys).encode() if extra_keys else b""


def hash_block_tokens(
    parent: BlockHash, token_ids: Sequence[int], extra_keys: tuple[Hashable, ...] = ()
) -> BlockHash:
    """The hash of one full block whose predecessor hashes to ``parent``. Pure.

    ``token_ids``: the block's tokens (and the token after them, for a chain hashed
    ``with_next``, see :func:`extend_block_hashes`). Token ids must fit in int64 (the
    cache checks them against the vocabulary first).
    """
    digest = hashlib.sha256(parent)
    digest.update(array("q", token_ids).tobytes())
    digest.update(_suffix(extra_keys))
    return BlockHash(digest.digest())


def extend_block_hashes(
    hashes: list[BlockHash],
    token_ids: Sequence[int],
    tokens_per_block: int,
    extra_keys: tuple[Hashable, ...] = (),
    packed: bytes | None = None,
    root: BlockHash = ROOT_HASH,
    *,
    with_next: bool = False,
) -> int:
    """Append the hashes of the full blocks of ``token_ids`` not yet in ``hashes``.

    Mutates ``hashes`` (a prefix of the chain of ``token_ids`` from ``root``, see
    :func:`chain_root`); returns how many were appended. Partial trailing blocks are
    never hashed. ``with_next``: block ``i``'s hash also covers the token after it (the
    first of block ``i + 1``), so a block is hashed only once that token is there: the
    chain of a draft whose K/V at a position reads the next token (module docstring).
    ``packed``, when given, is all of ``token_ids`` as int64 bytes
    (``array("q", token_ids).tobytes()``), saving the packing.
    """
    start = len(hashes)
    end = (len(token_ids) - with_next) // tokens_per_block
    if end <= start:
        return 0
    step = 8 * tokens_per_block
    span = step + 8 * with_next  # the block's tokens, and the next one with_next
    if packed is None:
        packed = array(
            "q", token_ids[start * tokens_per_block : end * tokens_per_block + with_next]
        ).tobytes()
        offset = 0
    else:
        offset = start * step
    parent = hashes[-1] if hashes else root
    suffix = _suffix(extra_keys)
    sha256 = hashlib.sha256
    append = hashes.append
    # one call per block: SHA-256(parent || tokens || suffix), as hash_block_tokens
    if suffix:
        for i in range(offset, offset + (end - start) * step, step):
            parent = BlockHash(sha256(parent + packed[i : i + span] + suffix).digest())
            append(parent)
    else:
        for i in range(offset, offset + (end - start) * step, step):
            parent = sha256(parent + packed[i : i + span]).digest()  # type: ignore[assignment]
            append(parent)
    return end - start


def num_hashed_blocks(num_tokens: int, tokens_per_block: int, *, with_next: bool) -> int:
    """How many blocks of ``num_tokens`` tokens :func:`extend_block_hashes` hashes. Pure."""
    return max(0, num_tokens - with_next) // tokens_per_block
