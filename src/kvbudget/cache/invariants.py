"""The integrity check behind ``SpecDecodeCache.check_invariants`` (O(cache size)).

Kept apart from the coordinator so the hot paths stay short; it reads the cache's
internals and raises AssertionError at the first broken invariant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbudget.cache.hashing import num_hashed_blocks
from kvbudget.cache.ids import BlockId, RequestId
from kvbudget.cache.kv_tiers import GPU, HOST, KvTiers
from kvbudget.cache.manager import RoleManager
from kvbudget.cache.request import Request, SeqBlocks
from kvbudget.split import TIERS

if TYPE_CHECKING:
    from kvbudget.cache.storage import CacheStorage


def _fail(message: str) -> None:
    raise AssertionError(message)


@dataclass(frozen=True, kw_only=True)
class CacheView:
    """What the check reads of a cache: its settings, pools, requests and storage."""

    tokens_per_block: int
    max_reserve_tokens: int
    prefix_reuse: bool
    with_next: bool  # block hashes cover the token after the block (drop_last_block)
    kv: KvTiers
    managers: tuple[RoleManager, ...]
    requests: Mapping[RequestId, Request[RoleManager]]
    storage: CacheStorage | None


def check_cache(cache: CacheView) -> None:
    """Check every invariant listed in ``SpecDecodeCache.check_invariants``."""
    tpb = cache.tokens_per_block
    kv, managers, requests = cache.kv, cache.managers, cache.requests
    for name, pool in zip(TIERS, kv.tiers, strict=True):
        pool.check()  # holds num_blocks to plan_blocks; this holds that to every role's plan
        want = min(m.plan.tier(name).blocks for m in managers)
        if pool.plan_blocks != want:
            _fail(f"{pool.name}: plan_blocks {pool.plan_blocks} is not the plan's {want}")
    _check_kv_owners(kv, requests)
    for r, m in enumerate(managers):
        for _, _, pool in m.named_pools():
            pool.check()
        _check_own(m, [(rid, req.seqs[r], req.swapped) for rid, req in requests.items()])
    for rid, req in requests.items():
        n = len(req.tokens)
        if req.num_reserved < 0 or req.num_reserved > cache.max_reserve_tokens:
            _fail(f"request {rid!r}: reserved {req.num_reserved} out of range")
        if req.swapped and req.num_reserved:
            _fail(f"request {rid!r}: swapped out with a reservation")
        want = -(-(n + req.num_reserved) // tpb)
        hashed = num_hashed_blocks(n, tpb, with_next=cache.with_next)
        if cache.prefix_reuse and len(req.hashes) != hashed:
            _fail(f"request {rid!r}: {len(req.hashes)} hashes for {n} tokens, want {hashed}")
        if len(req.table) != want:
            _fail(f"request {rid!r}: holds {len(req.table)} kv blocks, want {want}")
        pool = kv.tiers[HOST if req.swapped else GPU]
        for i, b in enumerate(req.table):
            h = pool.hash_of(b)
            if h is not None and (i >= len(req.hashes) or h != req.hashes[i]):
                _fail(f"request {rid!r}: kv block {i} holds a foreign hash")
        for m, seq in zip(managers, req.seqs, strict=True):
            _check_fixed(m, seq, rid, n, req.num_reserved, req.swapped)
        if len(req.parts) != sum(m.has_fixed for m in managers):
            _fail(f"request {rid!r}: its parts miss a role with windows or state")
    storage = cache.storage
    if storage is not None:
        for m, rs in zip(managers, storage.roles, strict=True):
            for name in TIERS:
                if rs.tier_bytes(name) > m.plan.tier(name).bytes:
                    _fail(f"{m.role}: {name} storage exceeds the plan's bytes")


def _check_kv_owners(kv: KvTiers, requests: Mapping[RequestId, Request[RoleManager]]) -> None:
    """refcount of every kv block == number of request tables that list it, once each."""
    owners = [Counter[int]() for _ in kv.tiers]
    for rid, req in requests.items():
        if len(set(req.table)) != len(req.table):
            _fail(f"request {rid!r} lists a kv block twice")
        owners[HOST if req.swapped else GPU].update(req.table)
    for pool, count in zip(kv.tiers, owners, strict=True):
        for b in map(BlockId, range(pool.num_blocks)):
            if pool.owners(b) != count.get(b, 0):
                _fail(f"{pool.name}: block {b} refcount {pool.owners(b)}, owners {count[b]}")


def _check_own(m: RoleManager, seqs: list[tuple[RequestId, SeqBlocks, bool]]) -> None:
    """refcount of every window block and state slot == the tables that list it; no
    request owns a cached state."""
    window_pools = m.windows.pools if m.windows is not None else ()
    window_owners = [Counter[int]() for _ in window_pools]
    slots = Counter[int]()
    for _, seq, _ in seqs:
        for g, wt in enumerate(seq.window_tables):
            window_owners[g].update(wt)
        if seq.slot is not None:
            slots[seq.slot] += 1
    for pool, count in zip(window_pools, window_owners, strict=True):
        for b in map(BlockId, range(pool.num_blocks)):
            if pool.owners(b) != count.get(b, 0):
                _fail(f"{pool.name}: block {b} refcount {pool.owners(b)}, owners {count[b]}")
    if m.state is not None:
        for b in map(BlockId, range(m.state.num_blocks)):
            if m.state.owners(b) != slots.get(b, 0):
                _fail(f"{m.state.name}: slot {b} owned {slots[b]} times")
        cp = m.state.checkpoints
        if cp.num_used:
            _fail(f"{cp.name}: {cp.num_used} cached states are owned (none may be)")


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
