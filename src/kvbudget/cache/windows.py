"""Sliding-window pools of one role: the blocks a sequence's next token can still see.

Each sliding-window group of a :class:`~kvbudget.plan_types.ManagerPlan` gets one GPU
:class:`BlockPool` of ``blocks_per_seq x max_batch_size`` blocks. A sequence of
``num_committed`` verified tokens (and ``num_total`` with its lookahead) keeps, in group
``g``, the blocks ``first .. end - 1`` of :meth:`WindowPools.span`: from the block of the
oldest token its next token attends to, through the block of its last reserved token.
Blocks that leave the window are released as the sequence grows; window blocks are never
hashed, so they are never cached or shared.

The per-sequence tables live in :class:`~kvbudget.cache.request.SeqBlocks`
(``window_first[g]`` and ``window_tables[g]``). Like the manager, :meth:`shortage` only
reads and the mutating methods assume it returned None.
"""

from __future__ import annotations

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.shortage import Shortage
from kvbudget.plan_types import ManagerPlan


class WindowPools:
    """The sliding-window groups of one role and their GPU pools; see the module docstring."""

    __slots__ = ("groups", "max_batch_size", "pools", "role", "tokens_per_block")

    def __init__(self, plan: ManagerPlan) -> None:
        """One pool per group of ``plan.window_groups`` (the caller skips plans with none)."""
        self.role = plan.role
        self.tokens_per_block = plan.tokens_per_block
        self.max_batch_size = plan.max_batch_size
        self.groups = plan.window_groups
        self.pools: tuple[BlockPool, ...] = tuple(
            BlockPool(
                f"{plan.role}/gpu/window{g.window_tokens}", g.blocks_per_seq * self.max_batch_size
            )
            for g in plan.window_groups
        )

    def span(self, g: int, num_committed: int, num_total: int) -> tuple[int, int]:
        """First and one-past-last block index group ``g`` keeps for a sequence of
        ``num_committed`` verified and ``num_total`` held tokens. Pure."""
        tpb = self.tokens_per_block
        lo = max(0, num_committed - self.groups[g].window_tokens + 1)
        return lo // tpb, -(-num_total // tpb)

    def shortage(
        self, seq: SeqBlocks | None, num_committed: int, num_total: int
    ) -> Shortage | None:
        """Why ``seq`` (``None``: a new sequence) cannot hold its windows at
        ``num_committed`` / ``num_total`` tokens, or None. Reads only."""
        for g, pool in enumerate(self.pools):
            first, end = self.span(g, num_committed, num_total)
            if seq is None:
                extra = end - first
            else:
                extra = end - (seq.window_first[g] + len(seq.window_tables[g]))
            if extra > pool.num_free:
                return Shortage(
                    role=self.role,
                    tier="gpu",
                    pool=f"window{self.groups[g].window_tokens}",
                    needed=extra,
                    available=pool.num_free,
                    message=(
                        f"role {self.role} needs {extra} blocks of its "
                        f"{self.groups[g].window_tokens}-token window pool, "
                        f"{pool.num_free} are free ({pool.num_blocks} = blocks_per_seq x "
                        f"max_batch_size {self.max_batch_size}); admit fewer sequences or "
                        "raise max_batch_size"
                    ),
                )
        return None

    def admit(self, seq: SeqBlocks, num_tokens: int) -> None:
        """Fill the empty window tables of ``seq`` for a prompt of ``num_tokens``.
        Mutates ``seq`` and the pools. Precondition: :meth:`shortage` (``seq=None``)
        returned None."""
        for g, pool in enumerate(self.pools):
            first, end = self.span(g, num_tokens, num_tokens)
            seq.window_first.append(first)
            seq.window_tables.append([pool.take()[0] for _ in range(end - first)])

    def grow(self, seq: SeqBlocks, num_total: int) -> None:
        """Append window blocks until every table of ``seq`` reaches ``num_total`` tokens.
        Precondition: :meth:`shortage` returned None."""
        end = -(-num_total // self.tokens_per_block)
        for g, pool in enumerate(self.pools):
            wt = seq.window_tables[g]
            while seq.window_first[g] + len(wt) < end:
                wt.append(pool.take()[0])

    def shrink(self, seq: SeqBlocks, num_committed: int) -> None:
        """Release the blocks past ``num_committed`` tokens (rolled-back lookahead, tail
        first) and those that left the window at its head. Never fails."""
        for g, pool in enumerate(self.pools):
            first, end = self.span(g, num_committed, num_committed)
            wt = seq.window_tables[g]
            while seq.window_first[g] + len(wt) > end:
                pool.release(wt.pop())
            drop = first - seq.window_first[g]
            if drop > 0:
                for b in wt[:drop]:
                    pool.release(b)
                del wt[:drop]
                seq.window_first[g] = first

    def release_all(self, seq: SeqBlocks) -> None:
        """Release every window block of ``seq``, tail first, and empty its tables."""
        for g, pool in enumerate(self.pools):
            for b in reversed(seq.window_tables[g]):
                pool.release(b)
        seq.window_tables.clear()
        seq.window_first.clear()
