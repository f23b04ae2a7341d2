"""Per-request state: what the coordinator keeps for each admitted request.

* :class:`SeqBlocks`: one request's own blocks in one role (window tables, recurrent-state
  slot, the cached states to write). Owned by the coordinator, mutated by that role's
  :class:`~kvbudget.cache.manager.RoleManager`.
* :class:`Request`: the request's verified tokens, their block hashes, its lookahead, its
  kv block table (one for every role, see :mod:`kvbudget.cache.kv_tiers`) and one
  :class:`SeqBlocks` per role.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kvbudget.cache.ids import BlockHash, BlockId

M = TypeVar("M")  # the role manager type (RoleManager); kept generic so this module
# depends on no manager


@dataclass(slots=True)
class SeqBlocks:
    """One request's own blocks in one role. Owned by the coordinator, mutated by the
    role's manager.

    ``window_tables[g]`` holds the window group's blocks ``window_first[g] ..``; ``slot``
    is the recurrent-state slot; ``saves`` the ``(boundary tokens, checkpoint)`` pairs the
    last admit or commit asked the engine to write (the state after that many tokens).
    """

    window_tables: list[list[BlockId]] = field(default_factory=list)
    window_first: list[int] = field(default_factory=list)
    slot: BlockId | None = None
    saves: list[tuple[int, BlockId]] = field(default_factory=list)


class Request(Generic[M]):
    """A request's shared state: its verified tokens, lookahead and blocks.

    ``tokens`` are the verified tokens (prompt plus committed, int64); ``hashes`` the chained
    hashes of their full blocks from ``root`` (the ``cache_salt``'s chain root, see
    :func:`~kvbudget.cache.hashing.chain_root`; kept only while prefix reuse is on);
    ``num_reserved`` the unverified lookahead tokens it holds room for; ``table[i]`` the kv block of
    tokens ``i*tpb .. (i+1)*tpb - 1`` in every role (GPU blocks, or host blocks while
    ``swapped``); ``seqs[r]`` its own blocks in role ``r``; ``parts`` pairs each role's
    manager with those blocks, for the roles that have windows or state only (``fixed``
    managers; the hot loops skip the others).
    """

    __slots__ = (
        "extra_keys",
        "hashes",
        "num_reserved",
        "parts",
        "root",
        "seqs",
        "swapped",
        "table",
        "tokens",
    )

    def __init__(
        self,
        tokens: array[int],
        extra_keys: tuple[Hashable, ...],
        root: BlockHash,
        managers: tuple[M, ...],
        fixed: tuple[bool, ...],
    ) -> None:
        self.tokens = tokens
        self.extra_keys = extra_keys
        self.root = root
        self.hashes: list[BlockHash] = []
        self.num_reserved = 0
        self.table: list[BlockId] = []
        self.seqs: tuple[SeqBlocks, ...] = tuple(SeqBlocks() for _ in managers)
        self.parts: tuple[tuple[M, SeqBlocks], ...] = tuple(
            (m, s) for m, s, f in zip(managers, self.seqs, fixed, strict=True) if f
        )
        self.swapped = False
