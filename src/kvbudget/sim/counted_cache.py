"""The replay's cache counted per extent: what :class:`~kvbudget.SpecDecodeCache` does
to the replay's synthetic prompts, without a block id or a hash.

The replay's prompts (:mod:`kvbudget.sim.prompt_ids`) are a prefix group's seeded ids,
then marker tokens that encode the request's index, then a fixed filler; outputs are one
fixed id. So a block is one of two kinds:

* a **group block**: block ``i`` of a request whose hash covers only its group's ids
  (``(i + 1) * tokens_per_block + with_next <= prefix_tokens``) has the content of every
  such block ``i`` of that group: it is keyed ``(group, i)``, with a reference count
  while requests own it and a place in the LRU when none does;
* an **own block**: every later block holds the request's markers, and no other
  request's block has its content (see *Exactness*). A request's own full blocks are
  counted, not listed: freed (tail first, as the cache frees) they enter the LRU as one
  **extent** ``[lo, hi)`` of its chain, evicted from ``hi`` down (the tail first, as the
  cache evicts them) and hit from ``lo`` up (only by the request itself, re-admitted
  after a recompute).

Block ids are labels (a free block is any free block), so the counts the replay reads
(free, used and cached blocks, hits, evictions) follow the cache's rules one for one:
allocation takes free blocks first, then the least recently used cached ones; a prompt
pins its hits before it allocates; a registered hash that a cached block holds already
(a twin) frees that block and moves the hash over, and one an owned block holds leaves
the new block unhashed; commits hash full blocks and release the lookahead blocks past
``ceil(tokens / tokens_per_block)``. A request costs ``O(group blocks + 1)``, an
eviction ``O(1)`` per extent, where the cache costs a hash, a table entry and a list
move per block.

**Exactness.** Two synthetic prompts share an own block only when they agree on all of
it: two requests of one group and prefix length whose first marker tokens are equal
(their indices equal modulo ``vocab - 1``), or a first marker token equal to its group's
next id (another request with a longer prefix then holds those ids). The cache counts
every such case it meets while the other chain may still be cached
(:attr:`CountedCache.collisions`): zero means the replay's counts are the step-by-step
cache's; otherwise they may differ for those requests only (the replay notes it). Two
groups' random ids agreeing on a whole block (probability ``vocab ** -tokens_per_block``)
are not looked for.

Only plans whose cache is kv blocks on the GPU qualify (:func:`counted_cache_fits`): no
window or state pools, no host or disk tier. Not thread-safe; one per replay.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from kvbudget.cache import PreemptMode, RequestId
from kvbudget.errors import OutOfBlocksError
from kvbudget.plan_types import Plan
from kvbudget.sim.prompt_ids import PromptIds
from kvbudget.sim.trace import TraceRequest
from kvbudget.spec_modes import SPEC_MODE_TABLE

GroupKey = tuple[str | None, int]
# (group, prefix tokens, first marker token): the chains a chain could equal
Family = tuple[str | None, int, tuple[int, ...]]
NEVER = 1 << 62  # a token count no request reaches


def counted_cache_fits(plan: Plan) -> bool:
    """Whether ``plan``'s cache is kv blocks on the GPU only (no window or state pools,
    no host or disk blocks): what :class:`CountedCache` counts."""
    cap = plan.capacity
    if cap.host_blocks or cap.disk_blocks:
        return False
    return all(not m.window_groups and not m.state_bytes_per_seq for m in plan.managers)


class _Chain:
    """One request's blocks (internal, mutable): group keys held (None: an unhashed
    duplicate of a key another request owned when it registered), block and token
    counts, hashed blocks, and its cached extent ``[lo, hi)`` once freed."""

    __slots__ = (
        "family",
        "finished",
        "group",
        "hashed",
        "hi",
        "keys",
        "lo",
        "nblocks",
        "reserved",
        "shared",
        "tokens",
    )

    def __init__(self, group: str | None, shared: int, family: Family) -> None:
        self.group = group
        self.shared = shared  # blocks 0 .. shared - 1 are group blocks
        self.family = family
        self.keys: list[GroupKey | None] = []
        self.nblocks = self.tokens = self.reserved = self.hashed = 0
        self.lo = self.hi = shared  # the cached extent (empty)
        self.finished = False


class CountedCache:
    """The kv blocks of one replay, counted (module docstring). Made by the replay for
    a plan :func:`counted_cache_fits`; the replay's ids come from ``ids``."""

    __slots__ = (
        "_chains",
        "_families",
        "_ids",
        "_lru",
        "_owners",
        "_parked",
        "cached",
        "collisions",
        "free_blocks",
        "hit_blocks",
        "hit_tokens",
        "max_seq",
        "num_blocks",
        "prompt_tokens",
        "tpb",
        "used",
        "with_next",
    )

    def __init__(self, plan: Plan, ids: PromptIds) -> None:
        self.tpb = plan.tokens_per_block
        self.with_next = int(SPEC_MODE_TABLE[plan.spec].draft_prefix == "drop_last_block")
        self.num_blocks = plan.capacity.gpu_blocks
        self.max_seq = plan.capacity.max_seq_len
        self._ids = ids
        self.free_blocks = self.num_blocks  # no owner, no hash
        self.used = self.cached = 0  # owned; unowned and hashed (in the LRU)
        # the LRU, least recently used first: group keys and chains (their extents)
        self._lru: OrderedDict[GroupKey | _Chain, None] = OrderedDict()
        self._owners: dict[GroupKey, int] = {}  # owned group keys: their owners
        self._chains: dict[RequestId, _Chain] = {}  # running
        self._parked: dict[RequestId, _Chain] = {}  # recomputed, to be re-admitted
        self._families: dict[Family, int] = {}  # live chains per family
        self.prompt_tokens = self.hit_tokens = self.hit_blocks = 0
        #: admissions whose own blocks another live chain's could equal (docstring)
        self.collisions = 0

    @property
    def available_gpu_blocks(self) -> int:
        """Blocks an allocation may take: free plus evictable."""
        return self.free_blocks + self.cached

    # ------------------------------------------------------------------ admission
    def admit(self, request_id: RequestId, req: TraceRequest, num_tokens: int) -> int:
        """Admit ``req``'s first ``num_tokens`` tokens (its prompt, or its verified
        tokens after a recompute) as :meth:`SpecDecodeCache.admit
        <kvbudget.SpecDecodeCache.admit>` admits its ids; returns the hit tokens.
        Raises OutOfBlocksError, changing nothing, when the GPU lacks blocks."""
        chain = self._parked.pop(request_id, None)
        fresh = chain is None
        if chain is None:
            chain = self._chain_of(req)
        tpb, wn = self.tpb, self.with_next
        hashed = (num_tokens - wn) // tpb if num_tokens >= wn else 0
        limit = min((num_tokens - 1) // tpb, hashed)  # at least one token to compute
        hit, pinned = self._hits(chain, limit)
        need = -(-num_tokens // tpb) - hit
        have = self.free_blocks + self.cached - pinned
        if need > have:
            if not fresh:
                self._parked[request_id] = chain
            raise OutOfBlocksError(
                f"cannot admit request {request_id!r} ({num_tokens} prompt tokens): it needs "
                f"{need} more GPU blocks, {have} are free or evictable",
                role="target",
                tier="gpu",
                pool="kv",
                needed=need,
                available=have,
            )
        if fresh:
            self._count_collisions(chain, req)
            self._families[chain.family] = self._families.get(chain.family, 0) + 1
        self._pin_hits(chain, hit)
        self._take(need)
        self._register(chain, hit, hashed)
        chain.nblocks = hit + need
        chain.tokens, chain.reserved, chain.hashed = num_tokens, 0, hashed
        self._chains[request_id] = chain
        self.prompt_tokens += num_tokens
        self.hit_tokens += hit * tpb
        self.hit_blocks += hit
        return hit * tpb

    def _chain_of(self, req: TraceRequest) -> _Chain:
        """A new chain for ``req``: its group blocks and its family (the group, prefix
        length and first marker token that decide which chains it could equal)."""
        group = req.prefix_group if req.prefix_tokens else None
        prefix = req.prefix_tokens if group is not None else 0
        wn = self.with_next
        shared = (prefix - wn) // self.tpb if group is not None and prefix >= wn else 0
        first = self._ids.marker(req.index, req.prompt_tokens - prefix)[:1]
        return _Chain(group, shared, (group, prefix, first))

    def _count_collisions(self, chain: _Chain, req: TraceRequest) -> None:
        """Count an admission whose own blocks a live chain's could equal (docstring)."""
        if self._families.get(chain.family):
            self.collisions += 1
            return
        group, prefix, first = chain.family
        if group is not None and self._ids.group(group, prefix + 1).ids[prefix] == first[0]:
            self.collisions += 1

    def _hits(self, chain: _Chain, limit: int) -> tuple[int, int]:
        """The leading blocks (at most ``limit``) cached or owned, and how many of them
        are cached (pinned by the admission). Reads only."""
        owners, lru, group = self._owners, self._lru, chain.group
        hit = pinned = 0
        top = min(limit, chain.shared)
        while hit < top:
            key = (group, hit)
            if key in owners:
                hit += 1
            elif key in lru:
                hit += 1
                pinned += 1
            else:
                return hit, pinned
        if hit == chain.shared and chain.hi > chain.lo:  # its own extent, from lo up
            own = min(limit, chain.hi) - chain.lo
            if own > 0:
                hit += own
                pinned += own
        return hit, pinned

    def _pin_hits(self, chain: _Chain, hit: int) -> None:
        """The admission's ``hit`` leading blocks get one owner more (cached ones leave
        the LRU)."""
        owners, lru = self._owners, self._lru
        keys = chain.keys = []
        group = chain.group
        for i in range(min(hit, chain.shared)):
            key = (group, i)
            count = owners.get(key)
            if count is None:
                del lru[key]
                self.cached -= 1
                self.used += 1
                count = 0
            owners[key] = count + 1
            keys.append(key)
        own = hit - chain.shared
        if own > 0:
            chain.lo += own
            self.cached -= own
            self.used += own
            if chain.lo == chain.hi:
                del lru[chain]

    def _register(self, chain: _Chain, hit: int, hashed: int) -> None:
        """Blocks ``hit .. hashed - 1`` of an admitted prompt get their hashes: a group
        key a cached block holds frees that block and moves over, one an owned block
        holds leaves this one unhashed; the rest of the chain's own extent (its twins)
        goes to the free list."""
        owners, lru, group, keys = self._owners, self._lru, chain.group, chain.keys
        for i in range(hit, chain.shared):
            key = (group, i)
            if key in owners:
                keys.append(None)
                continue
            if key in lru:
                del lru[key]
                self.cached -= 1
                self.free_blocks += 1
            owners[key] = 1
            keys.append(key)
        size = chain.hi - chain.lo
        if size > 0:  # every block of it is re-registered: hashed covers its end
            del lru[chain]
            self.cached -= size
            self.free_blocks += size
            chain.lo = chain.hi = chain.shared

    # ------------------------------------------------------------------ allocation
    def _take(self, count: int) -> None:
        """``count`` blocks get an owner: free ones first, then the least recently used
        cached ones (their hashes dropped). Precondition: that many are available."""
        self.used += count
        if count <= self.free_blocks:
            self.free_blocks -= count
            return
        rest = count - self.free_blocks
        self.free_blocks = 0
        self._evict(rest)

    def _evict(self, count: int) -> None:
        """Drop the ``count`` least recently used cached blocks from the LRU (the caller
        places them)."""
        self.cached -= count
        lru = self._lru
        while count:
            key, _ = lru.popitem(last=False)
            if type(key) is tuple:
                count -= 1
                continue
            chain: _Chain = key  # type: ignore[assignment]
            size = chain.hi - chain.lo
            if size > count:
                chain.hi -= count
                lru[chain] = None
                lru.move_to_end(chain, last=False)
                return
            chain.hi = chain.lo
            count -= size
            if chain.finished:
                self._family_done(chain)

    def _family_done(self, chain: _Chain) -> None:
        left = self._families[chain.family] - 1
        if left:
            self._families[chain.family] = left
        else:
            del self._families[chain.family]

    def reserve(self, request_id: RequestId, num_tokens: int) -> None:
        """Room for ``num_tokens`` unverified tokens, cut at ``max_seq_len`` as
        :meth:`SpecDecodeCache.reserve <kvbudget.SpecDecodeCache.reserve>` cuts it.
        Raises OutOfBlocksError, changing nothing, when the GPU lacks blocks."""
        chain = self._chains[request_id]
        room = self.max_seq - chain.tokens - chain.reserved
        if num_tokens > room:
            num_tokens = max(0, room)
        reserved = chain.reserved + num_tokens
        total = chain.tokens + reserved
        tpb = self.tpb
        if total > chain.nblocks * tpb:
            extra = -(-total // tpb) - chain.nblocks
            available = self.free_blocks + self.cached
            if extra > available:
                raise OutOfBlocksError(
                    f"cannot reserve {num_tokens} tokens for request {request_id!r}: it needs "
                    f"{extra} more GPU blocks, {available} are free or evictable",
                    role="target",
                    tier="gpu",
                    pool="kv",
                    needed=extra,
                    available=available,
                )
            self._take(extra)
            chain.nblocks += extra
        chain.reserved = reserved

    def commit(self, request_id: RequestId, accepted: int) -> None:
        """``accepted`` verified tokens appended, the rest of the lookahead released."""
        chain = self._chains[request_id]
        chain.tokens += accepted
        chain.reserved = 0
        self.settle(chain, chain.tokens)

    def settle(self, chain: _Chain, tokens: int) -> None:
        """``chain`` holds ``tokens`` verified tokens: its full blocks are hashed (own
        blocks: no twin can exist) and blocks past ``ceil(tokens / tokens_per_block)``
        go to the free list."""
        chain.tokens = tokens
        hashed = (tokens - self.with_next) // self.tpb
        if hashed > chain.hashed:
            chain.hashed = hashed
        keep = -(-tokens // self.tpb)
        if chain.nblocks > keep:
            self.free_blocks += chain.nblocks - keep
            self.used -= chain.nblocks - keep
            chain.nblocks = keep

    # ------------------------------------------------------------------ release
    def free(self, request_id: RequestId) -> None:
        """Release every block of a finished request, tail first: unhashed ones to the
        free list, its own full blocks into the LRU as one extent, then its group keys
        that lose their last owner."""
        chain = self._chains.pop(request_id)
        chain.finished = True
        self._release(chain)
        if chain.hi == chain.lo:
            self._family_done(chain)

    def preempt(self, request_id: RequestId, swap: bool) -> tuple[PreemptMode, int]:
        """Drop a running request for recompute, its blocks released as :meth:`free`
        releases them (with no host tier a swap falls back to that, as the engine's
        cache's does); returns the mode and its verified tokens, what it is re-admitted
        with."""
        chain = self._chains.pop(request_id)
        self._release(chain)
        self._parked[request_id] = chain
        return "recompute", chain.tokens

    def resume(self, request_id: RequestId) -> None:
        """Never called: nothing is swapped out without a host tier."""
        raise AssertionError(f"request {request_id!r} cannot be swapped out of a counted cache")

    def _release(self, chain: _Chain) -> None:
        shared, hashed = chain.shared, chain.hashed
        released = chain.nblocks - hashed  # the unhashed tail
        self.free_blocks += released
        if hashed > shared:
            chain.lo, chain.hi = shared, hashed
            self._lru[chain] = None
            self.cached += hashed - shared
            released += hashed - shared
        owners, lru = self._owners, self._lru
        for key in reversed(chain.keys):
            released += 1
            if key is None:
                self.free_blocks += 1
                continue
            count = owners[key] - 1
            if count:
                owners[key] = count
                released -= 1
            else:
                del owners[key]
                lru[key] = None
                self.cached += 1
        chain.keys = []
        chain.nblocks = 0
        self.used -= released

    # ------------------------------------------------------------------ decode runs
    def decode_run(self, request_ids: Sequence[RequestId]) -> CountedRun:
        """A :class:`CountedRun` over running ``request_ids`` (no lookahead held)."""
        return CountedRun(self, [self._chains[rid] for rid in request_ids])

    def sample_counts(self) -> tuple[int, int, int, int, int]:
        """GPU used and cached blocks; the host's (none) and host blocks moved (none)."""
        return self.used, self.cached, 0, 0, 0

    def totals(self) -> tuple[int, int, int, int, int, int]:
        """Prompt tokens, hit tokens, GPU hit blocks; the host's hits and copies (none)."""
        return self.prompt_tokens, self.hit_tokens, self.hit_blocks, 0, 0, 0

    def notes(self) -> tuple[str, ...]:
        """A note for the metrics when :attr:`collisions` is not zero."""
        if not self.collisions:
            return ()
        return (
            f"{self.collisions} admitted prompts could share blocks with another request's "
            "past their prefix group (equal marker ids); the counted cache kept them apart, "
            "so their hits may differ from the engine cache's: replay with --step-by-step "
            "(simulate(fast_forward=False)) for the exact counts",
        )

    def check(self) -> None:
        """Raise AssertionError if the counts are inconsistent."""
        n = self.num_blocks
        if min(self.free_blocks, self.used, self.cached) < 0:
            raise AssertionError("a negative block count")
        if self.free_blocks + self.used + self.cached != n:
            raise AssertionError(
                f"free {self.free_blocks} + used {self.used} + cached {self.cached} != {n}"
            )
        in_lru = 0
        for entry in self._lru:
            in_lru += entry.hi - entry.lo if isinstance(entry, _Chain) else 1
        if in_lru != self.cached:
            raise AssertionError(f"the LRU holds {in_lru} blocks, cached counts {self.cached}")
        held: dict[GroupKey, int] = {}
        owned = 0
        for chain in self._chains.values():
            for key in chain.keys:
                if key is not None:
                    held[key] = held.get(key, 0) + 1
                    owned += 1
        if held != self._owners:
            raise AssertionError("group keys' owners disagree with the chains holding them")
        own = sum(c.nblocks for c in self._chains.values()) - owned + len(self._owners)
        if own != self.used:
            raise AssertionError(f"chains hold {own} blocks, used counts {self.used}")


class CountedRun:
    """Decode steps of running chains counted in bulk: the methods of
    :class:`~kvbudget.cache.decode_run.DecodeRun` that :mod:`kvbudget.sim.fast_decode`
    calls, on a :class:`CountedCache` (no twin can meet an own block, so
    :meth:`finish` never refuses)."""

    __slots__ = ("_cache", "_chains", "hash_at")

    def __init__(self, cache: CountedCache, chains: list[_Chain]) -> None:
        self._cache = cache
        self._chains = chains
        tpb, wn = cache.tpb, cache.with_next
        #: the verified tokens at which each request's next block is hashed
        self.hash_at = [(c.hashed + 1) * tpb + wn for c in chains]

    def available(self) -> int:
        """GPU blocks a reservation may take now: free plus evictable."""
        return self._cache.free_blocks + self._cache.cached

    def free(self) -> int:
        """GPU blocks with no owner and no hash."""
        return self._cache.free_blocks

    def take(self, index: int, count: int) -> None:
        """Request ``index`` reserves ``count`` new blocks."""
        self._cache._take(count)
        self._chains[index].nblocks += count

    def settle(self, index: int, tokens: int) -> None:
        """Request ``index`` has ``tokens`` verified tokens (at least what it had)."""
        chain = self._chains[index]
        self._cache.settle(chain, tokens)
        self.hash_at[index] = (chain.hashed + 1) * self._cache.tpb + self._cache.with_next

    def finish(self, tokens: Sequence[int], evict: int) -> bool:
        """The run's end in one batch: ``evict`` cached blocks onto the free list, then
        each request's blocks, tokens and hashes (:meth:`DecodeRun.finish
        <kvbudget.cache.decode_run.DecodeRun.finish>`). Always True."""
        cache = self._cache
        if evict:
            cache._evict(evict)
            cache.free_blocks += evict
        tpb, wn = cache.tpb, cache.with_next
        hash_at = self.hash_at
        taken = 0
        for i, (chain, count) in enumerate(zip(self._chains, tokens, strict=True)):
            more = -(-count // tpb) - chain.nblocks
            if more > 0:
                taken += more
                chain.nblocks += more
            chain.tokens = count
            hashed = (count - wn) // tpb
            if hashed > chain.hashed:
                chain.hashed = hashed
                hash_at[i] = (hashed + 1) * tpb + wn
        cache.free_blocks -= taken
        cache.used += taken
        return True

    def close(self, tokens: Sequence[int]) -> None:
        """The end of the run: request ``i`` has ``tokens[i]`` verified tokens."""
        for chain, count in zip(self._chains, tokens, strict=True):
            chain.tokens = count


__all__ = ["CountedCache", "CountedRun", "counted_cache_fits"]
