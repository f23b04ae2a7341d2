"""MiniMax-M3 under SGLang 0.5.23: its ``MiniMaxSparseKVPool``, as SGLang sizes it.

Facts from the SGLang 0.5.23 PyPI wheel (``python/sglang/srt/``; it records no commit),
run by the fidelity harness (``benchmarks/fidelity/sglang``, ``--match minimax-m3``) on
an H200's platform, without speculation, with NGRAM and with an EAGLE3 head:

* **Which models** (``configs/model_config.py`` ``is_minimax_sparse``): the checkpoint's
  ``architectures[0]`` is ``MiniMaxM3SparseForCausalLM`` or
  ``MiniMaxM3SparseForConditionalGeneration``; the sparse config is the text config's
  ``sparse_attention_config`` (``get_minimax_sparse_attention_config``), read as written
  (``configs/minimax_vl.py`` ``_coerce_sub_config``: a ``PretrainedConfig`` of the text
  config's keys, no class defaults); ``sparse_attention_freq`` non-zero marks a sparse
  layer, ``sparse_disable_index_value`` non-zero an index-K-only one
  (``get_minimax_sparse_layer_ids``, ``get_minimax_sparse_disable_value_layer_ids``).
* **Pool** (``mem_cache/memory_pool.py`` ``MiniMaxSparseKVPool.__init__``): a main
  ``MHATokenToKVPool`` with K and V of every layer (``get_num_kv_heads(attn_tp)`` heads
  of ``head_dim``, the KV dtype); an index pool of one head of ``sparse_index_dim`` per
  sparse layer, replicated on every TP rank: ``MHATokenToKVPool`` (index K and V) for the
  value-bearing sparse layers, ``MHATokenToKOnlyPool`` (index K) for the K-only ones.
  Each has ``size + page`` rows (``_kv_buffer_shapes``; ``MHATokenToKOnlyPool``'s
  ``size + page_size``), so the per-token figure of :func:`layer_bytes` is exact for
  the whole pool as for the ordinary pools.
* **Index dtype** (``get_minimax_sparse_index_dtype``): the KV dtype when fp8 attention
  GEMMs run (``server_args.py`` ``m3_fp8_attn_gemm_enabled``: ``--kv-cache-dtype
  fp8_e4m3``, the ``trtllm_mha`` backend, which ``arg_groups/model_overrides/minimax_m3.py``
  picks on SM100 for fp8_e4m3 when no backend is given, as kvbudget emits none) or on
  CUDA SM90 with an fp8_e4m3 KV cache; else the model dtype (:func:`index_dtype_bytes`).
* **Budget** (``model_executor/pool_configurator.py``
  ``DefaultPoolConfigurator._compute_cell_size``, its ``is_minimax_sparse`` branch): the
  same sum per token, ``(dense + sparse) x 2 x kv_heads x head_dim x kv_size +
  (kv-index x 2 + k-only) x index_dim x index_size``, so the ordinary
  ``T = budget // cell`` solver of :mod:`kvbudget.engines.sglang` holds.
* **EAGLE3** (``models/minimax_m3.py`` / ``minimax_m3_vl.py``
  ``set_eagle3_layers_to_capture``): an EAGLE3 head is a sidecar draft as for any target
  (:mod:`kvbudget.engines.sglang`): the configurator prices it at ``int(cell x (1 + D /
  L))`` with the MiniMax cell, and the draft worker's own ``MHATokenToKVPool`` holds the
  target's tokens.
* **HiCache** (``mem_cache/hybrid_cache/hybrid_pool_assembler.py``
  ``build_minimax_sparse_hicache_stack``): ``--hicache-size`` sizes the main pool's host
  pool alone (``build_kv_host_pool``); the index-K host pool
  (``pool_host/mha.py`` ``MHATokenToKOnlyPoolHost``) has its tokens and comes on top; an
  EAGLE3 head's host pool has them too (``build_full_draft_pools``, registered by
  ``mem_cache/kv_cache_builder.py`` ``maybe_register_hicache_draft``), on top as well. It
  raises for value-bearing index layers ("supports index-k-only sparse layers") and at
  PP > 1: refused here (:func:`check`).

Refused (:func:`check`), each in what SGLang does:

* ``--spec mtp``: SGLang 0.5.23 has no MiniMax-M3 MTP model: ``MiniMaxM3SparseForCausalLM``
  skips the checkpoint's ``model.mtp.layers`` weights (``models/minimax_m3.py``), and
  ``ModelConfig._config_draft_model`` maps no MiniMax-M3 architecture to a NextN draft;
  EAGLE heads and draft models are not checked against SGLang for this family (EAGLE3
  heads are);
* the NVFP4 checkpoints SGLang serves as ``minimax_m3_nvfp4`` (``_resolve_quant_method``),
  whose packed pool on Blackwell (``mem_cache/minimax_m3_nvfp4_pool.py``) is not read;
* an fp8 KV cache on a GPU kvbudget cannot place (the index dtype follows the platform),
  and AMD GPUs (ROCm's backends and ``SGLANG_OPT_MINIMAX_M3_FP8_INDEX_CACHE`` on gfx95
  are not run by the harness);
* another SGLang release than 0.5.23 (checked against that wheel only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvbudget.dtypes import parse_dtype
from kvbudget.engines.common import GB, refuse_unchecked_sglang
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

CHECKED_VERSION = "0.5.23"
MODEL_TYPES = frozenset({"minimax_m3_text", "minimax_m3_vl"})
# configs/model_config.py is_minimax_sparse
ARCHITECTURES = ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")
PLANNED_SPECS = frozenset({"none", "ngram", "eagle3"})
# GPU presets (data/gpus.csv rows) by compute capability major, the parts whose fp8_e4m3
# KV keeps an fp8 index key: 9 (SGLang utils/common.py is_sm90_supported) and 10
# (is_sm100_supported)
SM90_GPUS = frozenset(
    {
        "NVIDIA H100 SXM 80GB",
        "NVIDIA H100 PCIe 80GB",
        "NVIDIA H100 NVL 94GB",
        "NVIDIA H200 SXM 141GB",
        "NVIDIA H200 NVL",
        "NVIDIA H20 96GB",
        "NVIDIA GH200 96GB HBM3",
        "NVIDIA GH200 144GB HBM3e",
    }
)
SM100_GPUS = frozenset(
    {"NVIDIA B200", "NVIDIA GB200 (per GPU)", "NVIDIA B300", "NVIDIA GB300 (per GPU)"}
)


def is_minimax_m3(d: Deployment) -> bool:
    """Whether the target is MiniMax-M3 (its text or vision-language checkpoint)."""
    return d.target.model_type in MODEL_TYPES


def _sparse_config(d: Deployment) -> Mapping[str, Any] | None:
    """The text config's ``sparse_attention_config`` as the checkpoint writes it."""
    raw = d.target.raw_config
    text = raw.get("text_config", raw)
    value = text.get("sparse_attention_config") if isinstance(text, Mapping) else None
    return value if isinstance(value, Mapping) else None


def _flagged(values: object) -> frozenset[int]:
    """Layer indices whose entry is non-zero (SGLang's ``enumerate(...) if f != 0``)."""
    if not isinstance(values, list | tuple):
        return frozenset()
    return frozenset(i for i, v in enumerate(values) if v != 0)


def value_bearing_index_layers(d: Deployment) -> frozenset[int]:
    """Sparse layers whose index pool keeps index V beside index K (not listed in
    ``sparse_disable_index_value``)."""
    cfg = _sparse_config(d) or {}
    sparse = _flagged(cfg.get("sparse_attention_freq"))
    return sparse - _flagged(cfg.get("sparse_disable_index_value"))


def _gpu_family(d: Deployment) -> str | None:
    """The GPU's kind: ``sm90``, ``sm100``, ``amd`` or ``other`` for a preset; None for
    ``--gpu-memory`` (no part named) or no GPU."""
    name = d.gpu_rule.gpu_name
    if name is None or name == "custom":
        return None
    if name in SM90_GPUS:
        return "sm90"
    if name in SM100_GPUS:
        return "sm100"
    return "amd" if name.startswith("AMD") else "other"


def index_dtype_bytes(d: Deployment) -> int:
    """Bytes of one index value (``get_minimax_sparse_index_dtype``): the KV dtype's with
    an fp8 KV cache on SM90 or SM100 (fp8 attention GEMMs), else the model dtype's."""
    kv = d.kv_dtype_value
    if kv.bits == 8 and _gpu_family(d) in ("sm90", "sm100"):
        return 1
    return parse_dtype(d.target.dtype or "bf16").bits // 8


def layer_bytes(layer: Layer, d: Deployment, tp: int) -> int:
    """One MiniMax-M3 layer's bytes per token in ``MiniMaxSparseKVPool`` on one rank: K
    and V of its KV heads, and on a sparse layer the index key (and index value unless
    ``sparse_disable_index_value``) of one replicated head."""
    if not isinstance(layer, AttentionLayer):
        return layer.bytes_per_token(d.kv_dtype_value, tp)
    kv = layer.kv_bytes_per_token(d.kv_dtype_value, tp)
    return kv + index_bytes(layer, d)


def index_bytes(layer: Layer, d: Deployment) -> int:
    """The index pool's bytes per token for ``layer`` (0 on a plain-attention layer)."""
    if not isinstance(layer, AttentionLayer) or not layer.index_head_dim:
        return 0
    vectors = 2 if layer.index in value_bearing_index_layers(d) else 1
    return vectors * layer.index_head_dim * index_dtype_bytes(d)


def _quant_method(d: Deployment) -> str | None:
    """What SGLang serves the checkpoint as (``_resolve_quant_method``)."""
    raw = d.target.raw_config
    text = raw.get("text_config", raw)
    quant = raw.get("quantization_config") or (
        text.get("quantization_config") if isinstance(text, Mapping) else None
    )
    if not isinstance(quant, Mapping):
        return None
    method = quant.get("quant_method")
    if (
        method == "mxfp8"
        and str(quant.get("moe_quant_algo", "")).upper() == "NVFP4"
        and quant.get("moe_quant_format") == "nvfp4-pack-quantized"
    ):
        return "minimax_m3_nvfp4"
    return str(method) if method is not None else None


def _refusal(d: Deployment, host_bytes: int) -> str | None:
    """Why this model of SGLang 0.5.23 does not plan ``d`` (the module docstring)."""
    archs = d.target.raw_config.get("architectures") or [None]
    if archs[0] not in ARCHITECTURES:
        return (
            f"its architectures[0] is {archs[0]!r}, and SGLang 0.5.23 builds the "
            f"MiniMaxSparseKVPool only for {' or '.join(ARCHITECTURES)} "
            "(configs/model_config.py is_minimax_sparse)"
        )
    if _sparse_config(d) is None:
        return (
            "its text config gives no sparse_attention_config, which SGLang 0.5.23 reads "
            "as written (no class defaults: get_minimax_sparse_attention_config raises); "
            "give it"
        )
    if _quant_method(d) == "minimax_m3_nvfp4":
        return (
            "SGLang 0.5.23 serves this checkpoint as minimax_m3_nvfp4, whose packed KV "
            "pool (mem_cache/minimax_m3_nvfp4_pool.py) kvbudget does not model"
        )
    family = _gpu_family(d)
    if family == "amd":
        return "SGLang's ROCm path for MiniMax-M3 (its index dtype on gfx95) is not modelled"
    if d.kv_dtype_value.bits == 8 and family is None:
        return (
            "with an fp8 KV cache SGLang keeps the index keys in fp8 on SM90 / SM100 and "
            "in the model dtype elsewhere (get_minimax_sparse_index_dtype); name the GPU "
            "with --gpu"
        )
    if host_bytes >= GB:
        if d.parallel.pp > 1:
            return "SGLang's MiniMax-M3 HiCache raises at PP > 1; drop --pp or --host-budget"
        if value_bearing_index_layers(d):
            return (
                "SGLang's MiniMax-M3 HiCache takes index-K-only sparse layers "
                "(build_minimax_sparse_hicache_stack raises for index_kv_pool); this "
                "config's sparse_disable_index_value leaves index V on some; drop "
                "--host-budget"
            )
    return None


def check(d: Deployment, version: str, host_bytes: int) -> None:
    """InvalidArgumentError for a MiniMax-M3 deployment this model of SGLang does not plan
    (the module docstring says why each is refused)."""
    if not is_minimax_m3(d):
        return
    name = d.target.name
    refuse_unchecked_sglang(version, CHECKED_VERSION, name, "MiniMax-M3")
    if d.spec.name not in PLANNED_SPECS:
        why = (
            "SGLang 0.5.23 has no MiniMax-M3 MTP model (MiniMaxM3SparseForCausalLM skips "
            "the model.mtp.layers weights: models/minimax_m3.py)"
            if d.spec.name == "mtp"
            else "its draft pools for MiniMax-M3 are not checked against SGLang 0.5.23"
        )
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name} with --spec {d.spec.name}: {why}; "
            "plan --spec none or ngram, or --engine vllm"
        )
    reason = _refusal(d, host_bytes)
    if reason is not None:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name}: {reason}; or plan it with --engine vllm"
        )


__all__ = [
    "CHECKED_VERSION",
    "check",
    "index_bytes",
    "index_dtype_bytes",
    "is_minimax_m3",
    "layer_bytes",
    "value_bearing_index_layers",
]
