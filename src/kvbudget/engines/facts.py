"""Engine knobs: names, units and scopes, one row per engine.

How each engine *sizes* its pools is in its own module (:mod:`kvbudget.engines.vllm`,
:mod:`~kvbudget.engines.sglang`, :mod:`~kvbudget.engines.trtllm`), with sources; this
table holds what the emitted settings are called and what unit they take. The facts were
read from each project's code and docs in 2026 (stored copies; commit given where the
copy showed one):

* TensorRT-LLM, ``tensorrt_llm/llmapi/llm_args.py`` @ 0004396720054fd8e205cbf616f21f0b57c6b412:

  - ``KvCacheConfig`` fields ``max_gpu_total_bytes`` (bytes of KV per rank),
    ``max_tokens``, ``free_gpu_memory_fraction`` (default 0.9, of memory *free* after
    weights and activations); V1 sizes from ``max_tokens`` and reads
    ``max_gpu_total_bytes`` only with several window sizes (see
    :mod:`kvbudget.engines.trtllm`),
    ``host_cache_size`` (bytes, per rank), ``tokens_per_block`` (a ``KvCacheConfig``
    field, default 32, used by the PyTorch backend), ``dtype`` ("auto" = the
    checkpoint's dtype, "fp8", "fp8_ds_mla", "nvfp4"; other names only warn in
    ``sync_quant_config_with_kv_cache_config_dtype``, so there is no int8 KV cache) and
    ``enable_block_reuse`` (default true).
  - Top-level YAML keys are the ``LlmArgs`` fields (``tensor_parallel_size``,
    ``pipeline_parallel_size``, ``max_batch_size``, ``max_seq_len``,
    ``kv_cache_config``, ``speculative_config``), read by ``trtllm-serve
    --extra_llm_api_options FILE`` (``update_llm_args_with_extra_options``); newer
    docs prefer the equivalent ``--config`` (``docs/source/_includes/note_sections.rst``).
  - ``speculative_config`` is a union on ``decoding_type``: ``Eagle3``
    (``Eagle3DecodingConfig``), ``MTP``, ``Draft_Target`` and ``NGram``. The draft path
    is ``speculative_model`` (``speculative_model_dir`` is still accepted as an alias,
    ``docs/source/features/speculative-decoding.md`` @ 04c8822c; that page calls the
    draft/target type ``DraftTarget``, which older releases used, but the code's literal
    is ``Draft_Target``). ``max_draft_len`` is the draft length for every type. In MTP,
    ``num_nextn_predict_layers`` is deprecated and remapped to ``max_draft_len``; an
    earlier stored ``llm_args.py`` instead overwrote ``max_draft_len`` with it (default
    1), so it is not emitted.
  - ``max_tokens`` is emitted for every model: with several window sizes V1 ignores it in
    the target manager but a draft manager still sizes from it, and the window shares
    (``TRTLLM_WINDOW_SIZE_SHARES``) decide the target's pools.
  - Host offload copies *reusable* blocks to host memory on eviction
    (``docs/source/features/kvcache.md`` @ 0076e939), so block reuse stays on.
  - With a separate draft KV manager, ``max_gpu_total_bytes`` and ``host_cache_size``
    are one per-rank budget that ``KvCacheCreator._split_kv_cache_budget_for_draft``
    (``tensorrt_llm/_torch/pyexecutor/_util.py``) splits by per-token cost (fixed GPU
    state first). Before PRs #12188, #12855, #13130, #14373 and #17588 each manager got
    the whole value ("both managers independently claim the full max_gpu_total_bytes";
    "both managers used to receive the full host_cache_size").

* vLLM, ``vllm/config/cache.py`` @ 002f10e0cfa1373a19a0d2756598a34b700d20e5:

  - ``--kv-cache-memory-bytes``: KV bytes per GPU; it ignores
    ``--gpu-memory-utilization`` (a fraction of *total* memory for everything). Draft
    layers (EAGLE/MTP heads, draft models) live in the same KV cache as the target's
    (PR #24322 binds draft K/V layers next to the target's), so it covers both.
  - ``--kv-offloading-size``: a float, GiB (``vllm/config/vllm.py`` sets
    ``cpu_bytes_to_use = size * (1 << 30)``); the docstring says "summed across all TP
    ranks", and ``CPUOffloadingSpec`` (``vllm/v1/kv_offload/cpu/spec.py`` @ 0072b0b7)
    divides it by ``parallel_config.world_size`` (TP x PP), so it is the total over all
    ranks. ``--kv-offloading-backend`` is "native" (the ``OffloadingConnector``) or
    "lmcache".
  - ``--block-size``: any positive int (default 16); ``--kv-cache-dtype`` choices
    include "auto" (the model dtype), "fp8", "nvfp4" but no plain int8 (only
    "int8_per_token_head", which adds scales).
  - ``--speculative-config`` ``method`` names (``vllm/config/speculative.py`` @ 002e77c1):
    "eagle3", "mtp", "draft_model", "ngram"; vLLM 0.33.0 (the PyPI wheel) adds "eagle",
    "dflash" and "dspark" (DeepSeek-V4.1's DSpark stages: the draft model is the target's
    own checkpoint, set by ``SpeculativeConfig.__post_init__``); ngram's
    ``prompt_lookup_max`` is documented as required and both window fields default to 5
    when neither is given.

* SGLang, ``python/sglang/srt/server_args.py`` @ 001067fffe33427bee0ed2f007fb7551a1d76b44:

  - ``--max-total-tokens`` caps the device token pool (the draft pools hold the same
    tokens); ``--mem-fraction-static`` is the share of GPU memory for weights + KV pools.
  - ``--hicache-size`` is an int: GB per rank, decimal (``HostKVCache`` in
    ``mem_cache/pool_host/base.py`` takes ``host_size * 1e9 // size_per_token`` tokens,
    ``size_per_token`` being this rank's); 0 means unset, and ``--hicache-ratio`` then
    sizes the pool. It sizes the target's host pool (NEXTN/MTP draft layers packed in it);
    sidecar draft host pools (EAGLE3 heads, draft models) get the same
    token count on top (PR #30393; PRs #30581 and #35875, which would make it one
    budget, were not merged). It needs ``--enable-hierarchical-cache``.
  - ``--page-size``, ``--tp-size``, ``--pp-size``; ``--kv-cache-dtype`` choices "auto",
    "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
    "fp4_e2m1" (the last is now rejected: "use nvfp4 or fp4_mx_block16"); no int8.
  - ``--speculative-algorithm`` builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH,
    DSPARK; ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
    ``--speculative-num-draft-tokens`` (steps + 1 when topk is 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """The names one engine's settings go by (what they mean there, their units and
    scopes, is the engine's module: :mod:`kvbudget.engines.vllm`, ...).

    * ``kv_dtype_names``: kvbudget dtype -> the engine's name; ``None`` = no such KV cache.
    * ``spec_extra``: extra speculative settings per mode, written out as given.
    """

    name: str
    gpu_knob: str
    token_knob: str
    host_knob: str
    block_knob: str
    block_power_of_two: bool
    kv_dtype_knob: str
    kv_dtype_names: Mapping[str, str | None]
    spec_knob: str
    spec_names: Mapping[str, str]
    draft_len_knob: str
    draft_model_knob: str
    spec_extra: Mapping[str, Mapping[str, int]]


_NO_EXTRA: Mapping[str, Mapping[str, int]] = MappingProxyType({})
# "auto" keeps the checkpoint's 16/32-bit dtype; no engine has a plain int8 KV cache
_DTYPES_AUTO_FP8_NVFP4: Mapping[str, str | None] = MappingProxyType(
    {"bf16": "auto", "fp16": "auto", "fp32": "auto", "fp8": "fp8", "int8": None, "nvfp4": "nvfp4"}
)

ENGINES: Mapping[str, EngineFacts] = MappingProxyType(
    {
        "trtllm": EngineFacts(
            name="TensorRT-LLM",
            gpu_knob="kv_cache_config.max_gpu_total_bytes",
            token_knob="kv_cache_config.max_tokens",
            host_knob="kv_cache_config.host_cache_size",
            block_knob="kv_cache_config.tokens_per_block",
            block_power_of_two=True,
            kv_dtype_knob="kv_cache_config.dtype",
            kv_dtype_names=_DTYPES_AUTO_FP8_NVFP4,
            spec_knob="speculative_config.decoding_type",
            spec_names=MappingProxyType(
                {"eagle3": "Eagle3", "mtp": "MTP", "draft-target": "Draft_Target", "ngram": "NGram"}
            ),
            draft_len_knob="max_draft_len",
            draft_model_knob="speculative_model",
            spec_extra=_NO_EXTRA,
        ),
        "vllm": EngineFacts(
            name="vLLM",
            gpu_knob="--kv-cache-memory-bytes",
            token_knob="",
            host_knob="--kv-offloading-size",
            block_knob="--block-size",
            block_power_of_two=False,
            kv_dtype_knob="--kv-cache-dtype",
            kv_dtype_names=_DTYPES_AUTO_FP8_NVFP4,
            spec_knob="--speculative-config method",
            spec_names=MappingProxyType(
                {
                    "eagle3": "eagle3",
                    "eagle": "eagle",
                    "dflash": "dflash",
                    "dspark": "dspark",
                    "mtp": "mtp",
                    "draft-target": "draft_model",
                    "ngram": "ngram",
                }
            ),
            draft_len_knob="num_speculative_tokens",
            draft_model_knob="model",
            spec_extra=MappingProxyType(
                {"ngram": MappingProxyType({"prompt_lookup_max": 5, "prompt_lookup_min": 5})}
            ),
        ),
        "sglang": EngineFacts(
            name="SGLang",
            gpu_knob="--max-total-tokens",
            token_knob="--max-total-tokens",
            host_knob="--hicache-size",
            block_knob="--page-size",
            block_power_of_two=False,
            kv_dtype_knob="--kv-cache-dtype",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8_e4m3",
                    "int8": None,
                    "nvfp4": "nvfp4",
                }
            ),
            spec_knob="--speculative-algorithm",
            spec_names=MappingProxyType(
                {
                    "eagle3": "EAGLE3",
                    "eagle": "EAGLE",
                    "dflash": "DFLASH",
                    "dspark": "DSPARK",
                    "mtp": "NEXTN",
                    "draft-target": "STANDALONE",
                    "ngram": "NGRAM",
                }
            ),
            draft_len_knob="--speculative-num-steps",
            draft_model_knob="--speculative-draft-model-path",
            spec_extra=_NO_EXTRA,
        ),
    }
)
