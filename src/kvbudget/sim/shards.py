"""Data-parallel replicas: a trace routed to ``dp`` replicas, each replayed on its own.

Replicas share no cache (each data-parallel group holds its own sequences: the plan's
``capacity.kv_groups``), so replaying each replica's requests through its own cache is
exact, and the replicas are independent tasks (a process pool, or one task per shard of
a sweep). Routers (:data:`ROUTERS`) decide from the trace alone, in arrival order, so
every worker can route the stream itself and keep only its replica's requests (memory
flat in the trace's length):

* ``round-robin``: request ``i`` to replica ``i mod dp``;
* ``least-loaded``: to the replica with the fewest tokens (prompt + output) routed to it
  so far, the lowest index on a tie: a balance of the work handed out; it does not see
  the replicas' queues, which the replays compute apart;
* ``prefix``: every request of a ``prefix_group`` to the replica its group's first
  request went to (least-loaded then), so a group's shared prefix is cached on one
  replica; requests without a group least-loaded.

:func:`replay_shard` replays one replica (a pure function of its inputs);
:func:`merge_shards` combines the replicas' results into one
:class:`~kvbudget.sim.metrics.PolicyMetrics`: counts, tokens and bytes summed, TTFT and
TPOT percentiles exact over every replica's samples, the makespan from the first arrival
to the last finish on any replica; ``max_waiting``/``max_running`` are the most on one
replica, ``gpu_blocks``/``host_blocks`` and the pinned bytes are per replica's rank (as
the plan reports them), ``steps`` are summed over the replicas, and ``series`` are
replica 0's.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.metrics import Percentiles, PolicyMetrics
from kvbudget.sim.policies import PolicyPlan
from kvbudget.sim.replay import ReplayConfig, _Replay
from kvbudget.sim.roofline import Roofline
from kvbudget.sim.trace import TraceRequest

Router = Literal["round-robin", "least-loaded", "prefix"]
ROUTERS: tuple[Router, ...] = ("round-robin", "least-loaded", "prefix")


def require_router(router: object) -> Router:
    """``router`` checked: one of :data:`ROUTERS`. Raises InvalidArgumentError."""
    if router not in ROUTERS:
        raise InvalidArgumentError(
            f"--dp-router must be one of {', '.join(ROUTERS)}, got {router!r}"
        )
    return router


def require_dp(dp: object) -> int:
    """``dp`` checked: an int >= 1. Raises InvalidArgumentError."""
    if type(dp) is not int or dp < 1:
        raise InvalidArgumentError(f"--dp must be an int >= 1, got {dp!r}")
    return dp


def route(
    requests: Iterable[TraceRequest], dp: int, router: Router
) -> Iterator[tuple[int, TraceRequest]]:
    """``(replica, request)`` for each request in order (module docstring). The state
    kept is ``dp`` counters and, for ``prefix``, one replica per group seen."""
    require_dp(dp)
    require_router(router)
    load = [0] * dp
    groups: dict[str, int] = {}
    for i, req in enumerate(requests):
        if router == "round-robin":
            r = i % dp
        elif router == "prefix" and req.prefix_group is not None:
            r = groups.get(req.prefix_group, -1)
            if r < 0:
                r = groups[req.prefix_group] = load.index(min(load))
        else:
            r = load.index(min(load))
        load[r] += req.prompt_tokens + req.output_tokens
        yield r, req


def shard(
    requests: Iterable[TraceRequest], dp: int, router: Router, replica: int
) -> Iterator[TraceRequest]:
    """The requests :func:`route` sends to ``replica`` (their trace indices kept)."""
    if type(replica) is not int or not 0 <= replica < dp:
        raise InvalidArgumentError(f"replica must be in 0..{dp - 1}, got {replica!r}")
    return (req for r, req in route(requests, dp, router) if r == replica)


@dataclass(frozen=True, kw_only=True)
class ShardResult:
    """One replica's replay: its metrics and what :func:`merge_shards` needs besides
    them (every TTFT and TPOT sample, 8 bytes each; the first arrival and last finish)."""

    replica: int
    metrics: PolicyMetrics
    ttft_s: array[float] = field(repr=False)
    tpot_s: array[float] = field(repr=False)
    first_arrival_s: float | None
    last_finish_s: float


def replay_shard(
    policy: PolicyPlan,
    requests: Iterable[TraceRequest],
    roofline: Roofline,
    config: ReplayConfig,
    *,
    replica: int = 0,
    progress: Callable[[int], None] | None = None,
) -> ShardResult:
    """Replay one replica's ``requests`` (e.g. from :func:`shard`) through its own cache,
    as :func:`~kvbudget.sim.replay.replay` does. Pure but for ``progress``.

    Raises:
        InvalidArgumentError: a plan the cache cannot be built from.
    """
    rp = _Replay(policy, roofline, config)
    metrics = rp.run(requests, progress, 0)
    return ShardResult(
        replica=replica,
        metrics=metrics,
        ttft_s=rp.latencies.ttft,
        tpot_s=rp.latencies.tpot,
        first_arrival_s=rp.first_arrival,
        last_finish_s=rp.last_finish,
    )


def merge_shards(results: Sequence[ShardResult], *, notes: tuple[str, ...] = ()) -> PolicyMetrics:
    """One policy's metrics over its replicas (module docstring), ``notes`` appended.
    The order of ``results`` does not matter. Raises InvalidArgumentError for no
    results or results of different policies."""
    if not results:
        raise InvalidArgumentError("merge_shards needs at least one replica's result")
    ordered = sorted(results, key=lambda r: r.replica)
    ms = [r.metrics for r in ordered]
    first = ms[0]
    if any(m.policy != first.policy for m in ms):
        raise InvalidArgumentError(
            f"merge_shards got results of policies {sorted({m.policy for m in ms})}"
        )

    def total(name: str) -> int:
        return sum(getattr(m, name) for m in ms)

    reasons: dict[str, int] = {}
    tiers: dict[str, int] = {}
    for m in ms:
        for k, v in m.not_finished.items():
            reasons[k] = reasons.get(k, 0) + v
        for k, v in m.hit_tokens_by_tier.items():
            tiers[k] = tiers.get(k, 0) + v
    ttft: array[float] = array("d")
    tpot: array[float] = array("d")
    for r in ordered:
        ttft.extend(r.ttft_s)
        tpot.extend(r.tpot_s)
    arrivals = [r.first_arrival_s for r in ordered if r.first_arrival_s is not None]
    start = min(arrivals) if arrivals else 0.0
    makespan = max(0.0, max(r.last_finish_s for r in ordered) - start)
    output = total("output_tokens")
    summed = (
        "requests", "completed", "truncated_outputs", "preempted_requests", "preemptions",
        "swapped_out", "recomputed", "steps", "prompt_tokens", "hit_tokens",
        "host_offloaded_bytes", "host_onboarded_bytes",
    )  # fmt: skip
    sums: dict[str, Any] = {name: total(name) for name in summed}
    return replace(
        first,
        **sums,
        not_finished=dict(sorted(reasons.items())),
        hit_tokens_by_tier=tiers,
        output_tokens=output,
        max_waiting=max(m.max_waiting for m in ms),
        max_running=max(m.max_running for m in ms),
        makespan_s=makespan,
        output_tokens_per_s=output / makespan if makespan > 0 else 0.0,
        ttft_s=Percentiles.of(ttft),
        tpot_s=Percentiles.of(tpot),
        notes=first.notes + notes,
    )
