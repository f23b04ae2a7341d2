"""Immutable snapshots of the cache's pools and counters, returned by ``stats()``."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Role
from kvbudget.split import Tier


@dataclass(frozen=True, kw_only=True)
class PoolStats:
    """One pool: ``free_blocks + used_blocks + cached_blocks == total_blocks``.

    ``kind`` is ``"kv"`` (growing layers), ``"window<W>"`` (a sliding-window group) or
    ``"state"`` (recurrent-state slots). ``plan_blocks - total_blocks`` blocks of the plan
    stay idle (the other role could not hold their tokens). ``hit_blocks``: prefix-hit
    blocks served from this pool; ``offloaded_blocks``: copied into it from the tier above;
    ``onboarded_blocks``: copied out of it back to the GPU; ``evicted_blocks``: cached
    blocks dropped from it with no lower tier to keep them.
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
