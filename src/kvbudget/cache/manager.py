"""The cache of one model role (target or draft) over its layers, on one rank.

A :class:`RoleManager` owns the pools of its role, all sized by the plan:

* ``tiers``: the growing layers' blocks on gpu, host and disk (one :class:`BlockPool`
  each, ``ManagerPlan.<tier>.blocks`` of ``block_bytes``); this module holds their logic:
  allocation with eviction and offload, prefix lookup and onboarding, hashing of full
  blocks (:mod:`kvbudget.cache.swap` moves a sequence between tiers);
* ``windows``: the sliding-window groups (:class:`~kvbudget.cache.windows.WindowPools`,
  None when the role has none);
* ``state``: the recurrent-state slots (:class:`~kvbudget.cache.recurrent_state.StatePool`,
  None when ``state_bytes_per_seq == 0``).

It keeps no request table of its own: the coordinator holds one
:class:`~kvbudget.cache.request.SeqBlocks` per request and role and passes it in. Methods
named ``*_shortage`` only read state and return a message when an operation would not
fit; the matching mutating method assumes that the check passed (check-then-commit), so a
refused operation never changes anything.

A cached block evicted from one tier is copied into the next tier that has blocks (host,
then disk); a tier with no room left loses it. Copies are logged in ``copies`` (when the
cache has real storage) as ``(src_tier, src_block, dst_tier, dst_block)`` in the order
they must run, with tier indices into :data:`TIERS`.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.ids import BlockHash, BlockId
from kvbudget.cache.recurrent_state import StatePool
from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.shortage import Shortage
from kvbudget.cache.windows import WindowPools
from kvbudget.plan_types import ManagerPlan
from kvbudget.split import TIERS, Tier

Copy = tuple[int, BlockId, int, BlockId]
GPU, HOST = 0, 1


class RoleManager:
    """Pools and block tables of one role; see the module docstring."""

    def __init__(
        self, plan: ManagerPlan, *, usable_blocks: tuple[int, int, int], record_copies: bool
    ) -> None:
        """Pools from ``plan``; ``usable_blocks`` per tier is at most the plan's count."""
        self.plan = plan
        self.role = plan.role
        self.tokens_per_block = plan.tokens_per_block
        self.tiers: tuple[BlockPool, ...] = tuple(
            BlockPool(f"{plan.role}/{name}", usable, plan.tier(name).blocks)
            for name, usable in zip(TIERS, usable_blocks, strict=True)
        )
        self.gpu = self.tiers[GPU]
        present = [i for i, p in enumerate(self.tiers) if p.num_blocks > 0]
        # next_tier[i]: where tier i's evicted cached blocks go (None: they are lost)
        self.next_tier: tuple[int | None, ...] = tuple(
            next((j for j in present if j > i), None) for i in range(len(TIERS))
        )
        # (tier, read-only hash index) of every tier with blocks, GPU first
        self.lookup_maps = tuple((i, self.tiers[i].hashes) for i in present)
        self.windows: WindowPools | None = WindowPools(plan) if plan.window_groups else None
        self.state: StatePool | None = (
            StatePool(plan.role, plan.max_batch_size) if plan.state_bytes_per_seq > 0 else None
        )
        # pools sized per sequence, not per token: no swap (windows reuse prefixes; a
        # recurrent state cannot, it is not kept at block boundaries)
        self.has_fixed = self.windows is not None or self.state is not None
        self.copies: list[Copy] | None = [] if record_copies else None

    # ----------------------------------------------------------------- allocation
    def take(self, tier: int) -> BlockId:
        """A block of ``tier`` with refcount 1; an evicted cached block moves down.
        Precondition: the tier has a block available."""
        block, old = self.tiers[tier].take()
        if old is not None:
            self._evicted(tier, block, old)
        return block

    def take_gpu(self, table: list[BlockId], count: int) -> None:
        """Append ``count`` new GPU blocks to ``table`` (the allocation path of admit and
        reserve); evicted cached blocks move down. Precondition: the GPU tier has
        ``count`` blocks available."""
        evicted = self.gpu.take_into(table, count)
        for b, old in evicted:
            self._evicted(GPU, b, old)

    def _evicted(self, tier: int, block: BlockId, block_hash: BlockHash) -> None:
        """``block`` of ``tier`` (content still in place) lost ``block_hash``: keep a copy
        as a cached block of the next tier when it has room, else count the loss."""
        low_index = self.next_tier[tier]
        if low_index is None:
            self.tiers[tier].note_evicted()
            return
        low = self.tiers[low_index]
        existing = low.find(block_hash)
        if existing is not None:
            low.touch(existing)
            return
        got = low.receive(block_hash)
        if got is None:  # every block of that tier is pinned (swapped-out requests)
            self.tiers[tier].note_evicted()
            return
        dst, old = got
        if old is not None:  # that tier's LRU block moved further down first
            self._evicted(low_index, dst, old)
        if self.copies is not None:
            self.copies.append((tier, block, low_index, dst))

    # ----------------------------------------------------------------- prefix lookup
    def match(self, hashes: list[BlockHash], max_blocks: int) -> list[tuple[int, BlockId]]:
        """Where the leading blocks of ``hashes`` are cached: ``(tier, block)`` for each, as
        long as some tier holds the next one (at most ``max_blocks``). Computed once per
        admit and passed to :meth:`admit_shortage` and :meth:`admit`. Reads only."""
        maps = self.lookup_maps
        found: list[tuple[int, BlockId]] = []
        for h in hashes[:max_blocks]:
            for tier, index in maps:
                b = index.get(h)
                if b is not None:
                    found.append((tier, b))
                    break
            else:
                break
        return found

    def admit_shortage(
        self,
        hashes: list[BlockHash],
        match: list[tuple[int, BlockId]],
        num_hit: int,
        num_blocks: int,
        num_tokens: int,
    ) -> Shortage | None:
        """Why a prompt of ``num_tokens`` (``num_blocks``, the first ``num_hit`` of
        ``match`` cached) would not fit, or None. Reads only."""
        gpu = self.gpu
        on_gpu = pinned = 0
        for tier, b in match[:num_hit]:
            if tier == GPU:
                on_gpu += 1
                pinned += gpu.owners(b) == 0
        need = num_blocks - on_gpu
        have = gpu.num_available - pinned
        if need > have:
            return self._kv_message(need, have)
        if self.windows is not None:
            reason = self.windows.shortage(None, num_tokens, num_tokens, hashes, num_hit)
            if reason is not None:
                return reason
        return self.state.shortage() if self.state is not None else None

    def window_hit(self, hashes: list[BlockHash], num_hit: int) -> bool:
        """Whether the window groups hold what a hit of ``num_hit`` blocks needs."""
        return self.windows is None or self.windows.hit(hashes, num_hit)

    def admit(
        self,
        seq: SeqBlocks,
        hashes: list[BlockHash],
        match: list[tuple[int, BlockId]],
        num_hit: int,
        num_blocks: int,
        num_tokens: int,
    ) -> None:
        """Fill ``seq`` for a new prompt; hashes of the full blocks get registered.

        Hit blocks (the first ``num_hit`` of ``match``) are pinned in every tier first, so
        the allocations that follow never evict them; hits below the GPU are copied up
        (onboarded). Precondition: :meth:`admit_shortage` returned None.
        """
        tiers = self.tiers
        gpu = self.gpu
        table = seq.table
        onboard: list[tuple[int, int, BlockId]] = []
        for i, (t, b) in enumerate(match[:num_hit]):
            tiers[t].acquire_hit(b)
            table.append(b)  # a lower tier's block is replaced below by a GPU block
            if t != GPU:
                onboard.append((i, t, b))
        for i, t, lb in onboard:
            b = self.take(GPU)
            if self.copies is not None:
                self.copies.append((t, lb, GPU, b))
            gpu.set_hash(b, hashes[i])
            table[i] = b
            tiers[t].note_onboarded()
        for _, t, lb in onboard:
            tiers[t].release(lb)  # the lower tier keeps its copy, cached
        self.take_gpu(table, num_blocks - num_hit)
        self.register(table, hashes, num_hit)
        if self.has_fixed:
            if self.windows is not None:
                self.windows.admit(seq, num_tokens, hashes, num_hit)
            if self.state is not None:
                self.state.attach(seq)

    # ----------------------------------------------------------------- reserve / commit
    def grow_shortage(
        self, seq: SeqBlocks, num_blocks: int, num_committed: int, num_total: int
    ) -> Shortage | None:
        """Why ``seq`` cannot grow to ``num_blocks`` / ``num_total`` tokens, or None.
        Reads only."""
        extra = num_blocks - len(seq.table)
        gpu = self.gpu
        if extra > 0 and extra > gpu.num_available:
            return self._kv_message(extra, gpu.num_available)
        if self.windows is not None:
            return self.windows.shortage(seq, num_committed, num_total)
        return None

    def grow(self, seq: SeqBlocks, num_blocks: int, num_total: int) -> None:
        """Append blocks until ``seq`` holds ``num_blocks`` (and its windows ``num_total``
        tokens). Mutates ``seq``. Precondition: :meth:`grow_shortage` returned None."""
        table = seq.table
        if num_blocks > len(table):
            self.take_gpu(table, num_blocks - len(table))
        if self.windows is not None:
            self.windows.grow(seq, num_total)

    def register(self, table: list[BlockId], hashes: list[BlockHash], start: int) -> None:
        """Record ``hashes[start:]`` for the GPU blocks at those positions of ``table``
        (blocks that just became full); see :meth:`BlockPool.set_hash` for twins.
        Mutates the GPU pool's hash index only; never fails."""
        self.gpu.register(table, hashes, start)

    def shrink(self, seq: SeqBlocks, num_blocks: int, num_committed: int) -> None:
        """Release blocks past ``num_blocks`` (rolled-back lookahead, tail first) and the
        window blocks that left the window of ``num_committed`` tokens. Never fails."""
        surplus = len(seq.table) - num_blocks
        if surplus > 0:
            self.gpu.release_tail(seq.table, surplus)
        if self.windows is not None:
            self.windows.shrink(seq, num_committed)

    def release_all(self, seq: SeqBlocks, tier: int = GPU) -> None:
        """Release every block of ``seq`` (its table in ``tier``), tail first, and empty
        it; hashed blocks stay cached. Never fails."""
        self.tiers[tier].release_table(seq.table)
        if self.windows is not None:
            self.windows.release_all(seq)
        if self.state is not None:
            self.state.detach(seq)

    # ----------------------------------------------------------------- tier moves (swap)
    def move_shortage(self, seq: SeqBlocks, num_blocks: int, src: int, dst: int) -> Shortage | None:
        """Why the first ``num_blocks`` of ``seq`` cannot move from tier ``src`` to
        ``dst``, or None. Blocks whose hash ``dst`` already holds are shared, not copied.
        Reads only."""
        s, d = self.tiers[src], self.tiers[dst]
        need = pinned = 0
        for b in seq.table[:num_blocks]:
            h = s.hash_of(b)
            db = d.find(h) if h is not None else None
            if db is None:
                need += 1
            elif d.owners(db) == 0:
                pinned += 1
        have = d.num_available - pinned
        if need <= have:
            return None
        hint = (
            "raise host_budget in the plan or preempt with mode='recompute'"
            if dst == HOST
            else "free or preempt other requests first"
        )
        return Shortage(
            role=self.role,
            tier=TIERS[dst],
            pool="kv",
            needed=need,
            available=have,
            message=(
                f"role {self.role} needs {need} free {TIERS[dst]} blocks to move the request, "
                f"{have} are free or evictable ({d.num_blocks} in the pool); {hint}"
            ),
        )

    def move(self, seq: SeqBlocks, src: int, dst: int) -> None:
        """Move every block of ``seq`` from tier ``src`` to ``dst`` (copies logged), then
        release the source blocks tail first (hashed ones stay cached there). Replaces
        ``seq.table``. Precondition: :meth:`move_shortage` returned None."""
        s, d = self.tiers[src], self.tiers[dst]
        old = seq.table
        new: list[BlockId] = list(old)
        missing: list[int] = []
        for i, b in enumerate(old):
            h = s.hash_of(b)
            db = d.find(h) if h is not None else None
            if db is None:
                missing.append(i)
            else:
                d.acquire(db)
                new[i] = db
        for i in missing:
            b = old[i]
            db = self.take(dst)
            if self.copies is not None:
                self.copies.append((src, b, dst, db))
            h = s.hash_of(b)
            if h is not None:
                d.set_hash(db, h)
            new[i] = db
            if dst > src:
                d.note_offloaded()
            else:
                s.note_onboarded()
        s.release_table(list(old))
        seq.table = new

    # ----------------------------------------------------------------- stats, messages
    def named_pools(self) -> Iterator[tuple[Tier, str, BlockPool]]:
        """Every pool of the role as ``(tier, kind, pool)``, in :class:`PoolStats` order:
        the kv tiers, the window groups, the state slots. Reads only."""
        for name, pool in zip(TIERS, self.tiers, strict=True):
            yield name, "kv", pool
        if self.windows is not None:
            for g, pool in zip(self.windows.groups, self.windows.pools, strict=True):
                yield "gpu", f"window{g.window_tokens}", pool
        if self.state is not None:
            yield "gpu", "state", self.state

    def _kv_message(self, need: int, have: int) -> Shortage:
        gpu = self.gpu
        return Shortage(
            role=self.role,
            tier="gpu",
            pool="kv",
            needed=need,
            available=have,
            message=(
                f"role {self.role} needs {need} more GPU blocks ({need * self.tokens_per_block} "
                f"tokens), {have} are free or evictable of {gpu.num_blocks} "
                f"({gpu.num_used} in use); free or preempt requests, or raise the GPU KV budget "
                f"(kv_budget / memory_fraction) in the plan"
            ),
        )
