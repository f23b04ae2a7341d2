"""Engine settings that realise a plan, in each engine's own units and meanings.

All engine facts live in :data:`ENGINES`, one row per engine, so they are easy to check
and update. They were read from each project's docs and code in 2026:

* TensorRT-LLM ``KvCacheConfig``: ``max_gpu_total_bytes`` (bytes of KV per rank),
  ``max_tokens``, ``free_gpu_memory_fraction`` (of memory free after weights and
  activations), ``host_cache_size`` (bytes per rank), ``tokens_per_block``.
* vLLM: ``--kv-cache-memory-bytes`` (KV bytes per GPU, overrides
  ``--gpu-memory-utilization``, a fraction of *total* memory for everything),
  ``--kv-offloading-size`` (GiB, the total summed across TP ranks) with
  ``--kv-offloading-backend native``, ``--block-size``.
* SGLang: ``--max-total-tokens`` (token cap of the device pool), ``--mem-fraction-static``
  (weights + KV pool), ``--hicache-size`` (host pool in decimal GB per rank; overrides
  ``--hicache-ratio``), ``--page-size``.

An engine that creates one KV manager per role from a single host knob may hand each
manager the whole value (the 2x pinned-memory bug); the emitted comments say which
per-rank total the value stands for so it can be checked against the plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """How one engine takes a KV budget: knob names, units and scope."""

    name: str
    gpu_knob: str
    gpu_unit: str
    token_knob: str
    host_knob: str
    host_unit: str
    host_scope: str
    kv_dtype_names: Mapping[str, str]
    spec_names: Mapping[str, str]


ENGINES: Mapping[str, EngineFacts] = MappingProxyType(
    {
        "trtllm": EngineFacts(
            name="TensorRT-LLM",
            gpu_knob="kv_cache_config.max_gpu_total_bytes",
            gpu_unit="bytes",
            token_knob="kv_cache_config.max_tokens",
            host_knob="kv_cache_config.host_cache_size",
            host_unit="bytes",
            host_scope="per rank",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8",
                    "int8": "int8",
                    "nvfp4": "nvfp4",
                }
            ),
            spec_names=MappingProxyType(
                {"eagle3": "Eagle3", "mtp": "MTP", "draft-target": "Draft_Target", "ngram": "NGram"}
            ),
        ),
        "vllm": EngineFacts(
            name="vLLM",
            gpu_knob="--kv-cache-memory-bytes",
            gpu_unit="bytes",
            token_knob="",
            host_knob="--kv-offloading-size",
            host_unit="GiB",
            host_scope="total across TP ranks",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8",
                    "int8": "int8",
                    "nvfp4": "nvfp4",
                }
            ),
            spec_names=MappingProxyType(
                {"eagle3": "eagle3", "mtp": "mtp", "draft-target": "draft_model", "ngram": "ngram"}
            ),
        ),
        "sglang": EngineFacts(
            name="SGLang",
            gpu_knob="--max-total-tokens",
            gpu_unit="tokens",
            token_knob="--max-total-tokens",
            host_knob="--hicache-size",
            host_unit="GB (decimal)",
            host_scope="per rank",
            kv_dtype_names=MappingProxyType(
                {
                    "bf16": "auto",
                    "fp16": "auto",
                    "fp32": "auto",
                    "fp8": "fp8_e4m3",
                    "int8": "int8",
                    "nvfp4": "fp4_e2m1",
                }
            ),
            spec_names=MappingProxyType(
                {"eagle3": "EAGLE3", "mtp": "NEXTN", "draft-target": "STANDALONE", "ngram": "NGRAM"}
            ),
        ),
    }
)


def _gpu_total(plan: Plan) -> int:
    return sum(m.gpu.bytes for m in plan.managers)


def _host_total(plan: Plan) -> int:
    return sum(m.host.bytes for m in plan.managers)


def _header(plan: Plan, comment: str) -> list[str]:
    draft = f" + {plan.draft}" if plan.draft else ""
    return [
        f"{comment} kvbudget plan: {plan.target}{draft}, spec {plan.spec}, "
        f"tp={plan.tp} pp={plan.pp}",
        f"{comment} capacity: {plan.capacity.tokens} tokens per manager on the GPU, "
        f"{plan.capacity.host_tokens} on the host",
    ]


def _emit_trtllm(plan: Plan) -> str:
    facts = ENGINES["trtllm"]
    lines = _header(plan, "#")
    lines += [
        f"# KV bytes per rank, all managers together: {_gpu_total(plan)}; host bytes per rank, "
        f"all managers together: {_host_total(plan)}",
        f"tensor_parallel_size: {plan.tp}",
        f"pipeline_parallel_size: {plan.pp}",
        f"max_batch_size: {plan.capacity.max_batch_size}",
        f"max_seq_len: {plan.capacity.max_seq_len}",
        "kv_cache_config:",
        f"  max_gpu_total_bytes: {_gpu_total(plan)}",
        f"  max_tokens: {plan.capacity.tokens}",
        f"  host_cache_size: {_host_total(plan)}",
        f"  tokens_per_block: {plan.tokens_per_block}",
        f"  dtype: {facts.kv_dtype_names[plan.kv_dtype]}",
        f"  enable_block_reuse: {'true' if plan.capacity.tokens else 'false'}",
    ]
    if plan.spec in facts.spec_names:
        lines += [
            "speculative_config:",
            f"  decoding_type: {facts.spec_names[plan.spec]}",
            f"  max_draft_len: {plan.capacity.max_draft_len}",
        ]
        if plan.spec == "mtp":
            lines.append("  num_nextn_predict_layers: 1")
        elif plan.draft:
            lines.append(f"  speculative_model_dir: {plan.draft}")
    return "\n".join(lines) + "\n"


def _gib(num_bytes: int) -> str:
    """GiB with up to 3 decimals, rounded down so the engine never exceeds the plan."""
    thousandths = num_bytes * 1000 // (1024**3)
    whole, frac = divmod(thousandths, 1000)
    return f"{whole}.{frac:03d}".rstrip("0").rstrip(".") if frac else str(whole)


def _emit_vllm(plan: Plan) -> str:
    facts = ENGINES["vllm"]
    lines = _header(plan, "#")
    args = [
        f"vllm serve {plan.target}",
        f"--tensor-parallel-size {plan.tp}",
        f"--pipeline-parallel-size {plan.pp}",
        f"--max-model-len {plan.capacity.max_seq_len}",
        f"--max-num-seqs {plan.capacity.max_batch_size}",
        f"--block-size {plan.tokens_per_block}",
        f"--kv-cache-dtype {facts.kv_dtype_names[plan.kv_dtype]}",
        f"--kv-cache-memory-bytes {_gpu_total(plan)}",
    ]
    host = _host_total(plan)
    if host:
        lines.append(
            f"# --kv-offloading-size is GiB summed over the {plan.tp} TP rank(s): "
            f"{host} B per rank x {plan.tp}, rounded down"
        )
        args += ["--kv-offloading-backend native", f"--kv-offloading-size {_gib(host * plan.tp)}"]
    if plan.spec in facts.spec_names:
        config: dict[str, object] = {
            "method": facts.spec_names[plan.spec],
            "num_speculative_tokens": plan.capacity.max_draft_len,
        }
        if plan.draft:
            config["model"] = plan.draft
        args.append(f"--speculative-config '{json.dumps(config)}'")
    lines.append(" \\\n  ".join(args))
    return "\n".join(lines) + "\n"


def _emit_sglang(plan: Plan) -> str:
    facts = ENGINES["sglang"]
    lines = _header(plan, "#")
    args = [
        f"python -m sglang.launch_server --model-path {plan.target}",
        f"--tp-size {plan.tp}",
        f"--pp-size {plan.pp}",
        f"--context-length {plan.capacity.max_seq_len}",
        f"--max-running-requests {plan.capacity.max_batch_size}",
        f"--page-size {plan.tokens_per_block}",
        f"--kv-cache-dtype {facts.kv_dtype_names[plan.kv_dtype]}",
        f"--max-total-tokens {plan.capacity.tokens}",
    ]
    host = _host_total(plan)
    if host:
        lines.append(f"# --hicache-size is decimal GB per rank: {host} B rounded down to whole GB")
        args += ["--enable-hierarchical-cache", f"--hicache-size {host // 10**9}"]
    if plan.spec in facts.spec_names:
        args.append(f"--speculative-algorithm {facts.spec_names[plan.spec]}")
        if plan.draft:
            args.append(f"--speculative-draft-model-path {plan.draft}")
        if plan.spec != "ngram":
            args += [
                f"--speculative-num-steps {plan.capacity.max_draft_len}",
                "--speculative-eagle-topk 1",
                f"--speculative-num-draft-tokens {plan.capacity.max_draft_len + 1}",
            ]
    lines.append(" \\\n  ".join(args))
    return "\n".join(lines) + "\n"


_EMITTERS: Mapping[str, Callable[[Plan], str]] = MappingProxyType(
    {"trtllm": _emit_trtllm, "vllm": _emit_vllm, "sglang": _emit_sglang}
)


def emit(plan: Plan, engine: str) -> str:
    """The settings that realise ``plan`` in ``engine`` ("trtllm", "vllm" or "sglang").

    Raises InvalidArgumentError for an unknown engine.
    """
    emitter = _EMITTERS.get(engine.lower())
    if emitter is None:
        raise InvalidArgumentError(
            f"unknown engine {engine!r}; choose one of {', '.join(_EMITTERS)}"
        )
    return emitter(plan)
