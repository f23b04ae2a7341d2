"""A sweep's tasks: :func:`evaluate_shard`, a pure function of (settings, one replica of
one configuration), and :func:`combine`, the row of a configuration from its replicas.

A task plans the configuration as ``kvbudget plan`` does (``resolve_deployment`` then
``build_plan``: the same code, so the row and its reproduce command agree) and, for the
traffic objective, replays its replica of the trace: the requests the sweep's
``dp_router`` sends to replica ``i`` of ``dp`` (:func:`kvbudget.sim.shard`), through a
cache of its own (:func:`kvbudget.sim.replay_shard`), as ``kvbudget simulate --dp``
does. Replicas share no cache, so the replays are independent tasks and their merge
(:func:`kvbudget.sim.merge_shards`) is the deployment's exact replay: the row's
``simulate_command`` prints the same figures. A refusal is a row with the engine's
reason, never an exception: one bad configuration does not stop a sweep.

:func:`shards` lists a configuration's tasks (``dp`` of them for the traffic
objective, else one); :func:`evaluate` runs them in this process and combines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvbudget.errors import (
    EngineRefusedError,
    InfeasibleBudgetError,
    InvalidArgumentError,
    KvBudgetError,
)
from kvbudget.search.row import Status, SweepRow, TrafficMetrics
from kvbudget.search.settings import SweepSettings
from kvbudget.search.space import SweepConfig

if TYPE_CHECKING:
    from kvbudget.plan_types import Plan
    from kvbudget.sim import PolicyMetrics, ShardResult


@dataclass(frozen=True, kw_only=True)
class ShardTask:
    """One task: replica ``replica`` of ``replicas`` of ``config`` (one replica, the
    whole trace, for a configuration that is not replayed)."""

    config: SweepConfig
    replica: int = 0
    replicas: int = 1


@dataclass(frozen=True, kw_only=True)
class ShardOutcome:
    """A task's result: the configuration's row without traffic (the same from every
    replica) and the replica's replay, or why the replay failed."""

    task: ShardTask
    row: SweepRow
    shard: ShardResult | None = None
    error: str | None = None


def shards(settings: SweepSettings, config: SweepConfig) -> tuple[ShardTask, ...]:
    """The tasks of ``config``: one per DP replica for the traffic objective (a layout
    that cannot run has one, its refusal), else one."""
    n = config.dp if settings.objective == "traffic" and config.problem is None else 1
    return tuple(ShardTask(config=config, replica=r, replicas=n) for r in range(n))


def evaluate(settings: SweepSettings, config: SweepConfig) -> SweepRow:
    """The row of ``config`` under ``settings`` (checked), its tasks run in this
    process. Pure: the same arguments give an equal row in any process."""
    return combine(settings, [evaluate_shard(settings, t) for t in shards(settings, config)])


def evaluate_shard(settings: SweepSettings, task: ShardTask) -> ShardOutcome:
    """Plan ``task.config`` and, for the traffic objective, replay its replica. Pure;
    never raises a :class:`KvBudgetError` (a refusal is the row's status)."""
    row, plan = plan_row(settings, task.config)
    if plan is None or settings.objective != "traffic":
        return ShardOutcome(task=task, row=row)
    try:
        result = replay_replica(plan, settings, task.replica, task.replicas)
    except KvBudgetError as exc:
        return ShardOutcome(task=task, row=row, error=f"simulate: {exc}")
    return ShardOutcome(task=task, row=row, shard=result)


def combine(settings: SweepSettings, outcomes: Sequence[ShardOutcome]) -> SweepRow:
    """The row of one configuration from every one of its tasks' outcomes (any order):
    the plan's row, with the replicas' merged replay and the SLO verdict for traffic."""
    ordered = sorted(outcomes, key=lambda o: o.task.replica)
    row = ordered[0].row
    if settings.objective != "traffic" or row.status != "ok":
        return row
    errors = [o.error for o in ordered if o.error is not None]
    if errors:
        return replace(row, status="invalid", reason=errors[0])
    parts = [o.shard for o in ordered if o.shard is not None]
    return with_traffic(row, merged(parts), settings)


def plan_row(settings: SweepSettings, config: SweepConfig) -> tuple[SweepRow, Plan | None]:
    """``config``'s row from its plan, and the plan (None: the row says why not)."""
    base = SweepRow(
        config=config,
        command=config.command(settings.space),
        simulate_command=simulate_command(settings, config),
        status="invalid",
        gpus=config.gpus,
    )
    if config.problem is not None:
        return replace(base, reason=config.problem), None
    try:
        plan = _plan(config, settings)
    except EngineRefusedError as exc:
        reason = f"{config.engine}: {exc}"  # and what the deployment's plan warned
        return replace(base, status="infeasible", reason=reason, warnings=exc.warnings), None
    except InfeasibleBudgetError as exc:
        return replace(base, status="infeasible", reason=str(exc)), None
    except KvBudgetError as exc:
        return replace(base, reason=str(exc)), None
    row = replace(
        base,
        status="ok",
        capacity=plan.capacity.to_dict(),
        gpus_per_node=plan.budget.gpus_per_node,
        gpu_kv_bytes_per_rank=plan.budget.gpu_bytes,
        engine_settings=plan.engine.to_dict()["settings"],
        warnings=tuple(plan.warnings),
        price_per_gpu_hour=settings.prices.get(config.gpu),
    )
    if settings.objective == "capacity" and plan.capacity.max_concurrency == 0:
        # the engine starts (and serves shorter sequences): not a capacity answer
        held = (
            f"holds no whole sequence of {plan.capacity.max_seq_len} tokens at once "
            "(the engine starts; shorter sequences fit)"
        )
        return replace(row, status="infeasible", reason=held), None
    return row, plan


def simulate_command(settings: SweepSettings, config: SweepConfig) -> str | None:
    """``kvbudget simulate ...`` reproducing ``config``'s traffic figures (quoted for a
    POSIX shell); None for the capacity objective."""
    import shlex

    if settings.objective != "traffic":
        return None
    args = [*config.plan_args(settings.space), *settings.traffic.simulate_args()]
    return shlex.join(["kvbudget", "simulate", *args])


def _plan(config: SweepConfig, settings: SweepSettings) -> Plan:
    from kvbudget.deployment import resolve_deployment
    from kvbudget.planner import build_plan

    return build_plan(resolve_deployment(**config.plan_kwargs(settings.space)))  # type: ignore[arg-type]


def replay_replica(plan: Plan, settings: SweepSettings, replica: int, replicas: int) -> ShardResult:
    """Replica ``replica`` of ``replicas``' replay of the sweep's first policy, with
    ``kvbudget simulate``'s settings (its defaults for what the sweep does not set).
    Raises InvalidArgumentError (a GPU without a FLOPs figure, a bad trace row, a plan
    the cache cannot be built from), OSError (an unreadable trace)."""
    from kvbudget.sim import (
        AcceptanceModel,
        PrefixSynthesis,
        ReplayConfig,
        cache_plan,
        gpu_rates,
        policy_plans,
        read_trace,
        replay_shard,
        roofline_for,
        shard,
    )

    t = settings.traffic
    rates = gpu_rates(plan.budget.gpu_name or settings.space.gpus[0])
    if rates.peak_flops_per_s is None:
        raise InvalidArgumentError(
            f"no peak FLOPs figure for {rates.name} in gpu_flops.csv; sweep another --gpu"
        )
    (variant,) = policy_plans(cache_plan(plan), t.policies[:1])
    # preempt, sample_steps and fast_forward: ReplayConfig's defaults, the ones
    # kvbudget simulate replays with
    config = ReplayConfig(
        acceptance=AcceptanceModel.parse(t.acceptance),
        max_num_batched_tokens=settings.space.max_num_batched_tokens,
        seed=t.seed,
    )
    requests: Any = read_trace(
        t.trace_path(),
        prefixes=PrefixSynthesis(seed=t.seed),
        rate_scale=t.rate_scale,
        limit=t.limit,
    )
    if replicas > 1:
        requests = shard(requests, replicas, t.dp_router, replica)  # type: ignore[arg-type]
    return replay_shard(variant, requests, roofline_for(plan, rates), config, replica=replica)


def merged(parts: Sequence[ShardResult]) -> PolicyMetrics:
    """The replicas' metrics as ``kvbudget simulate`` reports them: one replica's own,
    or their :func:`~kvbudget.sim.merge_shards`."""
    from kvbudget.sim import merge_shards

    return parts[0].metrics if len(parts) == 1 else merge_shards(parts)


def with_traffic(row: SweepRow, m: PolicyMetrics, settings: SweepSettings) -> SweepRow:
    """``row`` with the deployment's replay metrics ``m`` and its SLO verdict."""
    traffic = TrafficMetrics(
        policy=m.policy,
        requests=m.requests,
        completed=m.completed,
        replicas=row.config.dp,
        router=settings.traffic.dp_router,
        output_tokens_per_s=m.output_tokens_per_s,
        output_tokens_per_s_per_gpu=m.output_tokens_per_s / row.gpus,
        ttft_s=_percentiles(m.ttft_s),
        tpot_s=_percentiles(m.tpot_s),
    )
    missed = slo_misses(traffic, settings)
    status: Status = "slo" if missed else "ok"
    return replace(row, traffic=traffic, status=status, reason="; ".join(missed) or None)


def simulate_plan(plan: Plan, settings: SweepSettings, dp: int, policies: tuple[str, ...]) -> Any:
    """``kvbudget.sim.simulate`` of ``plan`` over ``dp`` replicas with the sweep's
    traffic settings (one process; the HTML report's policy comparison). Raises what
    it raises (InvalidArgumentError, OSError)."""
    from kvbudget.sim import PrefixSynthesis, simulate

    t = settings.traffic
    return simulate(
        plan,
        t.trace_path(),
        policies=policies,
        acceptance=t.acceptance,
        rate_scale=t.rate_scale,
        limit=t.limit,
        prefixes=PrefixSynthesis(seed=t.seed),
        max_num_batched_tokens=settings.space.max_num_batched_tokens,
        seed=t.seed,
        jobs=1,
        dp=dp,
        dp_router=t.dp_router,
    )


def _percentiles(p: Any) -> dict[str, float | None]:
    return {"p50": p.p50, "p90": p.p90, "p99": p.p99, "mean": p.mean}


def slo_misses(traffic: TrafficMetrics, settings: SweepSettings) -> list[str]:
    """The SLO limits ``traffic`` misses, in words (empty: it meets them all)."""
    slo, out = settings.slo, []
    if traffic.completed < traffic.requests:
        out.append(f"{traffic.requests - traffic.completed} of {traffic.requests} unfinished")
    for name, limit, values in (
        ("TTFT", slo.ttft_s, traffic.ttft_s),
        ("TPOT", slo.tpot_s, traffic.tpot_s),
    ):
        value = values.get(slo.percentile)
        if limit is not None and (value is None or value > limit):
            shown = "none" if value is None else f"{value:.4g} s"
            out.append(f"{slo.percentile} {name} {shown} > {limit:g} s")
    return out


__all__ = [
    "ShardOutcome",
    "ShardTask",
    "combine",
    "evaluate",
    "evaluate_shard",
    "merged",
    "plan_row",
    "replay_replica",
    "shards",
    "simulate_command",
    "simulate_plan",
    "slo_misses",
    "with_traffic",
]
