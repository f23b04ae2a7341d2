"""Families kvbudget knows of but does not model yet: their ``model_type`` is an error.

A config of one of these types (or a wrapper whose ``text_config`` is one) is refused with
one message naming the type, what sets it apart and the supported types, rather than read
as a generic decoder. Model types as vLLM 0.33.0 registers them
(``vllm/transformers_utils/config.py`` ``_CONFIG_REGISTRY``, ``config/speculative.py``) and
transformers 5.20.2 names them (``models/deepseek_v4``).
"""

from __future__ import annotations

from types import MappingProxyType

UNMODELLED: MappingProxyType[str, str] = MappingProxyType(
    {
        # DeepSeek-V4.1 (deepseek_v41) is modelled (architectures/deepseek_v41.py)
        # Kimi K3 (kimi_k3) is modelled, its MTP layers as --spec mtp of it; vLLM makes
        # the kimi_k3_mtp draft config from the target's (config/speculative.py)
        "kimi_k3_mtp": "Kimi K3's MTP layers on their own; plan the kimi_k3 target with --spec mtp",
        # MiniMax-M3 (minimax_m3_text, minimax_m3_vl) is modelled, its MTP modules too
        # (the target's mtp_layers: --spec mtp); a standalone MTP checkpoint (a flat
        # MiniMaxM3MTPConfig, vLLM's speculative model) as --draft is not
        "minimax_m3_mtp": "a standalone MiniMax-M3 MTP checkpoint; plan the minimax_m3_vl "
        "target with --spec mtp",
        "gemma4_unified_assistant": "the unified Gemma-4's MTP assistant",
    }
)

# fields that mark one of these families (or another non-standard layer) in a config of
# an unknown type: the generic decoder reader refuses them
MARKER_FIELDS: tuple[tuple[str, str], ...] = (
    ("linear_attn_config", "linear-attention layers (Kimi Delta Attention)"),
    ("sparse_attention_config", "sparse attention with an index cache"),
    ("compress_rates", "compressed attention (DeepSeek-V4)"),
    ("hybrid_layer_pattern", "a hybrid attention layer pattern"),
    ("index_head_dim", "a sparse-attention indexer cache"),
    ("num_kv_shared_layers", "layers sharing another layer's KV cache"),
    ("per_layer_config", "per-layer attention geometry"),
)

__all__ = ["MARKER_FIELDS", "UNMODELLED"]
