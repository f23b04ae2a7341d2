"""An engine's pools as kvbudget's cache enforces them, for ``simulate --engine X``.

The replay drives the real :class:`~kvbudget.SpecDecodeCache`. Under ``--engine
kvbudget`` it is built from the plan as it is. Under another engine it is built from
that engine's pools (:attr:`EnginePlan.pools <kvbudget.plan_types.EnginePlan.pools>`),
mapped one to one onto the cache's structure:

* a role's GPU and host pools of growing blocks (``kind == "kv"``) become its pools,
  with the engine's block size and block count less the blocks it holds back (vLLM's
  null block); a pool shared by both roles (vLLM's one block pool) gives both roles the
  same blocks, which is what the cache's lockstep block ids are;
* the capacity (sequences at once, lookahead, batch) is the engine's.

Pools the cache cannot enforce the way the engine does are refused, not approximated:
vLLM's hybrid pool (several KV cache groups drawing on one pool, each charged its own
blocks per request), and engines' window and state pools (shared between requests by
the engine; the cache reserves them per sequence).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.engines.kvbudget_cache import MODEL as OWN_CACHE
from kvbudget.engines.kvbudget_cache import own_pools
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import EnginePlan, ManagerPlan, Plan, PoolPlan, TierPlan
from kvbudget.split import Tier


def cache_plan(plan: Plan) -> Plan:
    """The plan the replay's cache is built from: ``plan`` under kvbudget's own cache,
    else the engine's pools mapped onto the cache (module docstring). Pure.

    Raises InvalidArgumentError for an engine pool the cache cannot enforce.
    """
    engine = plan.engine
    if engine.name == OWN_CACHE.name:
        return plan
    unsupported = sorted({p.kind for p in engine.pools if p.kind != "kv"})
    if unsupported:
        raise InvalidArgumentError(
            f"simulate --engine {engine.name} replays the engine's pools of growing blocks; "
            f"{engine.name}'s {', '.join(unsupported)} pool(s) for {plan.target} are not "
            "replayed (the engine shares them between requests; kvbudget's cache reserves "
            "them per sequence): simulate this model with --engine kvbudget"
        )
    (tpb,) = {p.tokens_per_block for p in engine.pools}
    managers = tuple(_manager(m, engine.pools, tpb) for m in plan.managers)
    capacity = replace(
        engine.capacity,
        tokens_per_block=tpb,
        gpu_blocks=min(m.gpu.blocks for m in managers),
        host_blocks=min(m.host.blocks for m in managers),
        disk_blocks=0,
        tokens=min(m.gpu.blocks for m in managers) * tpb,
        host_tokens=min(m.host.blocks for m in managers) * tpb,
        disk_tokens=0,
    )
    enforced = EnginePlan(
        name=OWN_CACHE.name,
        version=OWN_CACHE.version,
        source=OWN_CACHE.source,
        pools=own_pools(managers),
        capacity=capacity,
        settings={},
        detail={"enforces": engine.id},
    )
    return replace(plan, managers=managers, engine=enforced, tokens_per_block=tpb)


def _manager(m: ManagerPlan, pools: tuple[PoolPlan, ...], tpb: int) -> ManagerPlan:
    """``m`` holding the engine's blocks of its role in each tier."""
    block_bytes = m.slope_bytes_per_token * tpb
    tiers: dict[Tier, TierPlan] = {}
    for tier in ("gpu", "host", "disk"):
        own = [p for p in pools if p.tier == tier and p.role in (m.role, "target+draft")]
        blocks = min((p.blocks - p.reserved_blocks for p in own), default=0)
        tiers[tier] = TierPlan(
            tier=tier,
            bytes=blocks * block_bytes,
            blocks=blocks,
            tokens=blocks * tpb,
            padding_bytes=0,
        )
    return replace(
        m,
        tokens_per_block=tpb,
        fixed_bytes=0,
        window_bytes=0,
        window_groups=(),
        state_bytes_per_seq=0,
        cached_states=0,
        state_bytes_per_checkpoint=0,
        gpu=tiers["gpu"],
        host=tiers["host"],
        disk=tiers["disk"],
    )


__all__ = ["cache_plan"]
