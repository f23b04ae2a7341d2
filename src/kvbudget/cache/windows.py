"""Sliding-window pools of one role: the blocks a sequence's next token can still see.

Each sliding-window group of a :class:`~kvbudget.plan_types.ManagerPlan` gets one GPU
:class:`BlockPool` of ``blocks_per_seq x max_batch_size`` blocks. A sequence of
``num_committed`` verified tokens (and ``num_total`` with its lookahead) keeps, in group
``g``, the blocks ``first .. end - 1`` of :meth:`WindowPools.span`: from the block of the
oldest token its next token attends to, through the block of its last reserved token.
Blocks that leave the window are released as the sequence grows.

Prefix reuse: a full window block gets the hash of its position's block (the same chain
as the growing layers), so a block released by a finished sequence, or one that slid
out of a running sequence's window, stays cached (evictable, LRU) like a full-attention
block. A prefix of ``n`` blocks is a hit for a group when the blocks its window needs at
``n x tokens_per_block`` tokens (:meth:`WindowPools.span`) are all cached
(:meth:`WindowPools.hit`); blocks that slid out before may be gone. A prompt's prefill
leaves the blocks it slides past cached too (:meth:`WindowPools.admit`), so a later
prompt that shares only its first part still finds the window at the divergence point.
The pool size bound holds: a running sequence owns at most ``blocks_per_seq`` blocks of a
group and cached blocks are evictable, so ``blocks_per_seq x max_batch_size`` blocks
always suffice.

The per-sequence tables live in :class:`~kvbudget.cache.request.SeqBlocks`
(``window_first[g]`` and ``window_tables[g]``). Like the manager, :meth:`shortage` only
reads and the mutating methods assume it returned None.
"""

from __future__ import annotations

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.ids import BlockHash
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

    def hit(self, hashes: list[BlockHash], num_hit: int) -> bool:
        """Whether every group holds, cached or owned, the blocks its window needs after a
        prefix of ``num_hit`` blocks (``hashes[first:num_hit]``). Reads only."""
        tokens = num_hit * self.tokens_per_block
        for g, pool in enumerate(self.pools):
            first, _ = self.span(g, tokens, tokens)
            by_hash = pool.hashes
            for i in range(first, num_hit):
                if hashes[i] not in by_hash:
                    return False
        return True

    def shortage(
        self,
        seq: SeqBlocks | None,
        num_committed: int,
        num_total: int,
        hashes: list[BlockHash] | None = None,
        num_hit: int = 0,
    ) -> Shortage | None:
        """Why ``seq`` (``None``: a new sequence whose first ``num_hit`` blocks of
        ``hashes`` are a hit) cannot hold its windows at ``num_committed`` /
        ``num_total`` tokens, or None. Reads only."""
        tpb = self.tokens_per_block
        for g, pool in enumerate(self.pools):
            first, end = self.span(g, num_committed, num_total)
            pinned = 0
            if seq is None:
                extra = end - first
                hit_first, _ = self.span(g, num_hit * tpb, num_hit * tpb)
                for i in range(hit_first, num_hit):  # read by the prefill, held meanwhile
                    assert hashes is not None
                    b = pool.hashes[hashes[i]]
                    extra -= i >= first
                    pinned += pool.owners(b) == 0
            else:
                extra = end - (seq.window_first[g] + len(seq.window_tables[g]))
            have = pool.num_available - pinned
            if extra > have:
                return Shortage(
                    role=self.role,
                    tier="gpu",
                    pool=f"window{self.groups[g].window_tokens}",
                    needed=extra,
                    available=have,
                    message=(
                        f"role {self.role} needs {extra} blocks of its "
                        f"{self.groups[g].window_tokens}-token window pool, "
                        f"{have} are free or evictable ({pool.num_blocks} = blocks_per_seq x "
                        f"max_batch_size {self.max_batch_size}); admit fewer sequences or "
                        "raise max_batch_size"
                    ),
                )
        return None

    def admit(self, seq: SeqBlocks, num_tokens: int, hashes: list[BlockHash], num_hit: int) -> None:
        """Fill the empty window tables of ``seq`` for a prompt of ``num_tokens`` whose
        first ``num_hit`` blocks are a hit (their cached window blocks are reused), and
        hash its full blocks. Hit blocks below the prompt's final window (read by its
        prefill only) are left cached, most recently used: run the prefill before the
        next allocation (``admit``/``reserve``), as an engine's step does. Mutates
        ``seq`` and the pools. Precondition: :meth:`shortage` (``seq=None``) returned
        None and :meth:`hit` True."""
        hit_tokens = num_hit * self.tokens_per_block
        for g, pool in enumerate(self.pools):
            first, end = self.span(g, num_tokens, num_tokens)
            # the hit blocks the prefill reads (the window at the hit position): held
            # while this prompt's blocks are placed, so none of them is evicted here
            hit_first, _ = self.span(g, hit_tokens, hit_tokens)
            read = [pool.hashes[hashes[i]] for i in range(hit_first, num_hit)]
            for b in read:
                pool.acquire_hit(b)
            # the blocks this prefill writes and slides past are left cached under their
            # hashes, as a chunked prefill leaves them: a later prompt sharing the first
            # part of this one finds the window it needs there (one block at a time, so
            # they only evict other cached blocks)
            for i in range(num_hit, min(first, len(hashes))):
                b = pool.take()[0]
                pool.set_hash(b, hashes[i])
                pool.release(b)
            seq.window_first.append(first)
            table = []
            for i in range(first, end):
                if i < num_hit:
                    b = pool.hashes[hashes[i]]
                    pool.acquire(b)
                else:
                    b = pool.take()[0]
                table.append(b)
            seq.window_tables.append(table)
            for b in reversed(read):  # back to cached, most recently used, unless kept
                pool.release(b)
        self.register(seq, hashes, num_hit)

    def register(self, seq: SeqBlocks, hashes: list[BlockHash], start: int) -> None:
        """Record the hashes of the full blocks ``start ..`` of ``seq`` that its windows
        still hold (a cached twin hands its hash over, as in the kv pools)."""
        for g, pool in enumerate(self.pools):
            first = seq.window_first[g]
            wt = seq.window_tables[g]
            for i in range(max(start, first), min(len(hashes), first + len(wt))):
                pool.set_hash(wt[i - first], hashes[i])

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
