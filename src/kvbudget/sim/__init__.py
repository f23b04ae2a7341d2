"""``kvbudget simulate``: replay request traces against a plan and its budget policies.

Module map (data flows down; nothing here is imported by the planner or the cache)::

    trace.py       read Azure / simple CSV / JSONL traces as a stream; shared prefixes
    acceptance.py  accepted draft tokens per speculative step (seeded)
    roofline.py    step time of one rank from the GPU preset's peaks
    policies.py    plan variants: kvbudget, doubled-host, equal-split,
                   target-geometry-draft, no-host
    replay.py      the engine loop through a metadata-only SpecDecodeCache
    fast_decode.py its fast path: steady decode steps counted in integers
    shards.py      data-parallel replicas: routing, one replica's replay, the merge
    metrics.py     per-policy results: counts, bytes, percentiles, series
    simulation.py  simulate(): every policy over one trace; the JSON document
    summary.py     the rich summary table
    plots.py       PNG plots (matplotlib, the ``report`` extra)
    report_html.py one self-contained HTML report
"""

from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.engine_cache import cache_plan
from kvbudget.sim.metrics import Percentiles, PolicyMetrics
from kvbudget.sim.policies import POLICIES, PolicyPlan, policy_plans
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.roofline import GpuRates, Roofline, gpu_rates, roofline_for
from kvbudget.sim.shards import (
    ROUTERS,
    ShardResult,
    merge_shards,
    replay_shard,
    route,
    shard,
)
from kvbudget.sim.simulation import (
    SIM_SCHEMA_VERSION,
    SimulationResult,
    engine_flags_for,
    simulate,
)
from kvbudget.sim.trace import PrefixSynthesis, TraceRequest, default_trace_path, read_trace

__all__ = [
    "POLICIES",
    "ROUTERS",
    "SIM_SCHEMA_VERSION",
    "AcceptanceModel",
    "GpuRates",
    "Percentiles",
    "PolicyMetrics",
    "PolicyPlan",
    "PrefixSynthesis",
    "ReplayConfig",
    "Roofline",
    "ShardResult",
    "SimulationResult",
    "TraceRequest",
    "cache_plan",
    "default_trace_path",
    "engine_flags_for",
    "gpu_rates",
    "merge_shards",
    "policy_plans",
    "read_trace",
    "replay",
    "replay_shard",
    "roofline_for",
    "route",
    "shard",
    "simulate",
]
