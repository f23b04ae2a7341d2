"""The public API of ``kvbudget``, pinned: a name added to or dropped from
``kvbudget.__all__`` changes this list in the same commit (httpx's
``tests/test_exported_members.py`` pattern)."""

from __future__ import annotations

import kvbudget

PUBLIC = (
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
    "ENGINES",
    "ENGINE_MODELS",
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
    "SPEC_MODES",
    "SPEC_MODE_TABLE",
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
)


def test_the_public_names_are_pinned() -> None:
    assert sorted(kvbudget.__all__) == list(PUBLIC)


def test_every_public_name_resolves() -> None:
    for name in PUBLIC:
        assert getattr(kvbudget, name) is not None, name


def test_kvbudget_sweep_is_the_function_not_its_package() -> None:
    import kvbudget.search.driver  # importing the package does not shadow the function

    assert callable(kvbudget.sweep) and kvbudget.sweep is kvbudget.search.sweep
