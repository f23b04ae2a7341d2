"""Per-request state: what the coordinator keeps for each admitted request.

* :class:`SeqBlocks`: one request's block ids in one role (kv table, window tables,
  recurrent-state slot). Owned by the coordinator, mutated by that role's
  :class:`~kvbudget.cache.manager.RoleManager`.
* :class:`Request`: the request's verified tokens, their block hashes, its lookahead and
  one :class:`SeqBlocks` per role.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kvbudget.cache.ids import BlockHash, BlockId

M = TypeVar("M")  # the role manager type (RoleManager); kept generic so this module
# depends on no manager


@dataclass(slots=True)
class SeqBlocks:
    """One request's blocks in one role. Owned by the coordinator, mutated by the manager.

    ``table[i]`` holds tokens ``i*tpb .. (i+1)*tpb - 1`` (GPU blocks, or host blocks while
    the request is swapped out). ``window_tables[g]`` holds the window group's blocks
    ``window_first[g] ..``; ``slot`` is the recurrent-state slot.
    """

    table: list[BlockId] = field(default_factory=list)
    window_tables: list[list[BlockId]] = field(default_factory=list)
    window_first: list[int] = field(default_factory=list)
    slot: BlockId | None = None


class Request(Generic[M]):
    """A request's shared state: its verified tokens, lookahead and per-role blocks.

    ``tokens`` are the verified tokens (prompt plus committed); ``hashes`` the chained
    hashes of their full blocks (kept only while prefix reuse is on); ``num_reserved``
    the unverified lookahead tokens it holds room for; ``seqs[r]`` its blocks in role
    ``r``; ``parts`` pairs each role's manager with those blocks for the hot loops;
    ``swapped`` is True while its tables hold host blocks.
    """

    __slots__ = ("extra_keys", "hashes", "num_reserved", "parts", "seqs", "swapped", "tokens")

    def __init__(
        self,
        tokens: list[int],
        extra_keys: tuple[Hashable, ...],
        managers: tuple[M, ...],
    ) -> None:
        self.tokens = tokens
        self.extra_keys = extra_keys
        self.hashes: list[BlockHash] = []
        self.num_reserved = 0
        self.seqs: tuple[SeqBlocks, ...] = tuple(SeqBlocks() for _ in managers)
        self.parts: tuple[tuple[M, SeqBlocks], ...] = tuple(zip(managers, self.seqs, strict=True))
        self.swapped = False
