"""The growing layers' blocks of every role: one set of block ids, one pool per tier.

Target and draft hold the same tokens of every request (the lockstep rule), and the plan
gives every role's growing layers the same block count per tier
(``Capacity.<tier>_blocks``). Their kv pools would therefore evolve identically: the same
positions allocated, hashed, cached, evicted, offloaded and onboarded at the same moments.
:class:`KvTiers` keeps that bookkeeping once: block ``b`` of tier ``t`` is row ``b`` of
*every* role's kv tensor in that tier (each role with its own bytes per block), a request
has one kv block table for all roles, and one copy log moves every role's rows. Two roles
then cost what one costs on the hot paths (vLLM's hybrid allocator shares block ids across
layers of one model the same way). Window and recurrent-state pools differ per role
(windows, state sizes) and stay in each role's :class:`~kvbudget.cache.manager.RoleManager`.

Tiers: gpu, host, disk (:data:`kvbudget.split.TIERS`). A cached block evicted from one
tier is copied into the next tier that has blocks (host, then disk); a tier with no room
left loses it. Copies are logged in ``copies`` (when the cache has real storage) as
``(src_tier, src_block, dst_tier, dst_block)`` in the order they must run.

Methods named ``*_shortage`` only read and return a :class:`Shortage` when an operation
would not fit; the matching mutating method assumes the check passed (check-then-commit).
"""

from __future__ import annotations

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.ids import BlockHash, BlockId
from kvbudget.cache.shortage import Shortage
from kvbudget.plan_types import ManagerPlan
from kvbudget.split import TIERS

Copy = tuple[int, BlockId, int, BlockId]
GPU, HOST = 0, 1


class KvTiers:
    """The kv block pools shared by every role, one per tier; see the module docstring."""

    def __init__(
        self,
        plans: tuple[ManagerPlan, ...],
        *,
        usable_blocks: tuple[int, int, int],
        record_copies: bool,
    ) -> None:
        """Pools of ``usable_blocks`` per tier (at most every role's plan count there)."""
        self.roles = tuple(p.role for p in plans)
        self.tokens_per_block = plans[0].tokens_per_block
        self.tiers: tuple[BlockPool, ...] = tuple(
            BlockPool(f"kv/{name}", usable, min(p.tier(name).blocks for p in plans))
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
        self.copies: list[Copy] | None = [] if record_copies else None

    # ----------------------------------------------------------------- allocation
    def take(self, tier: int) -> BlockId:
        """A block of ``tier`` with refcount 1; an evicted cached block moves down.
        Precondition: the tier has a block available."""
        block, old = self.tiers[tier].take()
        if old is not None:
            self._evicted(tier, [(block, old)])
        return block

    def take_gpu(self, table: list[BlockId], count: int) -> None:
        """Append ``count`` new GPU blocks to ``table``; evicted cached blocks move down.
        Precondition: the GPU tier has ``count`` blocks available."""
        if count == 1:  # a decode step's reservation, most often
            one = self.gpu.take_one_into(table)
            if one is not None:
                self._evicted(GPU, [one])
            return
        evicted = self.gpu.take_into(table, count)
        if evicted:
            self._evicted(GPU, evicted)

    def evict_gpu(self, count: int) -> None:
        """Evict the ``count`` least recently used cached GPU blocks onto the GPU free
        list; they move down as :meth:`take_gpu`'s evictions do, in the same order.
        Precondition: the GPU tier has ``count`` cached blocks."""
        if count:
            self._evicted(GPU, self.gpu.evict_into_free(count))

    def _evicted(self, tier: int, evicted: list[tuple[BlockId, BlockHash]]) -> None:
        """Each ``(block, hash)`` of ``tier`` (content still in place) lost its hash: keep
        a copy as a cached block of the next tier when it has room, else count the loss.
        Blocks that tier evicts in turn move further down first, in the same order."""
        low_index = self.next_tier[tier]
        if low_index is None:
            self.tiers[tier].note_evicted(len(evicted))
            return
        low = self.tiers[low_index]
        lowest = self.next_tier[low_index] is None  # what it evicts is lost
        copies = self.copies
        if lowest:  # the common case (gpu -> host): one batch, nothing moves further
            moved, lost = low.receive_all(evicted)
            if lost:
                self.tiers[tier].note_evicted(lost)
            if copies is not None:
                copies.extend((tier, src, low_index, dst) for src, dst in moved)
            return
        for block, block_hash in evicted:
            existing = low.find(block_hash)
            if existing is not None:
                low.touch(existing)
                continue
            got = low.receive(block_hash)
            if got is None:  # every block of that tier is pinned (swapped-out requests)
                self.tiers[tier].note_evicted(1)
                continue
            dst, old = got
            if old is not None:  # that tier's LRU block moves further down first
                self._evicted(low_index, [(dst, old)])
            if copies is not None:
                copies.append((tier, block, low_index, dst))

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
        self, match: list[tuple[int, BlockId]], num_hit: int, num_blocks: int
    ) -> Shortage | None:
        """Why a prompt of ``num_blocks`` (the first ``num_hit`` of ``match`` cached) would
        not get its GPU blocks, or None. Reads only."""
        gpu = self.gpu
        on_gpu = pinned = 0
        for tier, b in match[:num_hit]:
            if tier == GPU:
                on_gpu += 1
                pinned += gpu.owners(b) == 0
        need = num_blocks - on_gpu
        have = gpu.num_available - pinned
        return self.gpu_shortage(need, have) if need > have else None

    def admit(
        self,
        table: list[BlockId],
        hashes: list[BlockHash],
        match: list[tuple[int, BlockId]],
        num_hit: int,
        num_blocks: int,
    ) -> None:
        """Fill the empty ``table`` of a new prompt; hashes of its full blocks get
        registered.

        Hit blocks (the first ``num_hit`` of ``match``) are pinned in every tier first, so
        the allocations that follow never evict them; hits below the GPU are copied up
        (onboarded). Precondition: :meth:`admit_shortage` returned None.
        """
        tiers = self.tiers
        gpu = self.gpu
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
        gpu.register(table, hashes, num_hit)

    # ----------------------------------------------------------------- tier moves (swap)
    def move_shortage(
        self, table: list[BlockId], num_blocks: int, src: int, dst: int
    ) -> Shortage | None:
        """Why the first ``num_blocks`` of ``table`` cannot move from tier ``src`` to
        ``dst``, or None. Blocks whose hash ``dst`` already holds are shared, not copied.
        Reads only."""
        s, d = self.tiers[src], self.tiers[dst]
        need = pinned = 0
        for b in table[:num_blocks]:
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
            role=self.roles[0],
            tier=TIERS[dst],
            pool="kv",
            needed=need,
            available=have,
            message=(
                f"{self._who()} needs {need} free {TIERS[dst]} blocks to move the request, "
                f"{have} are free or evictable ({d.num_blocks} in the pool); {hint}"
            ),
        )

    def move(self, table: list[BlockId], src: int, dst: int) -> list[BlockId]:
        """Move every block of ``table`` from tier ``src`` to ``dst`` (copies logged), then
        release the source blocks tail first (hashed ones stay cached there). Returns the
        new table. Precondition: :meth:`move_shortage` returned None."""
        s, d = self.tiers[src], self.tiers[dst]
        new: list[BlockId] = list(table)
        missing: list[int] = []
        for i, b in enumerate(table):
            h = s.hash_of(b)
            db = d.find(h) if h is not None else None
            if db is None:
                missing.append(i)
            else:
                d.acquire(db)
                new[i] = db
        for i in missing:
            b = table[i]
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
        s.release_table(list(table))
        return new

    # ----------------------------------------------------------------- messages
    def _who(self) -> str:
        """The subject of a refusal: ``"role target"``, or the pool the roles share."""
        if len(self.roles) == 1:
            return f"role {self.roles[0]}"
        return f"the kv pool of {' and '.join(self.roles)} (one block table)"

    def gpu_shortage(self, need: int, have: int) -> Shortage:
        """The refusal for ``need`` GPU kv blocks when ``have`` are free or evictable."""
        gpu = self.gpu
        return Shortage(
            role=self.roles[0],
            tier="gpu",
            pool="kv",
            needed=need,
            available=have,
            message=(
                f"{self._who()} needs {need} more GPU blocks "
                f"({need * self.tokens_per_block} tokens), {have} are free or evictable of "
                f"{gpu.num_blocks} ({gpu.num_used} in use); free or preempt requests, or raise "
                "the GPU KV budget (kv_budget / memory_fraction) in the plan"
            ),
        )
