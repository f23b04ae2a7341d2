"""Budget policies: plan variants of the same inputs, each one way of splitting a budget.

=========================  ================================================================
``kvbudget``               the plan as :func:`kvbudget.plan` makes it: GPU by slope after
                           fixed costs (same tokens in both managers), host by slope
``doubled-host``           every manager handed the *whole* host budget (engines before the
                           fix): each holds ``H // block_bytes`` host blocks, the common
                           count is the target's, and ``managers x H`` bytes are pinned
``equal-split``            GPU and host budgets halved between target and draft: the common
                           blocks are what the target's half holds; the draft's half idles
``target-geometry-draft``  the draft priced at the target's bytes per layer: draft slope
                           ``S_t x L_d / L_t`` (the ``(1 + L_d/L_t)`` approximation of the
                           pair), split by :func:`kvbudget.split.split_budget`; both pools
                           get that count; the draft's real bytes per block may need more
                           than it was given (``gpu_overcommit_bytes``: an engine would run
                           out of memory) or less (idle)
``no-host``                no host tier (the host budget dropped)
=========================  ================================================================

Every variant is a new :class:`~kvbudget.plan_types.Plan` (``dataclasses.replace`` of the
base; the base is not modified) whose ``capacity.<tier>_blocks`` and managers'
:class:`~kvbudget.plan_types.TierPlan` the cache is built from, so each policy's replay
obeys the cache's block accounting with that policy's block counts. The variants use
the reported PP stage's budget (``Plan.managers``); with one manager (no draft cache) the
split policies equal ``kvbudget``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType

from kvbudget.cost import CacheCost
from kvbudget.engines.kvbudget_cache import lockstep_capacity, own_pools
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import ManagerPlan, Plan, TierPlan
from kvbudget.split import Tier, split_budget


@dataclass(frozen=True, kw_only=True)
class PolicyPlan:
    """One policy's plan and what it pins.

    * ``pinned_host_bytes``: host bytes the managers pin per rank (their host shares);
      ``host_budget_bytes``: the host budget asked for per rank; ``node_*`` the same for
      the node's ``gpus_per_node`` ranks, next to ``node_host_memory_bytes`` (the node's
      memory when known).
    * ``gpu_overcommit_bytes``: GPU bytes the draft's real geometry needs beyond its
      share (``target-geometry-draft`` only; 0 elsewhere).
    """

    name: str
    plan: Plan
    pinned_host_bytes: int
    host_budget_bytes: int
    node_pinned_host_bytes: int
    node_host_memory_bytes: int | None
    gpu_overcommit_bytes: int = 0
    notes: tuple[str, ...] = ()


def policy_plans(base: Plan, names: tuple[str, ...] | None = None) -> tuple[PolicyPlan, ...]:
    """The plans of ``names`` (default: every policy) from ``base``. Pure.

    Raises InvalidArgumentError for an unknown policy name.
    """
    names = POLICIES if names is None else names
    for name in names:
        if name not in POLICY_VARIANTS:
            raise InvalidArgumentError(
                f"unknown policy {name!r}; choose from {', '.join(POLICIES)} (--policies)"
            )
    return tuple(_build(base, name) for name in names)


Variant = Callable[[Plan], tuple[Plan, int, list[str]]]


def _as_planned(base: Plan) -> tuple[Plan, int, list[str]]:
    return base, 0, []


def _no_host(base: Plan) -> tuple[Plan, int, list[str]]:
    built = _with_tier_shares(base, "host", [0] * len(base.managers))
    return replace(built, budget=replace(built.budget, host_bytes=0)), 0, []


def _doubled_host(base: Plan) -> tuple[Plan, int, list[str]]:
    host = base.budget.host_bytes
    return _with_tier_shares(base, "host", [host] * len(base.managers)), 0, []


def _equal_split(base: Plan) -> tuple[Plan, int, list[str]]:
    built = base
    n = len(base.managers)
    for tier in ("gpu", "host"):
        total = sum(m.tier(tier).bytes for m in base.managers)
        shares = [total - (n - 1) * (total // n)] + [total // n] * (n - 1)
        built = _with_tier_shares(built, tier, shares)
    return built, 0, []


def _build(base: Plan, name: str) -> PolicyPlan:
    built, overcommit, notes = POLICY_VARIANTS[name](base)
    if len(base.managers) == 1 and name in ("equal-split", "target-geometry-draft"):
        notes.append("one cache manager (no draft cache): the same as kvbudget")
    pinned = sum(m.host.bytes for m in built.managers)
    per_node = base.budget.gpus_per_node
    return PolicyPlan(
        name=name,
        plan=built,
        pinned_host_bytes=pinned,
        host_budget_bytes=built.budget.host_bytes,
        node_pinned_host_bytes=pinned * per_node,
        node_host_memory_bytes=base.budget.host_memory_bytes,
        gpu_overcommit_bytes=overcommit,
        notes=tuple(notes),
    )


def _blocks(m: ManagerPlan, tier: Tier, share: int) -> int | None:
    """Whole blocks ``m`` holds in ``share`` bytes of ``tier`` (None: no growing layer)."""
    if m.block_bytes == 0:
        return None
    fixed = m.fixed_bytes if tier == "gpu" else 0
    return max(0, share - fixed) // m.block_bytes


def _with_tier_shares(
    plan: Plan, tier: Tier, shares: list[int], *, priced: list[int] | None = None
) -> Plan:
    """``plan`` with each manager's ``tier`` share set to ``shares`` and the common block
    count recomputed: the fewest blocks any growing manager's share holds (priced at
    ``priced`` bytes per block when given)."""
    counts = []
    for i, (m, share) in enumerate(zip(plan.managers, shares, strict=True)):
        per_block = m.block_bytes if priced is None else priced[i]
        if per_block == 0:
            continue
        fixed = m.fixed_bytes if tier == "gpu" else 0
        counts.append(max(0, share - fixed) // per_block)
    old: int = getattr(plan.capacity, f"{tier}_blocks")
    common = min(counts) if counts else old
    tpb = plan.tokens_per_block
    managers = []
    for m, share in zip(plan.managers, shares, strict=True):
        fixed = m.fixed_bytes if tier == "gpu" else 0
        own = None if priced is not None else _blocks(m, tier, share)
        blocks = common if own is None else own  # own >= common: common is the fewest
        t = TierPlan(
            tier=tier,
            bytes=share,
            blocks=blocks,
            tokens=blocks * tpb,
            padding_bytes=share - fixed - blocks * m.block_bytes,
        )
        managers.append(
            replace(m, gpu=t) if tier == "gpu" else replace(m, host=t) if tier == "host" else m
        )
    cap = plan.capacity
    if tier == "gpu":
        cap = lockstep_capacity(cap, common)  # the plan's own capacity rule
    else:
        cap = replace(cap, **{f"{tier}_blocks": common, f"{tier}_tokens": common * tpb})
    engine = replace(plan.engine, capacity=cap, pools=own_pools(tuple(managers)))
    return replace(plan, managers=tuple(managers), engine=engine)


def _target_geometry(base: Plan) -> tuple[Plan, int, list[str]]:
    """The draft priced at ``S_t x L_d / L_t`` bytes per token (module docstring)."""
    target, draft = base.manager("target"), base.manager("draft")
    if target is None or draft is None or target.num_layers == 0:
        return base, 0, []
    priced = target.slope_bytes_per_token * draft.num_layers // target.num_layers
    t_cost = CacheCost(target.slope_bytes_per_token, target.fixed_bytes)
    d_cost = CacheCost(priced, draft.fixed_bytes)
    tpb = base.tokens_per_block
    built = base
    for tier in ("gpu", "host"):
        total = sum(m.tier(tier).bytes for m in base.managers)
        split = split_budget(total, target=t_cost, draft=d_cost, tier=tier)
        shares = [split.target if m.role == "target" else split.draft for m in base.managers]
        per_block = [m.block_bytes if m.role == "target" else priced * tpb for m in base.managers]
        built = _with_tier_shares(built, tier, shares, priced=per_block)
    d = built.manager("draft")
    assert d is not None
    overcommit = max(0, -d.gpu.padding_bytes)
    notes = [
        f"draft priced at {priced:,} B/token (target {target.slope_bytes_per_token:,} B/token x "
        f"{draft.num_layers}/{target.num_layers} layers); its real geometry is "
        f"{draft.slope_bytes_per_token:,} B/token"
    ]
    if overcommit:
        notes.append(
            f"the draft's real blocks need {overcommit:,} GPU bytes more than its share: an "
            "engine would run out of memory; the replay runs the blocks as priced"
        )
    elif priced == draft.slope_bytes_per_token:
        notes.append("the priced and real draft geometry agree: the same split as kvbudget")
    return built, overcommit, notes


# the policies by name, in the order they are reported: each a pure variant of the plan
POLICY_VARIANTS: MappingProxyType[str, Variant] = MappingProxyType(
    {
        "kvbudget": _as_planned,
        "doubled-host": _doubled_host,
        "equal-split": _equal_split,
        "target-geometry-draft": _target_geometry,
        "no-host": _no_host,
    }
)
POLICIES: tuple[str, ...] = tuple(POLICY_VARIANTS)
