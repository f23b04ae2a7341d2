"""kvbudget: KV-cache budgets for speculative decoding.

Plan, split and enforce the KV cache of a target model and its draft (EAGLE3 head, MTP
layers or a small model) across GPU, host and disk tiers, per rank.
"""

from kvbudget.cost import CacheCost, CostDetail, WindowGroup, cache_cost, cache_cost_detail
from kvbudget.dtypes import DType, parse_dtype
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
from kvbudget.layers import (
    AttentionLayer,
    GatedDeltaNetLayer,
    Layer,
    Mamba2Layer,
    MLALayer,
    NoCacheLayer,
)
from kvbudget.model import ModelSpec, list_presets, load_model, parse_config
from kvbudget.split import BudgetSplit, split_budget

__version__ = "0.1.0"

__all__ = [
    "AttentionLayer",
    "BudgetSplit",
    "CacheCost",
    "CacheError",
    "ConfigError",
    "CostDetail",
    "DType",
    "GatedDeltaNetLayer",
    "InfeasibleBudgetError",
    "InvalidArgumentError",
    "InvalidCacheOperationError",
    "KvBudgetError",
    "Layer",
    "MLALayer",
    "Mamba2Layer",
    "ModelSpec",
    "NoCacheLayer",
    "OutOfBlocksError",
    "UnknownModelError",
    "UnknownRequestError",
    "UnsupportedArchitectureError",
    "WindowGroup",
    "__version__",
    "cache_cost",
    "cache_cost_detail",
    "list_presets",
    "load_model",
    "parse_config",
    "parse_dtype",
    "split_budget",
]
