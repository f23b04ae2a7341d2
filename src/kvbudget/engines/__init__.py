"""Engine models: what kvbudget's own cache, vLLM, SGLang and TensorRT-LLM allocate for a
plan, and the settings that make each engine allocate it.

One module per engine (:mod:`~kvbudget.engines.vllm`, :mod:`~kvbudget.engines.sglang`,
:mod:`~kvbudget.engines.trtllm`), each with its facts cited to the engine's code, the engine
version it is for, a ``build(plan, inputs)`` that predicts the engine's pools and start-up
lines, and a ``render(plan, engine_plan)`` that writes the settings. An engine's module
is imported when a plan for that engine is made or emitted, so planning for kvbudget's
own cache loads none of them.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import ModuleType

from kvbudget.engines.facts import ENGINES, EngineFacts
from kvbudget.engines.inputs import EngineInputs
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import EnginePlan, Plan

ENGINE_NAMES: tuple[str, ...] = ("kvbudget", "vllm", "sglang", "trtllm")

_MODELLED: tuple[str, ...] = ("vllm", "sglang", "trtllm")  # one module each


def _module(engine: str) -> ModuleType:
    """The engine's module (``build`` and ``render``), imported on first use."""
    return importlib.import_module(f"kvbudget.engines.{engine}")


def with_engine(ledger: Plan, inputs: EngineInputs, engine: str) -> Plan:
    """``ledger`` with its ``engine`` plan; under another engine, that engine's capacity."""
    if engine == "kvbudget":
        from kvbudget import __version__

        cap = ledger.capacity
        own = EnginePlan(
            name="kvbudget",
            version=__version__,
            settings={},
            predicted={
                "gpu_tokens": cap.tokens,
                "host_tokens": cap.host_tokens,
                "disk_tokens": cap.disk_tokens,
                "max_concurrency": cap.max_concurrency,
            },
            gpu_tokens=cap.tokens,
            max_concurrency=cap.max_concurrency,
        )
        return replace(ledger, engine=own)
    planned: EnginePlan = _module(engine).build(ledger, inputs)
    capacity = replace(
        ledger.capacity,
        tokens=planned.gpu_tokens,
        max_concurrency=planned.max_concurrency,
    )
    return replace(
        ledger,
        capacity=capacity,
        engine=planned,
        warnings=ledger.warnings + planned.warnings,
    )


def emit(plan: Plan, engine: str) -> str:
    """The settings that make ``engine`` ("trtllm", "vllm" or "sglang") allocate ``plan``.

    ``plan`` must have been planned for that engine (``kvbudget.plan(engine=...)``), since
    each engine allocates differently.

    Raises InvalidArgumentError for an unknown engine or a plan made for another engine.
    """
    if not isinstance(plan, Plan):
        raise InvalidArgumentError(f"plan must be a Plan (from kvbudget.plan), got {plan!r}")
    name = engine.lower() if isinstance(engine, str) else None
    if name not in _MODELLED:
        raise InvalidArgumentError(
            f"unknown engine {engine!r}; choose one of {', '.join(_MODELLED)}"
        )
    planned = plan.engine
    if planned is None or planned.name != name:
        made_for = "kvbudget" if planned is None else planned.name
        raise InvalidArgumentError(
            f"this plan was made for engine {made_for}; plan with engine={name!r} "
            f"(kvbudget plan --engine {name}, or --emit {name}) to emit its settings"
        )
    text: str = _module(name).render(plan, planned)
    return text


__all__ = ["ENGINES", "ENGINE_NAMES", "EngineFacts", "EngineInputs", "emit", "with_engine"]
