"""What one policy's replay measured: immutable results and the recorders that build them.

* :class:`Percentiles`: p50/p90/p99 of a latency, nearest-rank on the sorted values
  (the value at rank ``ceil(q x n)``), in seconds; None with no sample.
* :class:`Series`: samples over simulated time (concurrency, blocks), at most
  ``max_points`` kept: when full, every other point is dropped and the stride doubles,
  so memory stays bounded however long the trace.
* :class:`PolicyMetrics`: the per-policy record of the summary table and the JSON.

Memory: latencies are kept as 8-byte floats per finished request (0.8 MB per metric at
10^5 requests) for exact percentiles; everything else is bounded.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SERIES_FIELDS = (
    "time_s",
    "running",
    "waiting",
    "swapped",
    "gpu_used_blocks",
    "gpu_cached_blocks",
    "host_used_blocks",
    "host_cached_blocks",
)


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """Nearest-rank percentiles of ``count`` samples, in seconds (None: no samples)."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        """Percentiles of ``values`` (not modified)."""
        n = len(values)
        if n == 0:
            return cls(count=0, p50=None, p90=None, p99=None, mean=None)
        ordered = sorted(values)

        def rank(q: float) -> float:
            return ordered[max(1, math.ceil(q * n)) - 1]

        return cls(count=n, p50=rank(0.5), p90=rank(0.9), p99=rank(0.99), mean=sum(ordered) / n)


class Series:
    """Bounded samples of :data:`SERIES_FIELDS` over time (module docstring). Mutable."""

    __slots__ = ("_count", "_rows", "_stride", "max_points")

    def __init__(self, max_points: int = 2048) -> None:
        self.max_points = max(2, max_points)
        self._rows: list[tuple[float, ...]] = []
        self._stride = 1
        self._count = 0

    def add(self, row: tuple[float, ...]) -> None:
        """Offer one sample; kept when it falls on the current stride."""
        if self._count % self._stride == 0:
            self._rows.append(row)
            if len(self._rows) >= self.max_points:
                self._rows = self._rows[::2]
                self._stride *= 2
        self._count += 1

    def columns(self) -> dict[str, list[float]]:
        """The kept samples, one list per field."""
        return {name: [row[i] for row in self._rows] for i, name in enumerate(SERIES_FIELDS)}


@dataclass(frozen=True, kw_only=True)
class PolicyMetrics:
    """The measured outcome of one policy's replay. Byte and token counts are exact
    integers; times are simulated seconds (roofline, see :mod:`kvbudget.sim.roofline`).

    * ``requests``: arrived; ``completed`` + ``not_finished`` (by reason) == ``requests``.
    * ``preempted_requests``: requests preempted at least once; ``preemptions`` every
      preemption, by mode (``swapped_out``, ``recomputed``).
    * ``max_waiting``: most requests queued (arrived, not admitted) at one step.
    * ``hit_tokens``: prompt tokens served from the cache, by tier (``gpu``/``host``)
      and in all; ``prompt_tokens``: prompt tokens admitted (re-admissions included).
    * ``host_offloaded_bytes`` / ``host_onboarded_bytes``: traffic over the host link
      (every role's bytes of each block moved).
    * ``pinned_host_bytes`` vs ``host_budget_bytes``: per rank; ``node_*`` per node.
    * ``ttft_s``, ``tpot_s``: per-request time to first token and time per output token
      after it; ``output_tokens_per_s``: output tokens over the simulated makespan.
    """

    policy: str
    requests: int
    completed: int
    not_finished: dict[str, int]
    truncated_outputs: int
    preempted_requests: int
    preemptions: int
    swapped_out: int
    recomputed: int
    max_waiting: int
    max_running: int
    steps: int
    prompt_tokens: int
    hit_tokens: int
    hit_tokens_by_tier: dict[str, int]
    output_tokens: int
    host_offloaded_bytes: int
    host_onboarded_bytes: int
    pinned_host_bytes: int
    host_budget_bytes: int
    node_pinned_host_bytes: int
    node_host_memory_bytes: int | None
    gpu_overcommit_bytes: int
    gpu_blocks: int
    host_blocks: int
    makespan_s: float
    output_tokens_per_s: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    series: dict[str, list[float]] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def host_traffic_bytes(self) -> int:
        """Bytes moved over the host link in both directions."""
        return self.host_offloaded_bytes + self.host_onboarded_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the JSON report (the ``series`` lists included)."""
        out = asdict(self)
        out["host_traffic_bytes"] = self.host_traffic_bytes
        out["notes"] = list(self.notes)
        return out


class LatencyRecorder:
    """TTFT and TPOT samples of finished requests (8 bytes each). Mutable."""

    __slots__ = ("tpot", "ttft")

    def __init__(self) -> None:
        self.ttft = array("d")
        self.tpot = array("d")
