"""SGLang 0.5.23's own default ``--mem-fraction-static``, for kvbudget's emitted flags.

When a deployment names neither ``--kv-budget`` nor a memory knob, the SGLang model
derives the KV budget under ``mem_fraction_static`` semantics (:mod:`kvbudget.budget`)
at the fraction SGLang itself picks when the flag is absent. Facts from the SGLang 0.5.23
PyPI wheel (``python/sglang/srt/``; it records no commit), checked by the fidelity
harness (``benchmarks/fidelity/sglang``, ``--cases memdefault``):

* **Device memory** (``utils/common.py`` ``get_device_memory_capacity`` ->
  ``get_nvgpu_memory_capacity``): ``nvidia-smi --query-gpu=memory.total`` in MiB, the
  driver's total (gpus.csv ``driver_total_mib``), not the CUDA-visible total kvbudget
  plans with; for ``--gpu-memory`` (no table row) the given bytes in MiB stand for it.
* **Capacity defaults** (``arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``,
  by that figure): ``chunked_prefill_size`` 2,048 / 4,096 / 4,096 / 8,192 / 8,192 /
  16,384 below 20, 35, 60, 90, 160 GiB and above, and the decode CUDA-graph ``max_bs``
  8 / 48 (160 at TP >= 4) / 32 (160) / 256 (512) / 256 (512) / 512, lowered to
  ``--max-running-requests``. kvbudget always emits ``--chunked-prefill-size``
  (``max_num_batched_tokens``) and ``--max-running-requests`` (``max_batch_size``), so
  the chunk default never applies; Qwen3-VL's decode-graph expansion
  (``model_overrides/qwen3_vl.py``) does not apply to the models kvbudget plans.
* **Prefill CUDA graph** (``model_executor/cuda_graph_config.py``
  ``default_prefill_backend``: breakable on CUDA; ``arg_groups/cuda_graph_hook.py``
  ``apply_cuda_graph_compatibility``): disabled for PP > 1, DeepSeek-V4, KDA hybrids and
  multimodal models off ``multimodal_breakable_cuda_graph_supported_model_archs``;
  else its batch sizes are ``generate_prefill_cuda_graph_batch_sizes`` up to the chunk
  (8,192 at most for MLA), 4,096 for a ``llama-2`` model path.
* **Reserve** (MiB, ``handle_gpu_memory_settings`` and ``reserve_for_graph_mb``):
  ``512 + max(chunk, 2048) x 1.5 + tp x pp / 8 x 1024 + decode max_bs x 2`` (+ ``max_bs
  x attn_dp x 3``, and ``x 1.5`` more past 300, with DP attention) ``+ 8 x prefill graph
  sizes`` (1,536 for MLA), at least 10,240 on a GPU above 60 GiB; no DeepEP or XPU
  headroom (kvbudget emits neither). Then ``round((gpu - reserve) / gpu, 3)``.
* **VLM** (``adjust_mem_fraction_for_vlm``): for a multimodal model (``ModelConfig``:
  Gemma-3 and Llama-4 have multimodal off by default) with a ``vision_config``, times
  ``0.95 x clamp(1 - 0.1 x (layers x hidden^2 / (24 x 1024^2) - 1), 0.8, 1.05)``,
  ``num_hidden_layers`` (default 24) and ``hidden_size`` (default 1024) of that config,
  unrounded. Kimi K3 and K2.5 get a vision config from SGLang's own classes even when the
  file has none (``configs/kimi_k3.py``: 27 layers of 1,024 from ``vt_*``;
  ``configs/kimi_k25.py``: 27 of 1,152); for other models a class default that the file
  leaves out is not seen. Post-capture KV sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, off by
  default) is not taken.

The computation is Python float arithmetic in SGLang's order, so the text is the value
SGLang holds. Not modelled (the figure assumes the emitted flags): the prefill graph's
cap at ``--max-total-tokens`` (it binds only on a pool of fewer tokens than the chunk).
The decode graph is capped at the deployment's ``max_batch_size``: the fraction is
SGLang's pick for the deployment launched without kvbudget's memory flags, before the
plan lowers ``--max-running-requests`` to a Mamba hybrid's state pool (which kvbudget's
emitted ``--mem-fraction-static`` then overrides).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.budget import MemoryDefault
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import MLALayer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

MIB = 1 << 20
# configs/model_config.py ModelConfig.__init__: multimodal off unless --enable-multimodal
MULTIMODAL_OFF_ARCHS = frozenset(
    {
        "Gemma3ForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "InklingForConditionalGeneration",
    }
)
# configs/model_config.py multimodal_breakable_cuda_graph_supported_model_archs
BREAKABLE_MULTIMODAL_ARCHS = frozenset(
    {
        "MiniMaxM3SparseForConditionalGeneration",
        "Cohere2VisionForConditionalGeneration",
        "Glm5NextForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "PaddleOCRVLForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "MuseGlimmerForConditionalGeneration",
        "MuseSparkForConditionalGeneration",
        "KimiK3ForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "MiniMaxM3SparseForCausalLM",
    }
)


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """What ``handle_gpu_memory_settings`` reads and derives for one deployment."""

    gpu_mib: float
    chunk_tokens: int
    decode_max_bs: int
    prefill_graph_sizes: int  # 0: prefill CUDA graph disabled
    mla: bool
    attn_dp: int
    multimodal: bool


def _archs(raw: Mapping[str, Any]) -> list[str]:
    archs = raw.get("architectures") or []
    return [str(a) for a in archs]


def is_multimodal(raw: Mapping[str, Any]) -> bool:
    """``ModelConfig.is_multimodal`` with the default ``--enable-multimodal``: a wrapper
    with a ``text_config`` (``has_multimodal_subconfig``) or a ``vision_config``,
    unless its first architecture has multimodal off by default or the config says
    ``language_model_only`` (``is_lm_only``)."""
    archs = _archs(raw)
    if (archs and archs[0] in MULTIMODAL_OFF_ARCHS) or raw.get("language_model_only"):
        return False
    return "text_config" in raw or "vision_config" in raw


def _kda(raw: Mapping[str, Any]) -> bool:
    """``configs/model_config.py`` ``uses_kda_attention`` on the config and its text part."""
    for cfg in (raw, raw.get("text_config") or {}):
        linear = cfg.get("linear_attn_config")
        if isinstance(linear, dict) and linear.get("kda_layers"):
            return True
        if (
            "linear_attention" in (cfg.get("layer_types") or [])
            and cfg.get("linear_num_heads") is not None
            and cfg.get("linear_head_dim") is not None
        ):
            return True
    return False


def prefill_capture_sizes(max_bs: int) -> int:
    """How many sizes ``generate_prefill_cuda_graph_batch_sizes(max_bs)`` captures."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return sum(1 for s in sizes if s <= max_bs)


def _capacity_max_bs(gpu_mib: float, tp: int) -> int:
    """The decode CUDA-graph ``max_bs`` default by GPU memory (``handle_gpu_memory_settings``)."""
    if gpu_mib < 20 * 1024:
        return 8
    if gpu_mib < 35 * 1024:
        return 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def settings_of(d: Deployment, gpu_mib: float) -> MemorySettings:
    """The inputs of SGLang's heuristic for kvbudget's emitted flags on ``d``."""
    from kvbudget.engines import sglang_dsv4

    raw = d.target.raw_config
    layout = d.parallel
    mla = any(isinstance(x, MLALayer) for x in d.target.layers)
    multimodal = is_multimodal(raw)
    chunk = d.max_num_batched_tokens
    breakable = not (
        layout.pp > 1
        or sglang_dsv4.is_dsv4(d)
        or (_kda(raw) and "Glm5NextForConditionalGeneration" not in _archs(raw))
        or (multimodal and not BREAKABLE_MULTIMODAL_ARCHS.intersection(_archs(raw)))
    )
    prefill_max = min(8192, chunk) if mla else chunk
    if "llama-2" in d.target_source.lower():
        prefill_max = min(prefill_max, 4096)
    return MemorySettings(
        gpu_mib=gpu_mib,
        chunk_tokens=chunk,
        decode_max_bs=min(_capacity_max_bs(gpu_mib, layout.tp), d.max_batch_size),
        prefill_graph_sizes=prefill_capture_sizes(prefill_max) if breakable else 0,
        mla=mla,
        attn_dp=layout.dp if layout.dp_attention else 1,
        multimodal=multimodal,
    )


def reserved_mib(s: MemorySettings, tp: int, pp: int) -> float:
    """``reserved_mem`` of ``handle_gpu_memory_settings`` (MiB), in SGLang's float order."""
    reserved: float = 512  # an int, as in SGLang, until the first float is added
    reserved += max(s.chunk_tokens, 2048) * 1.5
    reserved += tp * pp / 8 * 1024
    graph = 0.0  # reserve_for_graph_mb
    graph += s.decode_max_bs * 2
    if s.attn_dp > 1:
        graph += s.decode_max_bs * s.attn_dp * 3
        if s.decode_max_bs > 300:
            graph += s.decode_max_bs * s.attn_dp * 1.5
    if s.prefill_graph_sizes:
        graph += s.prefill_graph_sizes * 8 if not s.mla else 1.5 * 1024
    reserved += graph
    if s.gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


# SGLang's own vision config classes, which build a vision config (with these keys and
# defaults for the layers and width read) when the file has none: configs/kimi_k3.py
# KimiK3VisionConfig (num_hidden_layers = vt_num_hidden_layers), configs/kimi_k25.py
# KimiK25VisionConfig; other models: the file's vision_config, transformers' names
_VISION_KEYS: dict[str, tuple[tuple[str, int], tuple[str, int], bool]] = {
    "kimi_k3": (("vt_num_hidden_layers", 27), ("vt_hidden_size", 1024), True),
    "kimi_k25": (("num_hidden_layers", 27), ("hidden_size", 1152), True),
}
_VISION_DEFAULT = (("num_hidden_layers", 24), ("hidden_size", 1024), False)


def vlm_factor(raw: Mapping[str, Any]) -> float | None:
    """``adjust_mem_fraction_for_vlm``'s factor for the model's vision config (None: it
    has none, the fraction stays)."""
    (layers_key, layers_default), (hidden_key, hidden_default), built = _VISION_KEYS.get(
        str(raw.get("model_type")), _VISION_DEFAULT
    )
    vision = raw.get("vision_config")
    if not isinstance(vision, Mapping):
        if not built:
            return None
        vision = {}
    layers = vision.get(layers_key, layers_default)
    hidden = vision.get(hidden_key, hidden_default)
    ratio = layers * (hidden**2) / (24 * (1024**2))
    dynamic = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return float(0.95 * dynamic)


def default(d: Deployment) -> MemoryDefault:
    """SGLang 0.5.23's ``mem_fraction_static`` for ``d``'s emitted flags (module doc)."""
    rule = d.gpu_rule
    if rule.memory_bytes is None or not rule.derived:
        # --kv-budget: no fraction derives the budget (SGLang's own fallback without a
        # device capacity is 0.95)
        return MemoryDefault(
            rule="mem_fraction_static",
            fraction_text="0.95",
            reason="SGLang's default when it reads no device memory",
        )
    smi = rule.driver_total_mib
    gpu_mib = float(smi) if smi is not None else rule.memory_bytes / MIB
    s = settings_of(d, gpu_mib)
    tp, pp = d.parallel.tp, d.parallel.pp
    reserved = reserved_mib(s, tp, pp)
    base = fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    if fraction <= 0:
        raise InvalidArgumentError(
            f"SGLang's own --mem-fraction-static on this GPU ({gpu_mib:,.0f} MiB) would be "
            f"{fraction}: its reserve for activations and CUDA graphs ({reserved:,.0f} MiB, "
            "memory_hook.py handle_gpu_memory_settings) leaves nothing for weights and KV; "
            "give --mem-fraction-static or --kv-budget, or lower --max-num-batched-tokens"
        )
    factor = vlm_factor(d.target.raw_config) if s.multimodal else None
    if factor is not None:
        fraction = fraction * factor
    return MemoryDefault(
        rule="mem_fraction_static",
        fraction_text=repr(fraction),
        reason=_reason(d, s, reserved, base, factor),
    )


def _reason(
    d: Deployment, s: MemorySettings, reserved: float, base: float, factor: float | None
) -> str:
    """How SGLang arrived at its fraction, in words."""
    layout = d.parallel
    gpu = d.gpu_rule.gpu_name if d.gpu_rule.driver_total_mib is not None else "--gpu-memory"
    graph = f"decode graph max_bs {s.decode_max_bs} x 2"
    if s.attn_dp > 1:
        graph += f" (+ x {s.attn_dp} x 3 for DP attention)"
    if s.prefill_graph_sizes:
        graph += (
            " + 1,536 for MLA's prefill graph"
            if s.mla
            else (f" + {s.prefill_graph_sizes} prefill graph sizes x 8")
        )
    floor = ", at least 10,240 MiB above 60 GiB" if s.gpu_mib > 60 * 1024 else ""
    text = (
        f"SGLang's default for {gpu} at tp {layout.tp}, pp {layout.pp}: round(1 - "
        f"{reserved:,.0f} MiB reserved / {s.gpu_mib:,.0f} MiB (nvidia-smi's total), 3) = "
        f"{base!r}; reserved = 512 + chunked prefill {s.chunk_tokens:,} x 1.5 + tp x pp / 8 "
        f"x 1,024 + {graph}{floor}"
    )
    if factor is not None:
        text += f"; x {factor:.6f} for the vision encoder (adjust_mem_fraction_for_vlm)"
    return text


__all__ = [
    "MemorySettings",
    "default",
    "is_multimodal",
    "prefill_capture_sizes",
    "reserved_mib",
    "settings_of",
    "vlm_factor",
]
