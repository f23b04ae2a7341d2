"""Chained block hashes for prefix reuse.

``hash(block i) = H(hash(block i - 1), token ids of block i, extra keys)``, so equal hashes
mean equal whole prefixes (up to a 64-bit collision, probability ~ n^2 / 2^64 for n
cached blocks). Hashes use Python's ``hash`` of int tuples, which is stable across runs;
extra keys (a LoRA name, a cache salt) may be any hashable value (``str`` keys are salted
per process, which is fine: hashes never leave the process).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kvbudget.cache.ids import BlockHash

ROOT_HASH = BlockHash(0x6B76627564676574)
"""The parent of the first block of every sequence."""


def hash_block_tokens(
    parent: BlockHash, token_ids: Sequence[int], extra_keys: tuple[Hashable, ...] = ()
) -> BlockHash:
    """The hash of one full block whose predecessor hashes to ``parent``. Pure."""
    if extra_keys:
        return BlockHash(hash((parent, tuple(token_ids), extra_keys)))
    return BlockHash(hash((parent, tuple(token_ids))))


def extend_block_hashes(
    hashes: list[BlockHash],
    token_ids: Sequence[int],
    tokens_per_block: int,
    extra_keys: tuple[Hashable, ...] = (),
) -> int:
    """Append the hashes of the full blocks of ``token_ids`` not yet in ``hashes``.

    Mutates ``hashes`` (a prefix of the chain of ``token_ids``); returns how many were
    appended. Partial trailing blocks are never hashed.
    """
    start = len(hashes)
    end = len(token_ids) // tokens_per_block
    parent = hashes[-1] if hashes else ROOT_HASH
    for i in range(start, end):
        lo = i * tokens_per_block
        block = tuple(token_ids[lo : lo + tokens_per_block])
        parent = BlockHash(hash((parent, block, extra_keys) if extra_keys else (parent, block)))
        hashes.append(parent)
    return end - start
