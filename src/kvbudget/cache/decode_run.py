"""Many decode steps of running requests, with the cache touched only where blocks change.

A decode step of one request is ``reserve(k)`` then ``commit(accepted)``. Most steps
change nothing the cache shares between requests: the reservation fits the blocks the
request holds and the commit fills no block. Only three things are shared: a
reservation that needs a new block (taken from the free list, else the least recently
used cached block is evicted, and offloaded to the host tier when there is one), a
commit that leaves a reserved block unused (released to the free list), and a commit
that fills a block (its hash registered, which may hand a cached twin's hash over). A
:class:`DecodeRun` lets a caller that counts tokens itself (a simulator) do only those,
in the order the step-by-step loop would:

* :meth:`DecodeRun.take` where the step's reservation needs ``count`` new blocks;
* :meth:`DecodeRun.settle` after a commit that took or filled a block (and, for every
  request, before anything else uses the cache): the request's verified tokens become
  ``tokens`` (the fixed ``token_id`` appended), newly full blocks are hashed, blocks past
  ``ceil(tokens / tokens_per_block)`` are released tail first;
* or :meth:`DecodeRun.finish` for a whole run at once: the evictions the caller counted
  for its reservations, then each request's new blocks, tokens and hashes (refused when
  a block to register has a twin, whose hand-over depends on when it is registered).

Between those calls the cache holds fewer tokens than the caller counts; only block ids
can differ from the step-by-step loop's (a free block taken and released again in the
same step is the same free list; ids are labels), so counts, hashes, hits, evictions and
host traffic are the same. Only kv blocks are handled: :meth:`SpecDecodeCache.decode_run
<kvbudget.cache.SpecDecodeCache.decode_run>` returns None for a cache with window or
state pools or real storage.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvbudget.cache.hashing import extend_block_hashes

if TYPE_CHECKING:
    from kvbudget.cache.block_pool import BlockPool
    from kvbudget.cache.ids import BlockHash
    from kvbudget.cache.kv_tiers import KvTiers
    from kvbudget.cache.manager import RoleManager
    from kvbudget.cache.request import Request

NEVER = 1 << 62  # a token count no request reaches: no block left to hash


class DecodeRun:
    """Decode steps of ``requests`` (running, no lookahead held, each holding
    ``ceil(tokens / tokens_per_block)`` blocks, only kv pools); see the module docstring.
    Mutable; made by :meth:`SpecDecodeCache.decode_run`, used until the next other cache
    call.

    ``tokens_per_block``, ``with_next`` and ``prefix_reuse`` are the cache's settings
    (``with_next``: a block's hash covers the token after it). A block made only of
    tokens this run appended (all ``token_id``) is hashed from one packed copy of those
    ids, the same bytes :func:`~kvbudget.cache.hashing.extend_block_hashes` would pack;
    a block holding earlier tokens is hashed by that function."""

    __slots__ = (
        "_base",
        "_block_bytes",
        "_fill",
        "_gpu",
        "_kv",
        "_many",
        "_requests",
        "_reuse",
        "_token",
        "_tpb",
        "_with_next",
        "blocks",
        "hash_at",
        "tokens",
    )

    def __init__(
        self,
        kv: KvTiers,
        requests: list[Request[RoleManager]],
        token_id: int,
        *,
        tokens_per_block: int,
        with_next: bool,
        prefix_reuse: bool,
    ) -> None:
        self._kv = kv
        self._gpu: BlockPool = kv.gpu
        self._requests = requests
        self._token = token_id
        self._tpb = tokens_per_block
        self._with_next = int(with_next)
        self._reuse = prefix_reuse
        # the bytes one block of token_id hashes (its tokens and, with_next, the next one)
        self._fill = array("q", [token_id]) * (tokens_per_block + with_next)
        self._block_bytes = self._fill.tobytes()
        self._many = self._fill  # token_id repeated, grown as runs need (_ids)
        #: verified tokens the cache holds for each request (the caller may count more)
        self.tokens = [len(r.tokens) for r in requests]
        # from which token on each request's ids are known to be token_id (appended by
        # this run, or found so by settle)
        self._base = list(self.tokens)
        #: kv blocks each request holds
        self.blocks = [len(r.table) for r in requests]
        #: the verified tokens at which each request's next block is hashed
        self.hash_at = [self._next_hash_at(r.hashes) for r in requests]

    def _ids(self, count: int) -> array[int]:
        """``count`` copies of the run's token id, as int64 (appended to a request's
        tokens: one copy of packed ids, no list of them made)."""
        many = self._many
        if len(many) < count:
            many = self._many = array("q", [self._token]) * max(count, 2 * len(many))
        return many[:count]

    def _next_hash_at(self, hashes: list[BlockHash]) -> int:
        if not self._reuse:
            return NEVER
        return (len(hashes) + 1) * self._tpb + self._with_next

    def available(self) -> int:
        """GPU blocks a reservation may take now: free plus evictable."""
        return self._gpu.num_available

    def free(self) -> int:
        """GPU blocks with no owner and no hash: a reservation takes these first, and a
        block taken from them and released in the same step leaves them as they were
        (the caller may then skip both)."""
        return self._gpu.num_free

    def take(self, index: int, count: int) -> None:
        """Request ``index`` reserves ``count`` new blocks (free first, then the least
        recently used cached ones, offloaded to the host tier when it has one).
        Precondition: ``count <= available()``."""
        self._kv.take_gpu(self._requests[index].table, count)
        self.blocks[index] += count

    def close(self, tokens: Sequence[int]) -> None:
        """The end of the run: every request ``i`` has ``tokens[i]`` verified tokens, none
        past its ``hash_at`` and no block taken since its last :meth:`settle` (so only
        tokens are missing); the cache is whole again."""
        for req, have, want in zip(self._requests, self.tokens, tokens, strict=True):
            if want != have:
                req.tokens.extend(self._ids(want - have))
        self.tokens = list(tokens)

    def finish(self, tokens: Sequence[int], evict: int) -> bool:
        """The end of a run in one batch: the ``evict`` least recently used cached GPU
        blocks evicted onto the free list (moved down as a take's evictions are), then
        every request ``i`` takes from the free list the blocks ``ceil(tokens[i] /
        tokens_per_block)`` needs and gets its missing tokens, its newly full blocks
        hashed and registered. That is what the run's takes and settles come to when the
        caller counts ``evict`` from its reservations (the blocks the free list could not
        serve) and no block it fills has a hash the GPU pool indexes already. Returns
        False, changing nothing, when one does (a twin's hand-over depends on when the
        step-by-step loop registers it: take and settle step by step then).
        Precondition: no block taken since the last :meth:`settle`; ``tokens[i]`` at
        least what request ``i`` has; the free list plus ``evict`` covers the blocks
        taken."""
        chains: list[tuple[int, list[BlockHash]]] = []
        indexed = self._gpu.hashes
        seen: set[BlockHash] = set()
        for index, count in enumerate(tokens):
            start, new = self._chain(index, count)
            for h in new:
                if h in indexed or h in seen:
                    return False
            if len(tokens) > 1:
                seen.update(new)
            chains.append((start, new))
        self._kv.evict_gpu(evict)
        gpu, tpb = self._gpu, self._tpb
        for index, (count, req, (start, new)) in enumerate(
            zip(tokens, self._requests, chains, strict=True)
        ):
            table = req.table
            more = -(-count // tpb) - len(table)
            if more > 0:
                gpu.take_into(table, more)  # the free list holds them: no eviction
            add = count - len(req.tokens)
            if add:
                req.tokens.extend(self._ids(add))
            if new:
                req.hashes.extend(new)
                gpu.register(table, req.hashes, start)
                self.hash_at[index] = (len(req.hashes) + 1) * tpb + self._with_next
            self.tokens[index] = count
            self.blocks[index] = len(table)
        return True

    def _chain(self, index: int, tokens: int) -> tuple[int, list[BlockHash]]:
        """The hashes a :meth:`settle` of request ``index`` at ``tokens`` verified tokens
        appends, and the block they start at; changes nothing the cache reports."""
        req = self._requests[index]
        hashes = req.hashes
        start = len(hashes)
        tpb = self._tpb
        if not self._reuse or (tokens - self._with_next) // tpb <= start:
            return start, []
        held = req.tokens
        lo = start * tpb  # the first token the next block's hash reads
        base = self._base[index]
        if lo < base and held[lo:base] == self._fill[: base - lo]:
            base = self._base[index] = lo  # earlier tokens of token_id too
        if lo < base or req.extra_keys:
            ids = held[:]
            ids.extend(self._ids(tokens - len(held)))
            chain = list(hashes)
            extend_block_hashes(
                chain, ids, tpb, req.extra_keys, root=req.root, with_next=bool(self._with_next)
            )
            return start, chain[start:]
        parent = hashes[-1] if hashes else req.root
        data, sha256 = self._block_bytes, hashlib.sha256
        new: list[BlockHash] = []
        for _ in range((tokens - self._with_next) // tpb - start):
            parent = sha256(parent + data).digest()  # type: ignore[assignment]
            new.append(parent)
        return start, new

    def settle(self, index: int, tokens: int) -> None:
        """Request ``index`` has ``tokens`` verified tokens (at least what it had): the
        missing ones are appended, full blocks hashed, unused blocks released; updates
        ``tokens``, ``blocks`` and ``hash_at`` at ``index``. The same as the cache's
        ``commit`` of the missing tokens (:meth:`SpecDecodeCache._settle
        <kvbudget.cache.SpecDecodeCache>` with only kv pools)."""
        req = self._requests[index]
        held = req.tokens
        add = tokens - len(held)
        if add:
            held.extend(self._ids(add))
        tpb, table = self._tpb, req.table
        hashes = req.hashes
        start = len(hashes)
        if self._reuse and (tokens - self._with_next) // tpb > start:
            lo = start * tpb  # the first token the next block's hash reads
            if (
                lo < self._base[index]
                and held[lo : self._base[index]] == self._fill[: self._base[index] - lo]
            ):
                self._base[index] = lo  # earlier tokens of token_id too
            if lo < self._base[index] or req.extra_keys:
                extend_block_hashes(
                    hashes,
                    held,
                    tpb,
                    req.extra_keys,
                    root=req.root,
                    with_next=bool(self._with_next),
                )
            else:  # every block to hash is token_id only: one packed copy serves all
                parent = hashes[-1] if hashes else req.root
                data, sha256 = self._block_bytes, hashlib.sha256
                for _ in range((tokens - self._with_next) // tpb - start):
                    parent = sha256(parent + data).digest()  # type: ignore[assignment]
                    hashes.append(parent)
            self._gpu.register(table, hashes, start)
            self.hash_at[index] = (len(hashes) + 1) * tpb + self._with_next
        if len(table) * tpb - tokens >= tpb:  # blocks past ceil(tokens / tpb)
            self._gpu.release_tail(table, len(table) + (-tokens // tpb))
        self.tokens[index] = tokens
        self.blocks[index] = len(table)
