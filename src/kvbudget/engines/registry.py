"""The engine models kvbudget knows, by name and version.

=====================  =========================================================
``kvbudget``           kvbudget's own :class:`~kvbudget.SpecDecodeCache`
``vllm@0.33.0``        vLLM 0.33.0 (the default ``vllm``)
``vllm@0.34.0``        vLLM 0.34.0 (its sizing is 0.33.0's; the default memory knob
                       differs)
``vllm@0.29.0``        the newest 0.2x release, where its sizing differs
``sglang@0.5.23``      SGLang 0.5.23, the PyPI wheel (the default ``sglang``)
``sglang@main@...``    SGLang main at the commit its facts were read, where it differs
``trtllm@main@...``    TensorRT-LLM at the commit its facts were read: the manager
                       its ``use_kv_cache_manager_v2: auto`` picks (V1 where
                       kvbudget's V2 model does not cover the deployment)
``trtllm@v1``          TensorRT-LLM's V1 manager, whatever the model
``trtllm@v2``          TensorRT-LLM's V2 manager (non-hybrid, no speculation)
``trtllm@1.3.0rc18``   the last release that gave each V1 draft manager the whole
                       host budget (PR #14373 split it)
=====================  =========================================================

``--engine NAME`` picks the model marked ``default`` for that name; ``NAME@VERSION`` one
version. Adding an engine version is one module that defines ``MODEL`` (an
:class:`~kvbudget.engines.base.EngineModel`), listed in :data:`ENGINE_MODELS`.
"""

from __future__ import annotations

from kvbudget.engines import (
    kvbudget_cache,
    sglang,
    sglang_main,
    trtllm,
    trtllm_1_3_0rc18,
    trtllm_v2,
    vllm,
    vllm_0_29,
    vllm_0_34,
)
from kvbudget.engines.base import EngineModel
from kvbudget.errors import InvalidArgumentError

ENGINE_MODELS: tuple[EngineModel, ...] = (
    kvbudget_cache.MODEL,
    vllm.MODEL,
    vllm_0_34.MODEL,
    vllm_0_29.MODEL,
    sglang.MODEL,
    sglang_main.MODEL,
    trtllm.MODEL,
    trtllm.MODEL_V1,
    trtllm_1_3_0rc18.MODEL,
    trtllm_v2.MODEL,
)

ENGINE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(m.name for m in ENGINE_MODELS))


def get_engine_model(engine: object) -> EngineModel:
    """The engine model of ``engine``: ``"vllm"`` (its default version) or
    ``"vllm@0.33.0"``; an :class:`EngineModel` is returned as it is.

    Raises InvalidArgumentError naming the known engines and versions.
    """
    if isinstance(engine, EngineModel):
        return engine
    text = engine.strip().lower() if isinstance(engine, str) else None
    if text:
        name, _, version = text.partition("@")
        for model in ENGINE_MODELS:
            if model.name == name and (model.version == version if version else model.default):
                return model
    known = ", ".join(m.id for m in ENGINE_MODELS)
    raise InvalidArgumentError(
        f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_NAMES)} (the default "
        f"version) or one of {known} (kvbudget engines lists them)"
    )


__all__ = ["ENGINE_MODELS", "ENGINE_NAMES", "get_engine_model"]
