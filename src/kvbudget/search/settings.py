"""What a sweep is asked: :class:`SweepSettings`, one frozen value that every task is a
pure function of (it travels whole to a worker process or a Ray task).

Objectives (``objective``):

* ``capacity``: sequences of ``max_seq_len`` (+ lookahead) held at once, from the
  engine model's :class:`~kvbudget.plan_types.Capacity`: exact. Ranked by sequences
  per GPU (per price unit an hour with prices).
* ``traffic``: the trace replayed through ``kvbudget simulate`` on each plan
  (:class:`TrafficSettings`), ranked by output tokens/s per GPU (tokens per price unit
  with prices) among the configurations that meet the :class:`Slo`. Step times are the
  roofline's: lower bounds, so tokens/s is an upper bound and TTFT/TPOT lower bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from kvbudget.errors import InvalidArgumentError
from kvbudget.search.space import SweepSpace

Objective = Literal["capacity", "traffic"]
OBJECTIVES: tuple[Objective, ...] = ("capacity", "traffic")
PERCENTILES = ("p50", "p90", "p99")


@dataclass(frozen=True, kw_only=True)
class Slo:
    """Latency limits (seconds; None: no limit) on one percentile of TTFT and TPOT."""

    percentile: str = "p99"
    ttft_s: float | None = None
    tpot_s: float | None = None

    def checked(self) -> Slo:
        """Raises InvalidArgumentError for an unknown percentile or a limit <= 0."""
        if self.percentile not in PERCENTILES:
            raise InvalidArgumentError(
                f"--slo-percentile must be one of {', '.join(PERCENTILES)}, got {self.percentile!r}"
            )
        for flag, value in (("--slo-ttft", self.ttft_s), ("--slo-tpot", self.tpot_s)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidArgumentError(f"{flag} must be a number of seconds > 0, got {value}")
        return self


@dataclass(frozen=True, kw_only=True)
class TrafficSettings:
    """The replay of each configuration (``kvbudget simulate``'s options of the same
    names); ``trace`` None: the shipped Azure conversation trace. A configuration's
    ``dp`` replicas are each replayed on the requests ``dp_router`` sends them
    (:mod:`kvbudget.sim.shards`).

    ``trace`` is what the rows' reproduce commands name (``-`` for standard input);
    ``read_path``, where set, is the file the tasks read it from: the copy of a trace
    that can be read only once (:func:`kvbudget.sim.trace.replayable_trace`), which
    :func:`kvbudget.sweep` makes for the sweep's duration."""

    trace: str | None = None
    read_path: str | None = None
    limit: int | None = 2000
    rate_scale: float = 1.0
    acceptance: str = "0.7"
    seed: int = 0
    policies: tuple[str, ...] = ("kvbudget",)  # replayed per row; the first ranks
    dp_router: str = "round-robin"

    def trace_path(self) -> str:
        """The file the trace is read from: ``read_path``, else ``trace``, else the
        shipped one."""
        from kvbudget.sim.trace import default_trace_path

        return self.read_path or self.trace or str(default_trace_path())

    def simulate_args(self) -> list[str]:
        """``kvbudget simulate``'s flags of these settings (after the plan's): the first
        policy, the one each row is replayed with."""
        args = [] if self.trace is None else ["--trace", self.trace]
        if self.limit is not None:
            args += ["--limit", str(self.limit)]
        return [
            *args,
            *("--rate-scale", repr(self.rate_scale), "--acceptance", self.acceptance),
            *("--seed", str(self.seed), "--policies", self.policies[0]),
            *("--dp-router", self.dp_router),
        ]


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """Everything a sweep task needs: the space, the objective, the replay and SLO
    settings, and prices per GPU-hour by GPU preset (empty: none given)."""

    space: SweepSpace
    objective: Objective = "capacity"
    traffic: TrafficSettings = TrafficSettings()
    slo: Slo = Slo()
    prices: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def checked(self) -> SweepSettings:
        """These settings with the space checked (names resolved); raises
        InvalidArgumentError for an unknown objective, a bad SLO or a GPU without a
        price when prices are given."""
        if self.objective not in OBJECTIVES:
            raise InvalidArgumentError(
                f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        self.slo.checked()
        space = self.space.checked()
        if self.prices:
            missing = [g for g in space.gpus if g not in self.prices]
            if missing:
                raise InvalidArgumentError(
                    f"the price file has no price for {', '.join(missing)}; add a row "
                    "'GPU,PRICE' for each swept GPU (or drop --prices)"
                )
        from dataclasses import replace

        return replace(self, space=space, prices=MappingProxyType(dict(self.prices)))

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle: a worker gets the prices as a dict
        return (_rebuild, (self.space, self.objective, self.traffic, self.slo, dict(self.prices)))


def _rebuild(
    space: SweepSpace,
    objective: Objective,
    traffic: TrafficSettings,
    slo: Slo,
    prices: dict[str, float],
) -> SweepSettings:
    return SweepSettings(
        space=space,
        objective=objective,
        traffic=traffic,
        slo=slo,
        prices=MappingProxyType(prices),
    )


__all__ = ["OBJECTIVES", "PERCENTILES", "Objective", "Slo", "SweepSettings", "TrafficSettings"]
