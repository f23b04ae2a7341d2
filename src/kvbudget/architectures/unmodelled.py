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
        # Kimi-Linear (kimi_linear) is modelled; K3's KDA layer is its own class
        # (models/kimi_k3/nvidia/kda.py KimiK3DeltaAttention: its recurrent state follows
        # mamba_ssm_cache_dtype, backend-dependent prefill checkpoints), with attention
        # residuals, a latent MoE and its own MTP model
        "kimi_k3": "Kimi K3: a Kimi-Linear text model",
        "kimi_k3_mtp": "Kimi K3's MTP layers",
        # MiniMax-M3 (minimax_m3_text, minimax_m3_vl) is modelled; its MTP model is a
        # draft of its own (models/minimax_m3/nvidia/mtp.py MiniMaxM3MTP: its own
        # embedding, head and sparse decoder layer per module)
        "minimax_m3_mtp": "MiniMax-M3's MTP modules",
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
