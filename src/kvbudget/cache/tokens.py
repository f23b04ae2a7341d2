"""Token ids entering the cache: checked once, stored as plain ints.

A token id is an int (or an int-like value such as a numpy integer, converted with
``__index__``) in ``[0, vocab_size)`` of the plan's target; not a bool (an int subclass
in Python, ``True == 1``: a bool among token ids is a caller's bug, not token 1). A
prompt is packed to int64 bytes on the way in, which checks int-ness at C speed and is
exactly what the block hashes read (:mod:`kvbudget.cache.hashing`), so a prompt is
converted once.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbudget.cache.hashing import extend_block_hashes, num_hashed_blocks
from kvbudget.cache.ids import BlockHash
from kvbudget.errors import InvalidCacheOperationError


def checked_tokens(token_ids: Any, what: str, request_id: object, vocab_size: int) -> list[int]:
    """``token_ids`` as a new list of ints, each in ``[0, vocab_size)``; raises
    InvalidCacheOperationError naming the first bad element (or a non-sequence)."""
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Sequence):
        raise InvalidCacheOperationError(
            f"{what} of request {request_id!r} must be a sequence of int token ids, "
            f"got {token_ids!r}"
        )
    out: list[int] = []
    for t in token_ids:
        if type(t) is not int:
            if isinstance(t, bool):
                raise InvalidCacheOperationError(
                    f"{what} of request {request_id!r} must be int token ids; got {t!r} of "
                    "type bool"
                )
            try:
                t = operator.index(t)
            except TypeError:
                raise InvalidCacheOperationError(
                    f"{what} of request {request_id!r} must be int token ids; got {t!r} of "
                    f"type {type(t).__name__}"
                ) from None
        if not 0 <= t < vocab_size:
            raise InvalidCacheOperationError(
                f"{what} of request {request_id!r} must be token ids in [0, {vocab_size}) "
                f"(the target's vocabulary); got {t}"
            )
        out.append(t)
    return out


def checked_prompt(token_ids: Any, request_id: object, vocab_size: int) -> tuple[list[int], bytes]:
    """A prompt as (a new list of int token ids, their int64 bytes): the ids of
    :func:`checked_prompt_ids` as a list."""
    ids, packed = checked_prompt_ids(token_ids, request_id, vocab_size)
    return ids.tolist(), packed


def checked_prompt_ids(
    token_ids: Any, request_id: object, vocab_size: int
) -> tuple[array[int], bytes]:
    """A prompt as (a new ``array("q")`` of its token ids, their int64 bytes); see
    :func:`checked_tokens` for the rules and errors. Lists, tuples and ranges take a
    C-speed path (pack, then min/max; ``array`` takes bools as ints, so their types are
    looked up too; an ``array("q")`` is packed already; a :class:`CheckedIds` is checked
    already, its bound only compared, and copied as it is) and fall back to the element
    loop only to name a bad element."""
    kind = type(token_ids)
    if kind is CheckedIds:
        if token_ids.bound <= vocab_size:
            ids = token_ids.ids[:]
            return ids, ids.tobytes()
        token_ids = token_ids.ids  # name the id outside the vocabulary
        kind = array
    if (
        kind is array
        and token_ids.typecode == "q"
        and (not token_ids or (min(token_ids) >= 0 and max(token_ids) < vocab_size))
    ):
        ids = token_ids[:]
        return ids, ids.tobytes()
    if kind is range or (kind in (list, tuple) and bool not in set(map(type, token_ids))):
        try:
            packed = array("q", token_ids)
        except (TypeError, OverflowError):
            packed = None
        if packed is not None and (not packed or (min(packed) >= 0 and max(packed) < vocab_size)):
            return packed, packed.tobytes()
    ids = array("q", checked_tokens(token_ids, "the prompt", request_id, vocab_size))
    return ids, ids.tobytes()


@dataclass(frozen=True, init=False, eq=False)
class CheckedIds:
    """Token ids checked once, packed as int64, with a bound on them: every id is in
    ``[0, bound)``. :meth:`SpecDecodeCache.admit <kvbudget.SpecDecodeCache.admit>` takes
    one without checking its ids again (only ``bound`` against the vocabulary), and
    :meth:`join` builds a prompt from checked parts (a shared prefix, a request's own
    tokens) without reading them: for callers that admit many prompts made of the same
    pieces (the simulator). Build with :meth:`of` or :meth:`join`.

    A joined prompt remembers the ids its first part was sliced from (``head``) and how
    many of them it starts with; :meth:`head_hashes` gives the chain hashes of the
    blocks inside that part from a memo the head keeps (one per hashing setting), so
    prompts made on one shared prefix hash its blocks once. The ids must not be changed
    after they are checked (neither the bound nor the memo would hold)."""

    ids: array[int]
    bound: int
    head: CheckedIds | None = field(repr=False)  # what its first part was sliced from
    head_tokens: int = field(repr=False)  # how many of those ids it starts with
    _chains: dict[tuple[int, bool, tuple[Hashable, ...], bytes], list[BlockHash]] = field(
        repr=False
    )

    @classmethod
    def of(cls, token_ids: Sequence[int]) -> CheckedIds:
        """``token_ids`` checked: non-negative ints (no bools), packed. Raises
        InvalidCacheOperationError naming the first bad element."""
        ids, _ = checked_prompt_ids(token_ids, "CheckedIds", 2**63)
        return cls._make(ids, max(ids, default=-1) + 1)

    @classmethod
    def join(cls, parts: Sequence[CheckedIds]) -> CheckedIds:
        """The parts' ids one after another (copied), bound the largest of theirs; its
        ``head`` is what the first part was sliced from (or that part)."""
        ids = array("q")
        for part in parts:
            ids.extend(part.ids)
        out = cls._make(ids, max((part.bound for part in parts), default=0))
        if parts:
            first = parts[0]
            if first.head is None:
                object.__setattr__(out, "head", first)
                object.__setattr__(out, "head_tokens", len(first))
            else:  # only the ids ``first`` took from its head are the head's
                object.__setattr__(out, "head", first.head)
                object.__setattr__(out, "head_tokens", first.head_tokens)
        return out

    def __len__(self) -> int:
        return len(self.ids)

    def slice(self, stop: int) -> CheckedIds:
        """The first ``stop`` ids (the bound kept: still an upper bound); its ``head`` is
        this one's (or this one), so a prompt joined from it reuses the head's memo."""
        out = CheckedIds._make(self.ids[:stop], self.bound)
        if self.head is None:
            object.__setattr__(out, "head", self)
            object.__setattr__(out, "head_tokens", len(out))
        else:  # only the ids this one took from its head are the head's
            object.__setattr__(out, "head", self.head)
            object.__setattr__(out, "head_tokens", min(len(out), self.head_tokens))
        return out

    def head_hashes(
        self,
        tokens_per_block: int,
        with_next: bool,
        extra_keys: tuple[Hashable, ...],
        root: BlockHash,
    ) -> list[BlockHash]:
        """The chain hashes (:func:`~kvbudget.cache.hashing.extend_block_hashes` with
        these settings) of the blocks within the first ``head_tokens`` ids, the token
        after each block too with ``with_next``: the same as this one's own first
        hashes, since these ids start with them. Memoized on ``head`` per setting."""
        head = self.head
        count = num_hashed_blocks(self.head_tokens, tokens_per_block, with_next=with_next)
        if head is None or not count:
            return []
        key = (tokens_per_block, with_next, extra_keys, root)
        chain = head._chains.get(key)
        if chain is None:
            chain = []
            extend_block_hashes(
                chain, head.ids, tokens_per_block, extra_keys, root=root, with_next=with_next
            )
            head._chains[key] = chain
        return chain[:count]

    @classmethod
    def _make(cls, ids: array[int], bound: int) -> CheckedIds:
        out = object.__new__(cls)
        object.__setattr__(out, "ids", ids)
        object.__setattr__(out, "bound", bound)
        object.__setattr__(out, "head", None)
        object.__setattr__(out, "head_tokens", 0)
        object.__setattr__(out, "_chains", {})
        return out
