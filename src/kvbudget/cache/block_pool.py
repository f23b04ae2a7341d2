"""One pool of equally sized blocks: free list, reference counts, LRU of cached blocks.

Every block is in exactly one of three states::

    free    refcount 0, no hash          in ``free`` (a stack: the last freed is reused first)
    used    refcount > 0                 owned by one or more requests
    cached  refcount 0, hashed           in ``cached`` (LRU: the first key is evicted next)

so ``free + used + cached == num_blocks``. A cached block keeps its content and hash until
it is reused; a prefix hit turns it back into a used block. Allocation takes a free block
first and evicts the least recently freed cached block only when none is free. Callers free
a sequence's blocks tail first, so its tail is evicted before its head.

All operations are O(1) per block. Methods do not check their preconditions on the hot
path (the cache checks before it mutates); :meth:`BlockPool.check` verifies the whole
state. The pool is the only code that reads or writes its lists and counters: managers
use the batch operations below (take into a table, release a tail or a whole table,
register full blocks, receive a copy from the tier above, look hashes up).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType

from kvbudget.cache.ids import BlockHash, BlockId


class BlockPool:
    """Blocks ``0 .. num_blocks - 1`` of one role, tier and kind (kv, window, state).

    ``plan_blocks`` is the plan's count for this role and tier; ``num_blocks`` (at most
    ``plan_blocks``) is how many the cache uses, e.g. the smaller of two roles' counts so
    that target and draft hold the same tokens. Blocks past ``num_blocks`` stay idle.
    """

    __slots__ = (
        "block_hash",
        "by_hash",
        "cached",
        "evicted_blocks",
        "free",
        "hashes",
        "hit_blocks",
        "name",
        "num_blocks",
        "num_used",
        "offloaded_blocks",
        "onboarded_blocks",
        "plan_blocks",
        "refcount",
    )

    def __init__(self, name: str, num_blocks: int, plan_blocks: int | None = None) -> None:
        self.name = name
        self.num_blocks = num_blocks
        self.plan_blocks = num_blocks if plan_blocks is None else plan_blocks
        self.refcount: list[int] = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        # popped from the end: block 0 is handed out first
        self.free: list[BlockId] = [BlockId(i) for i in range(num_blocks - 1, -1, -1)]
        self.cached: OrderedDict[BlockId, None] = OrderedDict()
        self.by_hash: dict[BlockHash, BlockId] = {}
        # a read-only live view of the hash index, for lookups from outside the pool
        self.hashes: Mapping[BlockHash, BlockId] = MappingProxyType(self.by_hash)
        self.num_used = 0
        # counters for stats(): blocks served as prefix hits from this pool, copied into
        # it from the tier above (offload) or out of it to the GPU (onboard), and cached
        # blocks whose content was lost (evicted with no lower tier to keep them)
        self.hit_blocks = 0
        self.offloaded_blocks = 0
        self.onboarded_blocks = 0
        self.evicted_blocks = 0

    @property
    def num_free(self) -> int:
        """Blocks with no owner and no hash."""
        return len(self.free)

    @property
    def num_cached(self) -> int:
        """Blocks with no owner that keep a hash (evictable)."""
        return len(self.cached)

    @property
    def num_available(self) -> int:
        """Blocks an allocation may take: free plus evictable."""
        return len(self.free) + len(self.cached)

    def take(self) -> tuple[BlockId, BlockHash | None]:
        """Take one block: refcount 1, no hash. Precondition: ``num_available > 0``.

        Returns the block and, when a cached block had to be evicted, the hash it held;
        its content is still in place, so the caller may copy it elsewhere (offload)
        before the block is written.
        """
        if self.free:
            block = self.free.pop()
            self.refcount[block] = 1
            self.num_used += 1
            return block, None
        block, _ = self.cached.popitem(last=False)
        old = self.block_hash[block]
        assert old is not None
        del self.by_hash[old]
        self.block_hash[block] = None
        self.refcount[block] = 1
        self.num_used += 1
        return block, old

    def acquire(self, block: BlockId) -> None:
        """Add one owner to ``block`` (a prefix hit); a cached block leaves the LRU."""
        count = self.refcount[block]
        if count == 0:
            del self.cached[block]
            self.num_used += 1
        self.refcount[block] = count + 1

    def release(self, block: BlockId) -> None:
        """Drop one owner. At refcount 0 a hashed block becomes cached (most recently
        used end of the LRU), an unhashed one free. Precondition: refcount > 0."""
        count = self.refcount[block] - 1
        self.refcount[block] = count
        if count == 0:
            self.num_used -= 1
            if self.block_hash[block] is None:
                self.free.append(block)
            else:
                self.cached[block] = None

    def set_hash(self, block: BlockId, block_hash: BlockHash) -> bool:
        """Record that used, unhashed ``block`` holds the full block ``block_hash``.

        When an unowned (cached) twin holds that hash, the hash moves to ``block`` and the
        twin becomes free: the index then points at a block that cannot be evicted while
        its owner runs. Returns False (and records nothing) when an *owned* block already
        holds the hash: the duplicate stays unhashed and is freed, not cached, when
        released.
        """
        twin = self.by_hash.get(block_hash)
        if twin is not None:
            if self.refcount[twin] > 0:
                return False
            del self.cached[twin]
            self.block_hash[twin] = None
            self.free.append(twin)
        self.by_hash[block_hash] = block
        self.block_hash[block] = block_hash
        return True

    # ------------------------------------------------------------------ batch operations
    def take_into(self, table: list[BlockId], count: int) -> list[tuple[BlockId, BlockHash]]:
        """Append ``count`` blocks (refcount 1, no hash) to ``table``; free blocks first,
        then the least recently used cached ones. Returns the evicted ``(block, hash)``
        pairs (contents still in place, for the caller to copy down). Precondition:
        ``num_available >= count``."""
        free, refcount, block_hash = self.free, self.refcount, self.block_hash
        evicted: list[tuple[BlockId, BlockHash]] = []
        for _ in range(count):
            if free:
                b = free.pop()
            else:
                b, _ = self.cached.popitem(last=False)
                old = block_hash[b]
                assert old is not None
                del self.by_hash[old]
                block_hash[b] = None
                evicted.append((b, old))
            refcount[b] = 1
            table.append(b)
        self.num_used += count
        return evicted

    def evict_into_free(self, count: int) -> list[tuple[BlockId, BlockHash]]:
        """Evict the ``count`` least recently used cached blocks onto the free list (their
        hashes dropped), in LRU order; returns the ``(block, hash)`` pairs (contents still
        in place, for the caller to copy down). Precondition: ``num_cached >= count``."""
        cached, block_hash, by_hash, free = self.cached, self.block_hash, self.by_hash, self.free
        evicted: list[tuple[BlockId, BlockHash]] = []
        for _ in range(count):
            b, _ = cached.popitem(last=False)
            old = block_hash[b]
            assert old is not None
            del by_hash[old]
            block_hash[b] = None
            free.append(b)
            evicted.append((b, old))
        return evicted

    def take_one_into(self, table: list[BlockId]) -> tuple[BlockId, BlockHash] | None:
        """:meth:`take_into` of one block (:meth:`take`, appended to ``table``): returns
        the evicted ``(block, hash)`` pair, or None when a free block was taken."""
        block, old = self.take()
        table.append(block)
        return None if old is None else (block, old)

    def release_tail(self, table: list[BlockId], count: int) -> None:
        """Release the last ``count`` blocks of ``table``, tail first, and drop them from it
        (hashed blocks become cached, the others free)."""
        refcount, block_hash, free, cached = self.refcount, self.block_hash, self.free, self.cached
        released = 0
        for _ in range(count):
            b = table.pop()
            c = refcount[b] - 1
            refcount[b] = c
            if c == 0:
                released += 1
                if block_hash[b] is None:
                    free.append(b)
                else:
                    cached[b] = None
        self.num_used -= released

    def release_table(self, table: list[BlockId]) -> None:
        """Release every block of ``table``, tail first, and empty it."""
        self.release_tail(table, len(table))

    def register(self, table: list[BlockId], hashes: list[BlockHash], start: int) -> None:
        """Record ``hashes[i]`` on ``table[i]`` for the full blocks ``start ..`` of a
        table (a cached twin of a hash hands it over, see :meth:`set_hash`)."""
        by_hash, block_hash = self.by_hash, self.block_hash
        for i in range(start, min(len(hashes), len(table))):
            h = hashes[i]
            if h in by_hash:
                self.set_hash(table[i], h)
            else:
                b = table[i]
                by_hash[h] = b
                block_hash[b] = h

    def receive(self, block_hash: BlockHash) -> tuple[BlockId, BlockHash | None] | None:
        """A cached block to hold a copy of ``block_hash`` arriving from the tier above:
        a free block, else the least recently used cached one (its hash returned, content
        still in place). None when every block is owned. Counts the block as offloaded.
        Precondition: no block holds ``block_hash``."""
        old = None
        if self.free:
            dst = self.free.pop()
        elif self.cached:
            dst, _ = self.cached.popitem(last=False)
            old = self.block_hash[dst]
            assert old is not None
            del self.by_hash[old]
        else:
            return None
        self.by_hash[block_hash] = dst
        self.block_hash[dst] = block_hash
        self.cached[dst] = None
        self.offloaded_blocks += 1
        return dst, old

    def receive_all(
        self, incoming: list[tuple[BlockId, BlockHash]]
    ) -> tuple[list[tuple[BlockId, BlockId]], int]:
        """:meth:`receive` for a batch, in order, when this is the lowest tier (what it
        evicts is lost). Each ``(src, hash)`` arriving from the tier above either finds
        its hash here (that block becomes most recently used) or takes a free block, else
        the least recently used cached one. Returns the ``(src, dst)`` copies to run and
        how many arrivals found every block owned (not kept). Evicted cached blocks are
        counted in ``evicted_blocks``."""
        by_hash, block_hash, free, cached = self.by_hash, self.block_hash, self.free, self.cached
        refcount = self.refcount
        copies: list[tuple[BlockId, BlockId]] = []
        lost = 0
        for src, h in incoming:
            b = by_hash.get(h)
            if b is not None:
                if refcount[b] == 0:
                    cached.move_to_end(b)
                continue
            if free:
                dst = free.pop()
            elif cached:
                dst, _ = cached.popitem(last=False)
                old = block_hash[dst]
                if old is not None:  # always, for a cached block
                    del by_hash[old]
                self.evicted_blocks += 1
            else:
                lost += 1
                continue
            by_hash[h] = dst
            block_hash[dst] = h
            cached[dst] = None
            copies.append((src, dst))
        self.offloaded_blocks += len(copies)
        return copies, lost

    def find(self, block_hash: BlockHash) -> BlockId | None:
        """The block holding ``block_hash``, or None."""
        return self.by_hash.get(block_hash)

    def hash_of(self, block: BlockId) -> BlockHash | None:
        """The hash ``block`` holds, or None."""
        return self.block_hash[block]

    def owners(self, block: BlockId) -> int:
        """How many requests hold ``block`` (0: free or cached)."""
        return self.refcount[block]

    def acquire_hit(self, block: BlockId) -> None:
        """:meth:`acquire` for a prefix hit, counted in ``hit_blocks``."""
        self.acquire(block)
        self.hit_blocks += 1

    def note_offloaded(self) -> None:
        """Count a block copied into this pool from the tier above."""
        self.offloaded_blocks += 1

    def note_onboarded(self) -> None:
        """Count a block copied from this pool up to the GPU."""
        self.onboarded_blocks += 1

    def note_evicted(self, count: int = 1) -> None:
        """Count ``count`` cached blocks whose content was lost (no tier below kept it)."""
        self.evicted_blocks += count

    def cached_in_lru_order(self) -> list[BlockId]:
        """The cached blocks, least recently used first. Reads only."""
        return list(self.cached)

    def touch(self, block: BlockId) -> None:
        """Move a cached block to the most recently used end of the LRU."""
        if self.refcount[block] == 0:
            self.cached.move_to_end(block)

    def check(self) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent."""
        n = self.num_blocks
        if n > self.plan_blocks:
            raise AssertionError(f"{self.name}: uses {n} blocks, plan gives {self.plan_blocks}")
        if len(self.refcount) != n or len(self.block_hash) != n:
            raise AssertionError(f"{self.name}: per-block lists are not {n} long")
        free = set(self.free)
        cached = set(self.cached)
        if any(not 0 <= b < n for b in free | cached | set(self.by_hash.values())):
            raise AssertionError(f"{self.name}: a listed block id is outside 0..{n - 1}")
        if len(free) != len(self.free):
            raise AssertionError(f"{self.name}: a block is on the free list twice")
        if free & cached:
            raise AssertionError(f"{self.name}: blocks both free and cached: {free & cached}")
        used = {b for b in range(n) if self.refcount[b] > 0}
        if any(c < 0 for c in self.refcount):
            raise AssertionError(f"{self.name}: negative refcount")
        if used & (free | cached):
            raise AssertionError(f"{self.name}: owned blocks on free/cached lists")
        if len(used) != self.num_used:
            raise AssertionError(f"{self.name}: num_used {self.num_used} != {len(used)}")
        if len(free) + len(used) + len(cached) != n:
            raise AssertionError(
                f"{self.name}: free {len(free)} + used {len(used)} + cached {len(cached)}"
                f" != total {n}"
            )
        for b in free:
            if self.block_hash[b] is not None:
                raise AssertionError(f"{self.name}: free block {b} keeps a hash")
        for b in cached:
            if self.block_hash[b] is None:
                raise AssertionError(f"{self.name}: cached block {b} has no hash")
        for h, b in self.by_hash.items():
            if self.block_hash[b] != h:
                raise AssertionError(f"{self.name}: hash index points at block {b} wrongly")
        hashed = sum(1 for h in self.block_hash if h is not None)
        if hashed != len(self.by_hash):
            raise AssertionError(
                f"{self.name}: {hashed} hashed blocks, {len(self.by_hash)} indexed"
            )
