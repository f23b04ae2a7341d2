"""Engine settings that realise a plan, in each engine's own units and meanings.

All engine facts live in :data:`ENGINES`, one row per engine, so they are easy to check
and update; the emitters below take knob names, units and scopes from that table. The
facts were read from each project's code and docs in 2026 (stored copies; commit given
where the copy showed one):

* TensorRT-LLM, ``tensorrt_llm/llmapi/llm_args.py`` @ 0004396720054fd8e205cbf616f21f0b57c6b412:

  - ``KvCacheConfig`` fields ``max_gpu_total_bytes`` (bytes of KV per rank),
    ``max_tokens``, ``free_gpu_memory_fraction`` (default 0.9, of memory *free* after
    weights and activations; the pool is the smallest of the three),
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
  - ``max_tokens`` is left out for sliding-window models: ``KvCacheCreator`` warns
    "max_tokens should not be set for VSWA case as it is ambiguous".
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
    "eagle3", "mtp", "draft_model", "ngram"; ngram's ``prompt_lookup_max`` is documented
    as required and both window fields default to 5 when neither is given.

* SGLang, ``python/sglang/srt/server_args.py`` @ 001067fffe33427bee0ed2f007fb7551a1d76b44:

  - ``--max-total-tokens`` caps the device token pool (the draft pools hold the same
    tokens); ``--mem-fraction-static`` is the share of GPU memory for weights + KV pools.
  - ``--hicache-size`` is an int: GB per rank, decimal (``HostKVCache`` in
    ``mem_cache/pool_host/base.py`` takes ``host_size * 1e9 // size_per_token`` tokens,
    ``size_per_token`` being this rank's); 0 means unset, and ``--hicache-ratio`` then
    sizes the pool. It sizes the *target's* host pool only: draft host pools get the same
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

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """How one engine takes a KV budget: knob names, units and scope.

    * ``host_covers``: which managers the host knob sizes: ``"all"`` (one budget for
      target + draft) or ``"target"`` (the engine adds the draft's host pool on top).
    * ``host_over_ranks``: the host value is the total over all TP x PP ranks, not one
      rank's share.
    * ``kv_dtype_names``: kvbudget dtype -> the engine's name; ``None`` = no such KV cache.
    * ``spec_extra``: extra speculative settings per mode, written out as given.
    """

    name: str
    gpu_knob: str
    gpu_unit: str
    gpu_scope: str
    token_knob: str
    host_knob: str
    host_unit: str
    host_scope: str
    host_covers: Literal["all", "target"]
    host_over_ranks: bool
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

ENGINES: Mapping[str, EngineFacts] = MappingProxyType(
    {
        "trtllm": EngineFacts(
            name="TensorRT-LLM",
            gpu_knob="kv_cache_config.max_gpu_total_bytes",
            gpu_unit="bytes",
            gpu_scope="per rank, one budget for target + draft managers",
            token_knob="kv_cache_config.max_tokens",
            host_knob="kv_cache_config.host_cache_size",
            host_unit="bytes",
            host_scope="per rank, one budget for target + draft managers",
            host_covers="all",
            host_over_ranks=False,
            block_knob="kv_cache_config.tokens_per_block",
            block_power_of_two=True,
            kv_dtype_knob="kv_cache_config.dtype",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8",
                    "int8": None,
                    "nvfp4": "nvfp4",
                }
            ),
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
            gpu_unit="bytes",
            gpu_scope="per GPU, all layers (draft layers included)",
            token_knob="",
            host_knob="--kv-offloading-size",
            host_unit="GiB",
            host_scope="total over all TP x PP ranks",
            host_covers="all",
            host_over_ranks=True,
            block_knob="--block-size",
            block_power_of_two=False,
            kv_dtype_knob="--kv-cache-dtype",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8",
                    "int8": None,
                    "nvfp4": "nvfp4",
                }
            ),
            spec_knob="--speculative-config method",
            spec_names=MappingProxyType(
                {"eagle3": "eagle3", "mtp": "mtp", "draft-target": "draft_model", "ngram": "ngram"}
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
            gpu_unit="tokens",
            gpu_scope="device pool tokens, shared by target and draft pools",
            token_knob="--max-total-tokens",
            host_knob="--hicache-size",
            host_unit="GB (decimal, whole)",
            host_scope="per rank, target's host pool only",
            host_covers="target",
            host_over_ranks=False,
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
                {"eagle3": "EAGLE3", "mtp": "NEXTN", "draft-target": "STANDALONE", "ngram": "NGRAM"}
            ),
            draft_len_knob="--speculative-num-steps",
            draft_model_knob="--speculative-draft-model-path",
            spec_extra=_NO_EXTRA,
        ),
    }
)

GIB = 1024**3
GB = 10**9


def _gpu_total(plan: Plan) -> int:
    """KV bytes per GPU for an engine knob applied to every rank alike.

    The reported stage's managers' bytes; with pipeline stages of different budgets,
    the smallest stage budget, so no stage is asked for more than it has.
    """
    return min(sum(m.gpu.bytes for m in plan.managers), plan.min_stage_gpu_bytes)


def _stage_note(plan: Plan) -> list[str]:
    if plan.min_stage_gpu_bytes >= plan.budget.gpu_bytes:
        return []
    return [
        f"# PP stages differ: the KV bytes are the smallest stage budget "
        f"({plan.min_stage_gpu_bytes}), not the reported last stage's ({plan.budget.gpu_bytes})"
    ]


def _host_total(plan: Plan) -> int:
    return sum(m.host.bytes for m in plan.managers)


def _host_bytes(plan: Plan, facts: EngineFacts) -> int:
    """Host bytes per rank that the engine's host knob stands for."""
    if facts.host_covers == "target":
        target = plan.manager("target")
        return target.host.bytes if target is not None else 0
    return _host_total(plan)


def _gib(num_bytes: int) -> str:
    """GiB with up to 3 decimals, rounded down so the engine never exceeds the plan."""
    thousandths = num_bytes * 1000 // GIB
    whole, frac = divmod(thousandths, 1000)
    return f"{whole}.{frac:03d}".rstrip("0").rstrip(".") if frac else str(whole)


def _whole_gb(num_bytes: int) -> int:
    """Whole decimal GB (10^9 B), rounded down."""
    return num_bytes // GB


def _kv_dtype(plan: Plan, facts: EngineFacts) -> str:
    name = facts.kv_dtype_names.get(plan.kv_dtype)
    if name is None:
        choices = ", ".join(k for k, v in facts.kv_dtype_names.items() if v is not None)
        raise InvalidArgumentError(
            f"{facts.name} has no {plan.kv_dtype} KV cache ({facts.kv_dtype_knob}); "
            f"plan with --kv-dtype one of {choices}"
        )
    return name


def _check_block(plan: Plan, facts: EngineFacts) -> None:
    tpb = plan.tokens_per_block
    if facts.block_power_of_two and (tpb < 2 or tpb & (tpb - 1)):
        raise InvalidArgumentError(
            f"{facts.name} needs {facts.block_knob} to be a power of two > 1, got {tpb}; "
            "change --tokens-per-block"
        )


def _header(plan: Plan, comment: str) -> list[str]:
    draft = f" + {plan.draft}" if plan.draft else ""
    return [
        f"{comment} kvbudget plan: {plan.target}{draft}, spec {plan.spec}, "
        f"tp={plan.tp} pp={plan.pp}",
        f"{comment} capacity: {plan.capacity.tokens} tokens per manager on the GPU, "
        f"{plan.capacity.host_tokens} on the host",
    ]


def _auto_note(plan: Plan, facts: EngineFacts, name: str) -> list[str]:
    if name != "auto":
        return []
    return [
        f"# {facts.kv_dtype_knob} auto keeps the checkpoint's dtype; the plan assumes "
        f"{plan.kv_dtype}"
    ]


def _emit_trtllm(plan: Plan) -> str:
    facts = ENGINES["trtllm"]
    _check_block(plan, facts)
    dtype = _kv_dtype(plan, facts)
    gpu, host = _gpu_total(plan), _host_bytes(plan, facts)
    lines = _header(plan, "#")
    lines += [
        f"# use: trtllm-serve {plan.target} --extra_llm_api_options <this file> "
        "(newer releases: --config)",
        f"# KV bytes per rank, all managers together: {gpu}; host bytes per rank, "
        f"all managers together: {host}",
        "# the GPU pool is the smallest of max_gpu_total_bytes, max_tokens and "
        "free_gpu_memory_fraction (0.9) of free memory",
    ]
    if len(plan.managers) > 1:
        lines += [
            "# target and draft managers share both budgets, split by bytes per token;",
            "# releases before PRs #12188/#14373 gave each manager the whole value",
        ]
    lines += _auto_note(plan, facts, dtype) + _stage_note(plan)
    lines += [
        f"tensor_parallel_size: {plan.tp}",
        f"pipeline_parallel_size: {plan.pp}",
        f"max_batch_size: {plan.capacity.max_batch_size}",
        f"max_seq_len: {plan.capacity.max_seq_len}",
        "kv_cache_config:",
        f"  max_gpu_total_bytes: {gpu}",
    ]
    if any(m.window_groups for m in plan.managers):
        lines.append(
            "  # no max_tokens: TensorRT-LLM calls it ambiguous with sliding-window layers"
        )
    else:
        lines.append(f"  max_tokens: {plan.capacity.tokens}")
    lines += [
        f"  host_cache_size: {host}",
        f"  tokens_per_block: {plan.tokens_per_block}",
        f"  dtype: {dtype}",
        "  enable_block_reuse: true  # host offload keeps evicted reusable blocks",
    ]
    if plan.spec in facts.spec_names:
        lines += [
            "speculative_config:",
            f"  decoding_type: {facts.spec_names[plan.spec]}",
            f"  {facts.draft_len_knob}: {plan.capacity.max_draft_len}",
        ]
        if plan.spec == "mtp":
            lines.append(
                "  # releases that read the MTP draft length from num_nextn_predict_layers "
                f"need it set to {plan.capacity.max_draft_len} as well"
            )
        elif plan.draft:
            lines.append(f"  {facts.draft_model_knob}: {plan.draft}")
        for key, value in facts.spec_extra.get(plan.spec, {}).items():
            lines.append(f"  {key}: {value}")
    return "\n".join(lines) + "\n"


def _emit_vllm(plan: Plan) -> str:
    facts = ENGINES["vllm"]
    _check_block(plan, facts)
    dtype = _kv_dtype(plan, facts)
    lines = _header(plan, "#")
    lines.append(
        f"# {facts.gpu_knob} is KV bytes per GPU for all layers, draft layers included; "
        "it overrides --gpu-memory-utilization"
    )
    lines += _auto_note(plan, facts, dtype) + _stage_note(plan)
    args = [
        f"vllm serve {plan.target}",
        f"--tensor-parallel-size {plan.tp}",
        f"--pipeline-parallel-size {plan.pp}",
        f"--max-model-len {plan.capacity.max_seq_len}",
        f"--max-num-seqs {plan.capacity.max_batch_size}",
        f"{facts.block_knob} {plan.tokens_per_block}",
        f"{facts.kv_dtype_knob} {dtype}",
        f"{facts.gpu_knob} {_gpu_total(plan)}",
    ]
    host = _host_bytes(plan, facts)
    ranks = plan.tp * plan.pp if facts.host_over_ranks else 1
    size = _gib(host * ranks)
    if size != "0":
        lines.append(
            f"# {facts.host_knob} is GiB summed over all {ranks} rank(s) "
            f"(TP {plan.tp} x PP {plan.pp}): {host} B per rank x {ranks}, rounded down"
        )
        args += ["--kv-offloading-backend native", f"{facts.host_knob} {size}"]
    elif host:
        lines.append(
            f"# host budget under 0.001 GiB in all: {facts.host_knob} left unset (0 would fail)"
        )
    if plan.spec in facts.spec_names:
        config: dict[str, object] = {
            "method": facts.spec_names[plan.spec],
            facts.draft_len_knob: plan.capacity.max_draft_len,
        }
        if plan.draft:
            config[facts.draft_model_knob] = plan.draft
        config.update(facts.spec_extra.get(plan.spec, {}))
        args.append(f"--speculative-config '{json.dumps(config)}'")
    lines.append(" \\\n  ".join(args))
    return "\n".join(lines) + "\n"


def _emit_sglang(plan: Plan) -> str:
    facts = ENGINES["sglang"]
    _check_block(plan, facts)
    dtype = _kv_dtype(plan, facts)
    lines = _header(plan, "#")
    shared = " (draft pools hold the same tokens)" if plan.spec in facts.spec_names else ""
    lines += [
        f"# {facts.gpu_knob} caps the device token pool{shared};",
        "# --mem-fraction-static (weights + KV pools, share of GPU memory) must leave room",
    ]
    lines += _auto_note(plan, facts, dtype)
    args = [
        f"python -m sglang.launch_server --model-path {plan.target}",
        f"--tp-size {plan.tp}",
        f"--pp-size {plan.pp}",
        f"--context-length {plan.capacity.max_seq_len}",
        f"--max-running-requests {plan.capacity.max_batch_size}",
        f"{facts.block_knob} {plan.tokens_per_block}",
        f"{facts.kv_dtype_knob} {dtype}",
        f"{facts.gpu_knob} {plan.capacity.tokens}",
    ]
    host = _host_bytes(plan, facts)
    size = _whole_gb(host)
    if size:
        lines.append(
            f"# {facts.host_knob} is whole decimal GB per rank for the target's host pool: "
            f"{host} B rounded down"
        )
        draft = plan.manager("draft")
        if draft is not None and draft.host.bytes:
            lines.append(
                "# SGLang gives the draft a host pool of the same token count on top (PR #30393)"
            )
        args += ["--enable-hierarchical-cache", f"{facts.host_knob} {size}"]
    elif _host_total(plan):
        lines.append(
            f"# target host pool under 1 GB: {facts.host_knob} takes whole GB and 0 means "
            "unset (--hicache-ratio), so HiCache is left off"
        )
    if plan.spec in facts.spec_names:
        args.append(f"{facts.spec_knob} {facts.spec_names[plan.spec]}")
        if plan.draft:
            args.append(f"{facts.draft_model_knob} {plan.draft}")
        k = plan.capacity.max_draft_len
        if plan.spec != "ngram":
            args += [f"{facts.draft_len_knob} {k}", "--speculative-eagle-topk 1"]
        args.append(f"--speculative-num-draft-tokens {k + 1}")
    lines.append(" \\\n  ".join(args))
    return "\n".join(lines) + "\n"


_EMITTERS: Mapping[str, Callable[[Plan], str]] = MappingProxyType(
    {"trtllm": _emit_trtllm, "vllm": _emit_vllm, "sglang": _emit_sglang}
)


def emit(plan: Plan, engine: str) -> str:
    """The settings that realise ``plan`` in ``engine`` ("trtllm", "vllm" or "sglang").

    Raises InvalidArgumentError for an unknown engine, a KV dtype the engine has no cache
    for, or a block size the engine does not take.
    """
    if not isinstance(plan, Plan):
        raise InvalidArgumentError(f"plan must be a Plan (from kvbudget.plan), got {plan!r}")
    emitter = _EMITTERS.get(engine.lower()) if isinstance(engine, str) else None
    if emitter is None:
        raise InvalidArgumentError(
            f"unknown engine {engine!r}; choose one of {', '.join(_EMITTERS)}"
        )
    return emitter(plan)
