"""Engine models: what kvbudget's own cache, vLLM, SGLang and TensorRT-LLM allocate for a
deployment, and the settings that make each engine allocate it.

One module per engine version (:mod:`~kvbudget.engines.kvbudget_cache`,
:mod:`~kvbudget.engines.vllm`, :mod:`~kvbudget.engines.sglang`,
:mod:`~kvbudget.engines.trtllm`), each defining ``MODEL``, an
:class:`~kvbudget.engines.base.EngineModel` with its facts cited to the engine's code;
:mod:`~kvbudget.engines.registry` maps ``name`` and ``name@version`` to them. An engine
model takes a :class:`~kvbudget.deployment.Deployment` and kvbudget's
:class:`~kvbudget.ledger.Ledger` and returns the engine's whole plan
(:class:`~kvbudget.plan_types.EnginePlan`).
"""

from __future__ import annotations

from kvbudget.engines.base import EngineModel
from kvbudget.engines.facts import ENGINES, EngineFacts
from kvbudget.engines.registry import ENGINE_MODELS, ENGINE_NAMES, get_engine_model
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan


def emit(plan: Plan, engine: str | None = None) -> str:
    """The settings that make the plan's engine allocate ``plan``, as text.

    ``engine`` ("vllm", "vllm@0.33.0", ...), when given, must be the engine the plan was
    made for (``kvbudget.plan(engine=...)``), since each engine allocates differently.

    Raises InvalidArgumentError for an unknown engine, a plan made for another engine,
    or an engine with nothing to emit (kvbudget's own cache).
    """
    if not isinstance(plan, Plan):
        raise InvalidArgumentError(f"plan must be a Plan (from kvbudget.plan), got {plan!r}")
    made_for = get_engine_model(plan.engine.id)
    if engine is not None:
        asked = get_engine_model(engine)
        if asked is not made_for:
            raise InvalidArgumentError(
                f"this plan was made for engine {made_for.id}; plan with "
                f"engine={asked.id!r} (kvbudget plan --engine {asked.id}, or --emit "
                f"{asked.id}) to emit its settings"
            )
    if made_for.render is None:
        emitting = ", ".join(n for n in ENGINE_NAMES if n != made_for.name)
        raise InvalidArgumentError(
            f"{made_for.summary} has no settings to emit; plan with engine= one of {emitting}"
        )
    return made_for.render(plan)


__all__ = [
    "ENGINES",
    "ENGINE_MODELS",
    "ENGINE_NAMES",
    "EngineFacts",
    "EngineModel",
    "emit",
    "get_engine_model",
]
