"""kvbudget: KV-cache budgets for speculative decoding.

Plan, split and enforce the KV cache of a target model and its draft (EAGLE3 head, MTP
layers or a small model) across GPU, host and disk tiers, per rank.
"""

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
from kvbudget.cost import CacheCost, CostDetail, WindowGroup, cache_cost, cache_cost_detail
from kvbudget.dtypes import DType, parse_dtype
from kvbudget.engines import ENGINES, emit
from kvbudget.errors import (
    CacheError,
    ConfigError,
    InfeasibleBudgetError,
    InvalidArgumentError,
    InvalidCacheOperationError,
    KvBudgetError,
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
from kvbudget.model import ModelSpec, list_presets, load_model, parse_config
from kvbudget.plan_types import Budget, Capacity, ManagerPlan, Plan, TierPlan
from kvbudget.planner import SPEC_MODES, plan
from kvbudget.split import BudgetSplit, split_budget
from kvbudget.units import format_bytes, parse_bytes
from kvbudget.weights import ParamCounts, WeightsBytes, count_params, weights_bytes

__version__ = "0.1.0"

__all__ = [
    "ENGINES",
    "SPEC_MODES",
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
    "DraftPrefixPolicy",
    "GatedDeltaNetLayer",
    "GpuSpec",
    "InfeasibleBudgetError",
    "InvalidArgumentError",
    "InvalidCacheOperationError",
    "KvBudgetError",
    "Layer",
    "MLALayer",
    "Mamba2Layer",
    "ManagerPlan",
    "ModelSpec",
    "NoCacheLayer",
    "OutOfBlocksError",
    "ParamCounts",
    "Plan",
    "PoolStats",
    "PreemptMode",
    "RequestId",
    "SpecDecodeCache",
    "TierPlan",
    "UnknownModelError",
    "UnknownRequestError",
    "UnsupportedArchitectureError",
    "WeightsBytes",
    "WindowGroup",
    "__version__",
    "cache_cost",
    "cache_cost_detail",
    "count_params",
    "emit",
    "format_bytes",
    "get_gpu",
    "list_gpus",
    "list_presets",
    "load_model",
    "parse_bytes",
    "parse_config",
    "parse_dtype",
    "plan",
    "split_budget",
    "weights_bytes",
]
