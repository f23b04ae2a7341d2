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
from collections.abc import Callable, Iterator, Mapping
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
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.roofline import Roofline, gpu_rates, roofline_for
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
    seeded and independent). ``engine_flags`` (from
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
    )
    synth = prefixes if prefixes is not None else PrefixSynthesis(seed=seed)
    source = trace if trace is not None else default_trace_path()
    label = trace_name or str(source)
    variants = policy_plans(cache_plan(plan), policies)
    jobs = require_jobs(jobs)
    with replayable_trace(source) as path:
        stream = _TraceStream(
            path=path, name=label, prefixes=synth, rate_scale=rate_scale, limit=limit
        )
        done = _replay_all(variants, stream, roof, config, progress, jobs)
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
) -> dict[str, tuple[PolicyMetrics, float]]:
    """Each variant's metrics and replay seconds, by policy name, replayed in ``jobs``
    processes."""
    done: dict[str, tuple[PolicyMetrics, float]] = {}
    if jobs > 1 and len(variants) > 1:
        # one process per policy replay, each streaming the trace itself; progress is
        # reported as each policy completes
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(jobs, len(variants))) as pool:
            futures = {
                pool.submit(_replay_one, variant, trace, roof, config, None): variant.name
                for variant in variants
            }
            for future in as_completed(futures):
                metrics, seconds = future.result()
                done[metrics.policy] = (metrics, seconds)
                if progress is not None:
                    progress(metrics.policy, metrics.requests)
    else:
        for variant in variants:
            report = None
            if progress is not None:

                def report(count: int, name: str = variant.name) -> None:
                    progress(name, count)

            done[variant.name] = _replay_one(variant, trace, roof, config, report)
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
) -> tuple[PolicyMetrics, float]:
    """One policy's replay over a fresh stream of the trace, and its wall seconds (a
    module-level function, so that a worker process can run it)."""
    requests = trace.requests()
    start = time.perf_counter()
    metrics = replay(variant, requests, roof, config, progress=progress)
    return metrics, time.perf_counter() - start


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
