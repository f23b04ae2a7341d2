"""What ``SpecDecodeCache.stats()`` returns, and how it is assembled.

* :class:`PoolStats`, :class:`CacheStats`: immutable snapshots (public);
* :class:`KvCounts`: the counters of one tier's kv pool (public, a tuple);
* :class:`RequestCounters`: the coordinator's running totals (mutable, internal);
* :func:`snapshot`: reads every manager's pools and the counters into a
  :class:`CacheStats`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Role
from kvbudget.split import TIERS, Tier

if TYPE_CHECKING:
    from kvbudget.cache.kv_tiers import KvTiers
    from kvbudget.cache.manager import RoleManager
    from kvbudget.cache.request import Request


@dataclass(frozen=True, kw_only=True)
class PoolStats:
    """One pool: ``free_blocks + used_blocks + cached_blocks == total_blocks``.

    ``kind`` is ``"kv"`` (growing layers; one pool shared by every role, reported in each
    with the counts alike), ``"window<W>"`` (a sliding-window group), ``"state"``
    (recurrent-state slots) or ``"state_cache"`` (cached states at block boundaries).
    ``plan_blocks - total_blocks`` blocks of the plan stay idle (the other role could not
    hold their tokens). ``hit_blocks``: prefix-hit blocks served from this pool;
    ``offloaded_blocks``: copied into it from the tier above; ``onboarded_blocks``: copied
    out of it back to the GPU; ``evicted_blocks``: cached blocks dropped from it with no
    lower tier to keep them.
    """

    role: Role
    tier: Tier
    kind: str
    plan_blocks: int
    total_blocks: int
    free_blocks: int
    used_blocks: int
    cached_blocks: int
    hit_blocks: int
    offloaded_blocks: int
    onboarded_blocks: int
    evicted_blocks: int


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """All pools plus request counters. ``hit_tokens / prompt_tokens`` is the hit rate."""

    pools: tuple[PoolStats, ...]
    running_requests: int
    swapped_requests: int
    prompt_tokens: int
    hit_tokens: int
    swapped_out: int
    recomputed: int

    @property
    def hit_rate(self) -> float:
        """Share of admitted prompt tokens served from the cache (0.0 with no prompts)."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def pool(self, role: Role, tier: Tier = "gpu", kind: str = "kv") -> PoolStats:
        """The stats of one pool; raises InvalidArgumentError when there is none."""
        for p in self.pools:
            if p.role == role and p.tier == tier and p.kind == kind:
                return p
        raise InvalidArgumentError(f"no {kind} pool for role {role!r} in tier {tier!r}")


class KvCounts(NamedTuple):
    """The counters of the shared kv pool of one tier, as in its :class:`PoolStats`
    (:meth:`SpecDecodeCache.kv_counts <kvbudget.SpecDecodeCache.kv_counts>`: what a
    caller reading them every few steps needs, without a whole snapshot)."""

    used_blocks: int
    cached_blocks: int
    offloaded_blocks: int
    onboarded_blocks: int


@dataclass(slots=True)
class RequestCounters:
    """Running totals kept by the coordinator; copied into :class:`CacheStats`."""

    prompt_tokens: int = 0
    hit_tokens: int = 0
    swapped_out: int = 0
    recomputed: int = 0


def snapshot(
    kv: KvTiers,
    managers: Iterable[RoleManager],
    requests: Collection[Request[RoleManager]],
    counters: RequestCounters,
) -> CacheStats:
    """A :class:`CacheStats` of every pool (in role order: the shared kv tiers, then
    :meth:`RoleManager.named_pools`) and of ``requests``. Reads only."""
    pools: list[PoolStats] = []
    for m in managers:
        kv_pools = [
            (t, "kv", p, m.plan.tier(t).blocks) for t, p in zip(TIERS, kv.tiers, strict=True)
        ]
        own = [(t, kind, p, p.plan_blocks) for t, kind, p in m.named_pools()]
        for tier, kind, p, plan_blocks in kv_pools + own:
            pools.append(
                PoolStats(
                    role=m.role, tier=tier, kind=kind, plan_blocks=plan_blocks,
                    total_blocks=p.num_blocks, free_blocks=p.num_free, used_blocks=p.num_used,
                    cached_blocks=p.num_cached, hit_blocks=p.hit_blocks,
                    offloaded_blocks=p.offloaded_blocks, onboarded_blocks=p.onboarded_blocks,
                    evicted_blocks=p.evicted_blocks,
                )
            )  # fmt: skip
    swapped = sum(1 for r in requests if r.swapped)
    return CacheStats(
        pools=tuple(pools),
        running_requests=len(requests) - swapped,
        swapped_requests=swapped,
        prompt_tokens=counters.prompt_tokens,
        hit_tokens=counters.hit_tokens,
        swapped_out=counters.swapped_out,
        recomputed=counters.recomputed,
    )
