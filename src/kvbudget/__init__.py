"""kvbudget: KV-cache budgets for speculative decoding.

Plan, split and enforce the KV cache of a target model and its draft (EAGLE3 head, MTP
layers or a small model) across GPU, host and disk tiers, per rank.
"""

from typing import TYPE_CHECKING, Any

from kvbudget._version import __version__
from kvbudget.cost import CacheCost, CostDetail, WindowGroup, cache_cost, cache_cost_detail
from kvbudget.deployment import Deployment, Parallelism, resolve_deployment
from kvbudget.dtypes import DType, parse_dtype
from kvbudget.engines import ENGINE_MODELS, ENGINES, EngineModel, emit, get_engine_model
from kvbudget.errors import (
    CacheError,
    ConfigError,
    EngineRefusedError,
    HubAccessError,
    InfeasibleBudgetError,
    InvalidArgumentError,
    InvalidCacheOperationError,
    KvBudgetError,
    ModelOutputError,
    OutOfBlocksError,
    UnknownModelError,
    UnknownRequestError,
    UnsupportedArchitectureError,
)
from kvbudget.gpus import GpuSpec, get_gpu, list_gpus
from kvbudget.layers import (
    AttentionLayer,
    GatedDeltaNetLayer,
    Layer,
    Mamba2Layer,
    MLALayer,
    NoCacheLayer,
)
from kvbudget.ledger import Ledger
from kvbudget.model import ModelSpec, list_presets, load_model, parse_config
from kvbudget.plan_types import (
    Budget,
    Capacity,
    EnginePlan,
    EngineSource,
    ManagerPlan,
    Plan,
    PoolPlan,
    TierPlan,
)
from kvbudget.planner import SPEC_MODES, build_ledger, build_plan, plan
from kvbudget.spec_modes import SPEC_MODE_TABLE, SpecModeInfo
from kvbudget.split import BudgetSplit, split_budget
from kvbudget.units import format_bytes, parse_bytes
from kvbudget.weights import ParamCounts, WeightsBytes, count_params, weights_bytes

if TYPE_CHECKING:
    from kvbudget.cache import (
        BlockHash,
        BlockId,
        CacheStats,
        DraftPrefixPolicy,
        PoolStats,
        PreemptMode,
        RequestId,
        SpecDecodeCache,
    )
    from kvbudget.search import SweepResult, SweepRow, SweepSpace, sweep
    from kvbudget.sim import (
        AcceptanceModel,
        PolicyMetrics,
        PrefixSynthesis,
        SimulationResult,
        read_trace,
        simulate,
    )


# The paged cache is imported when first used, not by `import kvbudget`: planning (the
# CLI's main job) never loads it.
_CACHE_NAMES = frozenset(
    {
        "BlockHash",
        "BlockId",
        "CacheStats",
        "DraftPrefixPolicy",
        "PoolStats",
        "PreemptMode",
        "RequestId",
        "SpecDecodeCache",
    }
)


# The simulator likewise (``kvbudget.simulate``: trace replay against a plan).
_SIM_NAMES = frozenset(
    {
        "AcceptanceModel",
        "PolicyMetrics",
        "PrefixSynthesis",
        "SimulationResult",
        "read_trace",
        "simulate",
    }
)


# The sweep likewise (``kvbudget.sweep``: search deployments; :mod:`kvbudget.search`).
_SEARCH_NAMES = frozenset({"SweepResult", "SweepRow", "SweepSpace", "sweep"})


def __getattr__(name: str) -> Any:
    """``kvbudget.SpecDecodeCache``, ``kvbudget.simulate``, ``kvbudget.sweep`` and the
    other cache, simulator and sweep names, imported on first use."""
    if name in _CACHE_NAMES:
        import kvbudget.cache

        return getattr(kvbudget.cache, name)
    if name in _SIM_NAMES:
        import kvbudget.sim

        return getattr(kvbudget.sim, name)
    if name in _SEARCH_NAMES:
        import kvbudget.search

        return getattr(kvbudget.search, name)
    raise AttributeError(f"module 'kvbudget' has no attribute {name!r}")


__all__ = [
    "ENGINES",
    "ENGINE_MODELS",
    "SPEC_MODES",
    "SPEC_MODE_TABLE",
    "AcceptanceModel",
    "AttentionLayer",
    "BlockHash",
    "BlockId",
    "Budget",
    "BudgetSplit",
    "CacheCost",
    "CacheError",
    "CacheStats",
    "Capacity",
    "ConfigError",
    "CostDetail",
    "DType",
    "Deployment",
    "DraftPrefixPolicy",
    "EngineModel",
    "EnginePlan",
    "EngineRefusedError",
    "EngineSource",
    "GatedDeltaNetLayer",
    "GpuSpec",
    "HubAccessError",
    "InfeasibleBudgetError",
    "InvalidArgumentError",
    "InvalidCacheOperationError",
    "KvBudgetError",
    "Layer",
    "Ledger",
    "MLALayer",
    "Mamba2Layer",
    "ManagerPlan",
    "ModelOutputError",
    "ModelSpec",
    "NoCacheLayer",
    "OutOfBlocksError",
    "Parallelism",
    "ParamCounts",
    "Plan",
    "PolicyMetrics",
    "PoolPlan",
    "PoolStats",
    "PreemptMode",
    "PrefixSynthesis",
    "RequestId",
    "SimulationResult",
    "SpecDecodeCache",
    "SpecModeInfo",
    "SweepResult",
    "SweepRow",
    "SweepSpace",
    "TierPlan",
    "UnknownModelError",
    "UnknownRequestError",
    "UnsupportedArchitectureError",
    "WeightsBytes",
    "WindowGroup",
    "__version__",
    "build_ledger",
    "build_plan",
    "cache_cost",
    "cache_cost_detail",
    "count_params",
    "emit",
    "format_bytes",
    "get_engine_model",
    "get_gpu",
    "list_gpus",
    "list_presets",
    "load_model",
    "parse_bytes",
    "parse_config",
    "parse_dtype",
    "plan",
    "read_trace",
    "resolve_deployment",
    "simulate",
    "split_budget",
    "sweep",
    "weights_bytes",
]
