"""One sweep task: :func:`evaluate`, a pure function of (settings, configuration).

It plans the configuration as ``kvbudget plan`` does (``resolve_deployment`` then
``build_plan``: the same code, so the row and its reproduce command agree) and, for the
traffic objective, replays the trace through the simulator's public entry point
(:func:`kvbudget.sim.simulate`). A refusal is a row with the engine's reason, never an
exception: one bad configuration does not stop a sweep.

Trace shards: a task is one configuration x the whole trace today (one DP replica
replayed at ``1/dp`` of the rate, :class:`~kvbudget.search.row.TrafficMetrics`).
:func:`shards` is the seam where a configuration's replay splits into independent
replicas (the simulator's DP routing): each shard then becomes its own task and
:func:`evaluate` the reduction of their metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvbudget.errors import EngineRefusedError, InfeasibleBudgetError, KvBudgetError
from kvbudget.search.row import Status, SweepRow, TrafficMetrics
from kvbudget.search.settings import SweepSettings
from kvbudget.search.space import SweepConfig

if TYPE_CHECKING:
    from kvbudget.plan_types import Plan


@dataclass(frozen=True, kw_only=True)
class TraceShard:
    """The part of the trace one replay sees: ``rate_scale`` (arrivals divided by it)
    and the replicas it stands for."""

    rate_scale: float
    replicas: int


def shards(settings: SweepSettings, config: SweepConfig) -> tuple[TraceShard, ...]:
    """The replays of ``config``: one replica standing for all ``dp`` (module
    docstring), at ``rate_scale / dp``."""
    return (TraceShard(rate_scale=settings.traffic.rate_scale / config.dp, replicas=config.dp),)


def evaluate(settings: SweepSettings, config: SweepConfig) -> SweepRow:
    """The row of ``config`` under ``settings`` (checked). Pure: the same arguments give
    an equal row in any process. Never raises a :class:`KvBudgetError`: a refusal, an
    infeasible budget or a setting the engine does not take is the row's status."""
    base = SweepRow(
        config=config, command=config.command(settings.space), status="invalid", gpus=config.gpus
    )
    if config.problem is not None:
        return replace(base, reason=config.problem)
    try:
        plan = _plan(config, settings)
    except EngineRefusedError as exc:
        return replace(base, status="infeasible", reason=f"{config.engine}: {exc}")
    except InfeasibleBudgetError as exc:
        return replace(base, status="infeasible", reason=str(exc))
    except KvBudgetError as exc:
        return replace(base, reason=str(exc))
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
    if settings.objective == "traffic":
        return _with_traffic(row, plan, settings)
    if plan.capacity.max_concurrency == 0:
        # the engine starts (and serves shorter sequences): not a capacity answer
        held = (
            f"holds no whole sequence of {plan.capacity.max_seq_len} tokens at once "
            "(the engine starts; shorter sequences fit)"
        )
        return replace(row, status="infeasible", reason=held)
    return row


def _plan(config: SweepConfig, settings: SweepSettings) -> Plan:
    from kvbudget.deployment import resolve_deployment
    from kvbudget.planner import build_plan

    return build_plan(resolve_deployment(**config.plan_kwargs(settings.space)))  # type: ignore[arg-type]


def _with_traffic(row: SweepRow, plan: Plan, settings: SweepSettings) -> SweepRow:
    """``row`` with its replay's metrics and SLO verdict."""
    (shard,) = shards(settings, row.config)
    try:
        result = simulate_plan(plan, settings, shard.rate_scale, settings.traffic.policies[:1])
    except KvBudgetError as exc:
        return replace(row, status="invalid", reason=f"simulate: {exc}")
    m = result.policies[0]
    traffic = TrafficMetrics(
        policy=m.policy,
        requests=m.requests,
        completed=m.completed,
        replicas=shard.replicas,
        output_tokens_per_s=m.output_tokens_per_s,
        output_tokens_per_s_per_gpu=m.output_tokens_per_s * shard.replicas / row.gpus,
        ttft_s=_percentiles(m.ttft_s),
        tpot_s=_percentiles(m.tpot_s),
    )
    missed = slo_misses(traffic, settings)
    status: Status = "slo" if missed else "ok"
    return replace(row, traffic=traffic, status=status, reason="; ".join(missed) or None)


def simulate_plan(
    plan: Plan, settings: SweepSettings, rate_scale: float, policies: tuple[str, ...]
) -> Any:
    """``kvbudget.sim.simulate`` of ``plan`` with the sweep's traffic settings (one
    process). Raises what it raises (InvalidArgumentError, OSError)."""
    from kvbudget.sim import PrefixSynthesis, simulate

    t = settings.traffic
    return simulate(
        plan,
        t.trace,
        policies=policies,
        acceptance=t.acceptance,
        rate_scale=rate_scale,
        limit=t.limit,
        prefixes=PrefixSynthesis(seed=t.seed),
        max_num_batched_tokens=settings.space.max_num_batched_tokens,
        seed=t.seed,
        jobs=1,
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


__all__ = ["TraceShard", "evaluate", "shards", "simulate_plan", "slo_misses"]
