"""One result of a sweep: :class:`SweepRow` (a configuration, its status, what was
measured) and :class:`TrafficMetrics` (its replay).

Columns are of two kinds, and say so (:data:`EXACT_COLUMNS`, :data:`MODELLED_COLUMNS`):

* exact: sequences and tokens held, GPU KV bytes, from the engine model's
  :class:`~kvbudget.plan_types.Capacity` (what ``kvbudget plan`` prints);
* modelled: tokens/s, TTFT, TPOT from the simulator's roofline (a lower bound on step
  time: tokens/s is an upper bound, TTFT and TPOT lower bounds).

Statuses: ``ok``; ``slo`` (runs, misses a latency limit or leaves requests unfinished);
``infeasible`` (the engine or the budget refuses: the engine's reason; for the capacity
objective also a plan that holds no whole sequence of ``max_seq_len``); ``invalid`` (the
layout or a setting does not apply to the model or engine: the reason).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kvbudget.search.space import SweepConfig

Status = Literal["ok", "slo", "infeasible", "invalid"]

EXACT_COLUMNS = (
    "seqs_per_replica",
    "seqs_total",
    "seqs_per_gpu",
    "seqs_per_node",
    "tokens_per_rank",
    "gpu_kv_bytes_per_rank",
)
MODELLED_COLUMNS = ("output_tokens_per_s_per_gpu", "ttft_s", "tpot_s", "cost_per_mtok")


@dataclass(frozen=True, kw_only=True)
class TrafficMetrics:
    """One configuration's replay (the first policy of the sweep's traffic settings):
    its ``replicas`` DP replicas each replayed on the requests ``router`` sends them
    through a cache of their own, merged (exact: replicas share no cache), as
    ``kvbudget simulate --dp`` reports it. Tokens/s is the deployment's; per GPU over
    its GPUs.
    """

    policy: str
    requests: int
    completed: int
    replicas: int
    router: str
    output_tokens_per_s: float  # the whole deployment
    output_tokens_per_s_per_gpu: float
    ttft_s: Mapping[str, float | None]  # p50 / p90 / p99 / mean
    tpot_s: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the JSON document."""
        return {
            "policy": self.policy,
            "requests": self.requests,
            "completed": self.completed,
            "replicas": self.replicas,
            "router": self.router,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "ttft_s": dict(self.ttft_s),
            "tpot_s": dict(self.tpot_s),
        }


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One configuration's outcome. ``capacity`` is ``Capacity.to_dict()`` of its plan
    (None when no plan was made); ``price_per_gpu_hour`` None without prices.
    ``command`` is the ``kvbudget plan`` that reproduces the exact columns,
    ``simulate_command`` (traffic objective) the ``kvbudget simulate`` that reproduces
    the modelled ones."""

    config: SweepConfig
    command: str
    status: Status
    simulate_command: str | None = None
    reason: str | None = None
    capacity: Mapping[str, Any] | None = None
    gpus: int = 0
    gpus_per_node: int = 1
    gpu_kv_bytes_per_rank: int | None = None
    engine_settings: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    traffic: TrafficMetrics | None = None
    price_per_gpu_hour: float | None = None

    @property
    def seqs_per_replica(self) -> int | None:
        """Sequences one DP group holds at once (``Capacity.max_concurrency``)."""
        return None if self.capacity is None else int(self.capacity["max_concurrency"])

    @property
    def seqs_total(self) -> int | None:
        """Sequences the whole deployment holds at once (``total_concurrency``)."""
        return None if self.capacity is None else int(self.capacity["total_concurrency"])

    @property
    def seqs_per_gpu(self) -> float | None:
        """``seqs_total / gpus`` (exact as a ratio of integers)."""
        total = self.seqs_total
        return None if total is None or not self.gpus else total / self.gpus

    @property
    def nodes(self) -> int:
        """Nodes the deployment spans: ``ceil(gpus / gpus_per_node)``."""
        return max(1, math.ceil(self.gpus / max(1, self.gpus_per_node)))

    @property
    def seqs_per_node(self) -> float | None:
        """``seqs_total / nodes``."""
        total = self.seqs_total
        return None if total is None else total / self.nodes

    @property
    def price_per_hour(self) -> float | None:
        """The deployment's price an hour: ``price_per_gpu_hour x gpus``."""
        p = self.price_per_gpu_hour
        return None if p is None else p * self.gpus

    @property
    def price_per_seq_hour(self) -> float | None:
        """Price an hour per sequence held (capacity objective, with prices)."""
        price, total = self.price_per_hour, self.seqs_total
        return None if price is None or not total else price / total

    @property
    def cost_per_mtok(self) -> float | None:
        """Price per million output tokens (traffic objective, with prices): the hourly
        price over the modelled tokens an hour."""
        price, t = self.price_per_hour, self.traffic
        if price is None or t is None or t.output_tokens_per_s_per_gpu <= 0:
            return None
        per_hour = t.output_tokens_per_s_per_gpu * self.gpus * 3600
        return price / per_hour * 1e6

    def to_dict(self) -> dict[str, Any]:
        """The row as plain data (the ``--json`` row, less rank and front)."""
        c = self.config
        return {
            "status": self.status,
            "reason": self.reason,
            "command": self.command,
            "simulate_command": self.simulate_command,
            "config": {
                "target": c.target,
                "draft": c.draft,
                "spec": c.spec,
                "gpu": c.gpu,
                "gpus": c.gpus,
                "tp": c.tp,
                "pp": c.pp,
                "dp": c.dp,
                "dp_attention": c.dp_attention,
                "ep": c.ep,
                "kv_dtype": c.kv_dtype,
                "engine": c.engine,
                "max_batch_size": c.max_batch_size,
            },
            "exact": {
                "seqs_per_replica": self.seqs_per_replica,
                "seqs_total": self.seqs_total,
                "seqs_per_gpu": self.seqs_per_gpu,
                "seqs_per_node": self.seqs_per_node,
                "nodes": self.nodes,
                "gpu_kv_bytes_per_rank": self.gpu_kv_bytes_per_rank,
                "capacity": None if self.capacity is None else dict(self.capacity),
            },
            "modelled": None if self.traffic is None else self.traffic.to_dict(),
            "cost": {
                "price_per_gpu_hour": self.price_per_gpu_hour,
                "price_per_hour": self.price_per_hour,
                "price_per_seq_hour": self.price_per_seq_hour,
                "cost_per_mtok": self.cost_per_mtok,
            },
            "engine_settings": dict(self.engine_settings),
            "warnings": list(self.warnings),
        }


__all__ = ["EXACT_COLUMNS", "MODELLED_COLUMNS", "Status", "SweepRow", "TrafficMetrics"]
