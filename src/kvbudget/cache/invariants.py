"""The integrity check behind ``SpecDecodeCache.check_invariants`` (O(cache size)).

Kept apart from the coordinator so the hot paths stay short; it reads the cache's
internals and raises AssertionError at the first broken invariant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbudget.cache.ids import BlockHash, BlockId, RequestId
from kvbudget.cache.manager import GPU, HOST, RoleManager
from kvbudget.cache.request import Request, SeqBlocks
from kvbudget.split import TIERS

if TYPE_CHECKING:
    from kvbudget.cache.storage import CacheStorage


def _fail(message: str) -> None:
    raise AssertionError(message)


@dataclass(frozen=True, kw_only=True)
class CacheView:
    """What the check reads of a cache: its settings, managers, requests and storage."""

    tokens_per_block: int
    max_reserve_tokens: int
    prefix_reuse: bool
    managers: tuple[RoleManager, ...]
    requests: Mapping[RequestId, Request[RoleManager]]
    storage: CacheStorage | None


def check_cache(cache: CacheView) -> None:
    """Check every invariant listed in ``SpecDecodeCache.check_invariants``."""
    tpb = cache.tokens_per_block
    managers, requests = cache.managers, cache.requests
    for m in managers:
        for _, _, pool in m.named_pools():
            pool.check()
        _check_owners(
            m, [(rid, r.seqs[managers.index(m)], r.swapped) for rid, r in requests.items()]
        )
        for name, pool in zip(TIERS, m.tiers, strict=True):
            # pool.check() holds num_blocks to plan_blocks; this holds that to the plan
            if pool.plan_blocks != m.plan.tier(name).blocks:
                _fail(f"{pool.name}: plan_blocks {pool.plan_blocks} is not the plan's")
    for rid, req in requests.items():
        n = len(req.tokens)
        if req.num_reserved < 0 or req.num_reserved > cache.max_reserve_tokens:
            _fail(f"request {rid!r}: reserved {req.num_reserved} out of range")
        if req.swapped and req.num_reserved:
            _fail(f"request {rid!r}: swapped out with a reservation")
        want = -(-(n + req.num_reserved) // tpb)
        if cache.prefix_reuse and len(req.hashes) != n // tpb:
            _fail(f"request {rid!r}: {len(req.hashes)} hashes for {n} tokens")
        tier = HOST if req.swapped else GPU
        rows: list[list[BlockHash | None]] = []
        for m, seq in zip(managers, req.seqs, strict=True):
            if len(seq.table) != want:
                _fail(f"request {rid!r}: {m.role} holds {len(seq.table)} blocks, want {want}")
            pool = m.tiers[tier]
            row = [pool.hash_of(b) for b in seq.table]
            for i, h in enumerate(row):
                if h is not None and (i >= len(req.hashes) or h != req.hashes[i]):
                    _fail(f"request {rid!r}: {m.role} block {i} holds a foreign hash")
            rows.append(row)
            _check_fixed(m, seq, rid, n, req.num_reserved, req.swapped)
        if any(row != rows[0] for row in rows[1:]):
            _fail(f"request {rid!r}: roles hold different tokens")
    first = managers[0]
    for m in managers[1:]:
        for t, (a, b) in enumerate(zip(first.tiers, m.tiers, strict=True)):
            if a.hashes.keys() != b.hashes.keys():
                _fail(f"{TIERS[t]} tier caches different blocks in {first.role} and {m.role}")
            # the same eviction order, or the next evictions would part the roles
            if [a.hash_of(x) for x in a.cached_in_lru_order()] != [
                b.hash_of(x) for x in b.cached_in_lru_order()
            ]:
                _fail(f"{TIERS[t]} tier LRU order differs in {first.role} and {m.role}")
    storage = cache.storage
    if storage is not None:
        for m, rs in zip(managers, storage.roles, strict=True):
            for name in TIERS:
                if rs.tier_bytes(name) > m.plan.tier(name).bytes:
                    _fail(f"{m.role}: {name} storage exceeds the plan's bytes")


def _check_owners(m: RoleManager, seqs: list[tuple[RequestId, SeqBlocks, bool]]) -> None:
    """refcount of every block == number of request tables that list it, once each."""
    window_pools = m.windows.pools if m.windows is not None else ()
    owners = [Counter[int]() for _ in m.tiers]
    window_owners = [Counter[int]() for _ in window_pools]
    slots = Counter[int]()
    for rid, seq, swapped in seqs:
        if len(set(seq.table)) != len(seq.table):
            _fail(f"{m.role}: request {rid!r} lists a block twice")
        owners[HOST if swapped else GPU].update(seq.table)
        for g, wt in enumerate(seq.window_tables):
            window_owners[g].update(wt)
        if seq.slot is not None:
            slots[seq.slot] += 1
    for pool, count in zip((*m.tiers, *window_pools), (*owners, *window_owners), strict=True):
        for b in map(BlockId, range(pool.num_blocks)):
            if pool.owners(b) != count.get(b, 0):
                _fail(f"{pool.name}: block {b} refcount {pool.owners(b)}, owners {count[b]}")
    if m.state is not None:
        for b in map(BlockId, range(m.state.num_blocks)):
            if m.state.owners(b) != slots.get(b, 0):
                _fail(f"{m.state.name}: slot {b} owned {slots[b]} times")


def _check_fixed(
    m: RoleManager, seq: SeqBlocks, rid: RequestId, n: int, reserved: int, swapped: bool
) -> None:
    if m.state is not None and seq.slot is None and not swapped:
        _fail(f"request {rid!r}: {m.role} has no recurrent-state slot")
    windows = m.windows
    if len(seq.window_tables) != (len(windows.groups) if windows is not None else 0):
        _fail(f"request {rid!r}: {m.role} window tables missing")
    if windows is None:
        return
    for g, group in enumerate(windows.groups):
        first, end = windows.span(g, n, n + reserved)
        wt = seq.window_tables[g]
        if seq.window_first[g] != first or len(wt) != end - first:
            _fail(f"request {rid!r}: {m.role} window {group.window_tokens} holds wrong blocks")
