"""One simulation: a base plan, its policy variants, one trace replayed through each.

:func:`simulate` is the library entry point behind ``kvbudget simulate``; its result's
:meth:`SimulationResult.to_dict` is the ``--json`` document (schema
:data:`SIM_SCHEMA_VERSION`)::

    {"schema": 1, "kind": "kvbudget-simulation",
     "trace": {"path", "requests", "limit", "rate_scale", "prefixes": {...}},
     "settings": {"acceptance", "expected_accepted_per_step", "draft_len", "seed",
                  "max_num_batched_tokens", "preempt", "sample_steps"},
     "roofline": {"gpu", "source", "hbm_bytes_per_s", "host_link_bytes_per_s",
                  "peak_flops_per_s", "target_weights_bytes", "draft_weights_bytes", ...},
     "plan": <Plan.to_dict()>, "engine_flags": {engine: {flag: value}},
     "policies": [<PolicyMetrics.to_dict()>, ...],
     "replay_wall_s": {policy: seconds}}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.engine_cache import cache_plan
from kvbudget.sim.metrics import PolicyMetrics
from kvbudget.sim.policies import POLICIES, PolicyPlan, policy_plans
from kvbudget.sim.replay import ReplayConfig
from kvbudget.sim.roofline import Roofline, gpu_rates, roofline_for
from kvbudget.sim.shards import (
    Router,
    ShardResult,
    merge_shards,
    replay_shard,
    require_dp,
    require_router,
    shard,
)
from kvbudget.sim.trace import (
    PrefixSynthesis,
    TraceRequest,
    default_trace_path,
    read_trace,
    replayable_trace,
    require_rate_scale,
)

SIM_SCHEMA_VERSION = 1

PolicyProgress = Callable[[str, int], None]


@dataclass(frozen=True, kw_only=True)
class SimulationResult:
    """The plan, the replay settings and every policy's metrics, in policy order."""

    plan: Plan
    trace_path: str
    rate_scale: float
    limit: int | None
    prefixes: PrefixSynthesis
    config: ReplayConfig
    roofline: Roofline
    policies: tuple[PolicyMetrics, ...]
    wall_s: dict[str, float]
    engine_flags: dict[str, dict[str, Any]]
    dp: int = 1
    dp_router: str = "round-robin"

    def policy(self, name: str) -> PolicyMetrics:
        """The metrics of policy ``name``; KeyError when it was not run."""
        for p in self.policies:
            if p.policy == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (module docstring)."""
        r = self.roofline
        requests = self.policies[0].requests if self.policies else 0
        return {
            "schema": SIM_SCHEMA_VERSION,
            "kind": "kvbudget-simulation",
            "trace": {
                "path": self.trace_path,
                "requests": requests,
                "limit": self.limit,
                "rate_scale": self.rate_scale,
                "prefixes": asdict(self.prefixes),
            },
            "settings": {
                "acceptance": list(self.config.acceptance.rates),
                "draft_len": r.draft_len,
                "expected_accepted_per_step": self.config.acceptance.expected_accepted(r.draft_len),
                "seed": self.config.seed,
                "max_num_batched_tokens": self.config.max_num_batched_tokens,
                "preempt": self.config.preempt,
                "sample_steps": self.config.sample_steps,
                **({"dp": self.dp, "dp_router": self.dp_router} if self.dp > 1 else {}),
            },
            "roofline": {
                "gpu": r.rates.name,
                "source": r.rates.source,
                "hbm_bytes_per_s": r.rates.hbm_bytes_per_s,
                "host_link_bytes_per_s": r.rates.host_link_bytes_per_s,
                "peak_flops_per_s": r.rates.peak_flops_per_s,
                "target_weights_bytes": r.target_weights_bytes,
                "draft_weights_bytes": r.draft_weights_bytes,
                "target_kv_bytes_per_token": r.target_kv_bytes_per_token,
                "draft_kv_bytes_per_token": r.draft_kv_bytes_per_token,
                "target_flops_per_token": r.target_flops_per_token,
                "draft_flops_per_token": r.draft_flops_per_token,
            },
            "plan": self.plan.to_dict(),
            "engine_flags": self.engine_flags,
            "policies": [p.to_dict() for p in self.policies],
            "replay_wall_s": dict(self.wall_s),
        }


def simulate(
    plan: Plan,
    trace: str | Path | None = None,
    *,
    policies: tuple[str, ...] = POLICIES,
    acceptance: AcceptanceModel | str | float = 0.7,
    rate_scale: float = 1.0,
    limit: int | None = None,
    prefixes: PrefixSynthesis | None = None,
    gpu: str | None = None,
    peak_tflops: float | None = None,
    max_num_batched_tokens: int = 8192,
    preempt: str = "auto",
    seed: int = 0,
    sample_steps: int = 64,
    progress: PolicyProgress | None = None,
    jobs: int = 1,
    engine_flags: Mapping[str, Mapping[str, Any]] | None = None,
    trace_name: str | None = None,
    dp: int | None = None,
    dp_router: str = "round-robin",
    fast_forward: bool = True,
) -> SimulationResult:
    """Replay ``trace`` (default: the shipped Azure conversation trace) through each of
    ``policies``' variants of ``plan``: kvbudget's own cache, or under another engine
    that engine's pools as the cache enforces them (:func:`~kvbudget.sim.engine_cache.cache_plan`).

    The trace is streamed once per policy (a pipe or FIFO is first copied to a
    temporary file, read once: :func:`~kvbudget.sim.trace.replayable_trace`);
    ``trace_name`` is what messages and the result call it (default: ``trace``).
    ``gpu`` names the roofline's GPU (default: the plan's); ``peak_tflops`` supplies its
    FLOPs where ``gpu_flops.csv`` has none.
    ``progress(policy, requests_done)`` reports as replays go. ``jobs`` > 1 replays the
    policies in that many worker processes (the results are the same: every replay is
    seeded and independent). ``dp`` data-parallel replicas (default: the plan's
    ``capacity.kv_groups``, its ``--dp``) each replay the requests ``dp_router`` sends
    them through a cache of their own (:mod:`kvbudget.sim.shards`), ``jobs`` replicas at
    a time; the policy's metrics are the replicas' merged. ``fast_forward=False`` runs the
    step-by-step loop alone (the same metrics, slower). ``engine_flags`` (from
    :func:`engine_flags_for`) are carried into the result for the reports.

    Raises:
        InvalidArgumentError: bad settings, an unknown policy or GPU, a bad trace row, or
            a plan the cache cannot be built from.
        OSError: the trace cannot be read.
    """
    require_rate_scale(rate_scale)  # before any replay (in a worker process) meets it
    model = (
        acceptance if isinstance(acceptance, AcceptanceModel) else AcceptanceModel.parse(acceptance)
    )
    gpu_name = gpu or plan.budget.gpu_name
    if gpu_name is None:
        raise InvalidArgumentError(
            "the roofline needs a GPU preset: pass --gpu (the plan names none)"
        )
    rates = gpu_rates(gpu_name, peak_tflops=peak_tflops)
    if rates.peak_flops_per_s is None:
        raise InvalidArgumentError(
            f"no peak FLOPs figure for {rates.name} in gpu_flops.csv; pass --peak-tflops "
            "(its dense BF16 tensor TFLOPS) or another --gpu"
        )
    roof = roofline_for(plan, rates)
    config = ReplayConfig(
        acceptance=model,
        max_num_batched_tokens=max_num_batched_tokens,
        preempt=preempt,  # type: ignore[arg-type]
        sample_steps=sample_steps,
        seed=seed,
        fast_forward=fast_forward,
    )
    replicas = require_dp(plan.capacity.kv_groups if dp is None else dp)
    router = require_router(dp_router)
    synth = prefixes if prefixes is not None else PrefixSynthesis(seed=seed)
    source = trace if trace is not None else default_trace_path()
    label = trace_name or str(source)
    variants = policy_plans(cache_plan(plan), policies)
    jobs = require_jobs(jobs)
    with replayable_trace(source) as path:
        stream = _TraceStream(
            path=path, name=label, prefixes=synth, rate_scale=rate_scale, limit=limit
        )
        done = _replay_all(variants, stream, roof, config, progress, jobs, (replicas, router))
    results = [done[v.name][0] for v in variants]
    wall = {v.name: done[v.name][1] for v in variants}
    return SimulationResult(
        plan=plan,
        trace_path=label,
        rate_scale=rate_scale,
        limit=limit,
        prefixes=synth,
        config=config,
        roofline=roof,
        policies=tuple(results),
        wall_s=wall,
        engine_flags={k: dict(v) for k, v in (engine_flags or {}).items()},
        dp=replicas,
        dp_router=router,
    )


@dataclass(frozen=True, kw_only=True)
class _TraceStream:
    """How every replay reads the trace: ``path`` (a regular file), ``name`` for
    messages, and :func:`read_trace`'s settings."""

    path: Path
    name: str
    prefixes: PrefixSynthesis
    rate_scale: float
    limit: int | None

    def requests(self) -> Iterator[TraceRequest]:
        """A fresh stream of the trace's requests."""
        return read_trace(
            self.path,
            prefixes=self.prefixes,
            rate_scale=self.rate_scale,
            limit=self.limit,
            name=self.name,
        )


def _replay_all(
    variants: tuple[PolicyPlan, ...],
    trace: _TraceStream,
    roof: Roofline,
    config: ReplayConfig,
    progress: PolicyProgress | None,
    jobs: int,
    dp: tuple[int, Router] = (1, "round-robin"),
) -> dict[str, tuple[PolicyMetrics, float]]:
    """Each variant's metrics and replay seconds (summed over its replicas), by policy
    name: one task per policy and replica, ``jobs`` processes at a time."""
    replicas, router = dp
    tasks = [(v, r) for v in variants for r in range(replicas)]
    parts: dict[str, list[tuple[ShardResult, float]]] = {v.name: [] for v in variants}
    if jobs > 1 and len(tasks) > 1:
        # one process per task, each streaming the trace itself; progress is reported
        # as each policy's replicas complete
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            futures = {
                pool.submit(_replay_one, v, trace, roof, config, None, (r, replicas, router)): v
                for v, r in tasks
            }
            for future in as_completed(futures):
                name = futures[future].name
                parts[name].append(future.result())
                if progress is not None:
                    progress(name, sum(s.metrics.requests for s, _ in parts[name]))
    else:
        for variant, replica in tasks:
            report = None
            if progress is not None:
                before = sum(s.metrics.requests for s, _ in parts[variant.name])

                def report(count: int, name: str = variant.name, base: int = before) -> None:
                    progress(name, base + count)

            parts[variant.name].append(
                _replay_one(variant, trace, roof, config, report, (replica, replicas, router))
            )
    done: dict[str, tuple[PolicyMetrics, float]] = {}
    for name, shards in parts.items():
        wall = sum(seconds for _, seconds in shards)
        if replicas == 1:
            done[name] = (shards[0][0].metrics, wall)
            continue
        note = (
            f"{replicas} data-parallel replicas, requests routed {router}, each replayed "
            "through its own cache; max_waiting/max_running, blocks and series per replica"
        )
        done[name] = (merge_shards([s for s, _ in shards], notes=(note,)), wall)
    return done


def require_jobs(jobs: object) -> int:
    """``jobs`` checked: an int >= 1. Raises InvalidArgumentError."""
    if type(jobs) is not int or jobs < 1:
        raise InvalidArgumentError(f"--jobs must be an int >= 1, got {jobs!r}")
    return jobs


def _replay_one(
    variant: PolicyPlan,
    trace: _TraceStream,
    roof: Roofline,
    config: ReplayConfig,
    progress: Callable[[int], None] | None,
    replica: tuple[int, int, Router] = (0, 1, "round-robin"),
) -> tuple[ShardResult, float]:
    """One policy's replay of one replica (``(index, replicas, router)``) over a fresh
    stream of the trace, and its wall seconds (a module-level function, so that a worker
    process can run it)."""
    index, replicas, router = replica
    requests: Iterable[TraceRequest] = trace.requests()
    if replicas > 1:
        requests = shard(requests, replicas, router, index)
    start = time.perf_counter()
    result = replay_shard(variant, requests, roof, config, replica=index, progress=progress)
    return result, time.perf_counter() - start


def engine_flags_for(deployment: Deployment) -> dict[str, dict[str, Any]]:
    """The settings each engine (its default version) is given for ``deployment``:
    engine -> flag -> value, as ``kvbudget plan --emit ENGINE`` prints them;
    ``{"error": message}`` for an engine that cannot run it. Each engine's plan is made
    from the one deployment (:func:`~kvbudget.deployment.for_engine`), no model reloaded."""
    from kvbudget.deployment import for_engine
    from kvbudget.engines import ENGINE_MODELS
    from kvbudget.errors import KvBudgetError
    from kvbudget.planner import build_plan

    out: dict[str, dict[str, Any]] = {}
    for model in ENGINE_MODELS:
        if not model.default or model.render is None:
            continue
        try:
            planned = build_plan(for_engine(deployment, model))
        except KvBudgetError as exc:
            out[model.name] = {"error": str(exc)}
            continue
        out[model.name] = {k: _plain(v) for k, v in planned.engine.settings.items()}
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
