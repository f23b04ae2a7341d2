"""Configs of the 2026 families that have no verbatim Hub config in this project.

One definition read by both the tests (``tests/test_gemma4.py``, ``tests/test_dflash.py``)
and the vLLM fidelity harness (``benchmarks/fidelity/vllm_fidelity.py``, ids
``family/...``), so the figures the tests assert by hand are those the harness compares
with vLLM's own code. Plain dicts only: no engine code.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

# Families without a verbatim Hub config in this project (no preset), each named
# ``family/<what it exercises>``; the harness writes each to a file both sides read.
# Field values are the config class's defaults (transformers 5.20.2
# ``Gemma4TextConfig``: 30 layers, hidden 2304, 8 heads, 4 KV heads, head 256, global head
# 512, window 512, PLE 256) or, where a variant exercises a field, values chosen for it
# (not a released model's); every field either side reads is written out.
_GEMMA4_TEXT: dict[str, Any] = {
    "model_type": "gemma4_text",
    "vocab_size": 262144,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "global_head_dim": 512,
    "max_position_embeddings": 131072,
    "sliding_window": 512,
    "hidden_size_per_layer_input": 256,
    "vocab_size_per_layer_input": 262144,
    "torch_dtype": "bfloat16",
}
FAMILY_CONFIGS: dict[str, dict[str, Any]] = {
    # the multimodal checkpoint, with Gemma4TextConfig's defaults
    "family/gemma4-defaults": {
        "model_type": "gemma4",
        "architectures": ["Gemma4ForConditionalGeneration"],
        "torch_dtype": "bfloat16",
        "text_config": _GEMMA4_TEXT,
    },
    # KV sharing (the last 20 of 35 layers read earlier layers' caches), one KV head,
    # k_eq_v global layers with their own KV head count, a double-wide MLP
    "family/gemma4-kv-shared": {
        **_GEMMA4_TEXT,
        "architectures": ["Gemma4ForCausalLM"],
        "num_hidden_layers": 35,
        "hidden_size": 1536,
        "num_key_value_heads": 1,
        "num_kv_shared_layers": 20,
        "attention_k_eq_v": True,
        "num_global_key_value_heads": 1,
        "use_double_wide_mlp": True,
    },
    # MoE beside the dense MLP, 8 KV heads on sliding layers, 2 on global (k_eq_v), a
    # 1024-token window, no PLE
    "family/gemma4-moe": {
        **_GEMMA4_TEXT,
        "architectures": ["Gemma4ForCausalLM"],
        "hidden_size": 2816,
        "intermediate_size": 2112,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "attention_k_eq_v": True,
        "num_global_key_value_heads": 2,
        "sliding_window": 1024,
        "hidden_size_per_layer_input": 0,
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
    },
}
# DFlash block drafts (vLLM method "dflash", qwen3_dflash.py) for the Qwen3-8B preset:
# Qwen3-8B's attention geometry (8 KV heads of 128), five layers, the fused target layers
# named in dflash_config; values chosen to exercise each window rule of
# ``_resolve_layer_attention`` (not a released draft's config)
_DFLASH_QWEN3_8B: dict[str, Any] = {
    "model_type": "qwen3",
    "architectures": ["DFlashDraftModel"],
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
    "dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 151669},
}
FAMILY_CONFIGS.update(
    {
        # every layer full attention (no layer_types, no use_swa)
        "family/dflash-full": _DFLASH_QWEN3_8B,
        # use_swa: every layer slides over swa_window_size
        "family/dflash-swa": {
            **_DFLASH_QWEN3_8B,
            "dflash_config": {**_DFLASH_QWEN3_8B["dflash_config"], "use_swa": True,
                              "swa_window_size": 2048},
        },
        # mixed layer_types over the top-level sliding_window (the V2 runner's case;
        # Qwen3Config keeps the window only with use_sliding_window)
        "family/dflash-mixed": {
            **_DFLASH_QWEN3_8B,
            "use_sliding_window": True,
            "sliding_window": 4096,
            "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
        },
    }
)  # fmt: skip
# An EAGLE3 head for the Gemma-4 defaults (a one-layer Llama head at the target's hidden
# size, its own 4 KV heads of 256; values chosen, not a released head's)
FAMILY_CONFIGS["family/gemma4-eagle3-head"] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 1,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 262144,
    "draft_vocab_size": 32000,
    "target_hidden_size": 2304,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
# Gemma-4's MTP assistant (gemma4_assistant; --speculative-config method "mtp" with it as
# the model): four Q-only layers reading the target's caches (values chosen; the fields
# Gemma4AssistantConfig requires: no PLE, every layer KV-shared)
FAMILY_CONFIGS["family/gemma4-assistant"] = {
    "model_type": "gemma4_assistant",
    "architectures": ["Gemma4AssistantForCausalLM"],
    "backbone_hidden_size": 2304,
    "torch_dtype": "bfloat16",
    "text_config": {
        **_GEMMA4_TEXT,
        "num_hidden_layers": 4,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "num_kv_shared_layers": 4,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    },
}
# DeepSeek-V4 (vLLM DeepseekV4ForCausalLM, vllm/models/deepseek_v4): no verbatim Hub
# config is reachable here, so these are transformers 5.20.2's ``DeepseekV4Config``
# defaults (models/deepseek_v4/configuration_deepseek_v4.py; its docstring names
# deepseek-ai/DeepSeek-V4-Flash-Base): 43 layers, hidden 4096, 64 heads of 512 (64 of them
# rotary), q_lora_rank 1024, 8 output groups of rank 1024, 256 routed experts (+1 shared,
# 2048 wide), window 128, indexer 64 heads of 128, one MTP layer. ``layer_types`` is
# written out as ``__post_init__`` builds it (two heavily compressed layers, then
# compressed-sparse on odd, heavily compressed on even offsets), ``compress_rates`` its
# default {CSA: 4, HCA: 128}; not a released checkpoint's config.
_DSV4_LAYERS = 43
_DEEPSEEK_V4: dict[str, Any] = {
    "model_type": "deepseek_v4",
    "architectures": ["DeepseekV4ForCausalLM"],
    "vocab_size": 129280,
    "hidden_size": 4096,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": _DSV4_LAYERS,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 1024,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "hc_mult": 4,
    "sliding_window": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 512,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 1048576,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    "layer_types": ["heavily_compressed_attention"] * 2
    + [
        "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
        for i in range(_DSV4_LAYERS - 2)
    ],
    "mlp_layer_types": ["hash_moe"] * 3 + ["moe"] * (_DSV4_LAYERS - 3),
}
FAMILY_CONFIGS["family/deepseek-v4-defaults"] = _DEEPSEEK_V4
# The same geometry with sliding-only layers (compress rate 0: the window cache alone)
# first, eight layers and three MTP layers (values chosen to exercise those rules)
FAMILY_CONFIGS["family/deepseek-v4-sliding"] = {
    **_DEEPSEEK_V4,
    "num_hidden_layers": 8,
    "layer_types": ["sliding_attention"] * 2
    + ["compressed_sparse_attention", "heavily_compressed_attention"] * 3,
    "mlp_layer_types": ["hash_moe"] * 3 + ["moe"] * 5,
    "num_nextn_predict_layers": 3,
}
# DeepSeek-V4.1 (vLLM DeepseekV41ForCausalLM, vllm/models/deepseek_v41): no verbatim Hub
# config is reachable here, and vLLM 0.33.0's ``DeepseekV41Config``
# (transformers_utils/configs/deepseek_v41.py) has no geometry defaults (it flattens
# ``text_config`` onto itself), so the text model is DeepSeek-V4's transformers 5.20.2
# defaults above (no hash layers: V4.1's MoE passes ``num_hash_layers=0``, nvidia/model.py
# ``DeepseekV4MoE``) plus the V4.1 fields vLLM reads (models/deepseek_v41/attention.py
# ``DeepseekV4Attention.__init__``), with values chosen to exercise them (not a released
# checkpoint's): ``compress_ratios`` per layer (two window-only layers, 20 of ratio 2, 21 of
# ratio 1), ``kv_source_layer_ids`` (a compressed cache and compressor every fourth layer
# from layer 2, shared by the next three), ``index_source_layer_ids`` (layers 4, 24 and 28
# reuse their KV source's indexer keys) and the candidate filter's fields.
_DSV41_RATIOS = [0, 0] + [2] * 20 + [1] * (_DSV4_LAYERS - 22)
_DEEPSEEK_V41_TEXT: dict[str, Any] = {
    **{
        k: v
        for k, v in _DEEPSEEK_V4.items()
        if k
        not in ("model_type", "architectures", "layer_types", "compress_rates", "mlp_layer_types")
    },
    "compress_ratios": _DSV41_RATIOS,
    "kv_source_layer_ids": list(range(2, _DSV4_LAYERS, 4)),
    "index_source_layer_ids": [2, 4, 10, 18, 22, 24, 26, 28],
    "candidate_source_layer_id": 22,
    "candidate_topk_blocks": 64,
    "candidate_block_size": 64,
}
_DEEPSEEK_V41: dict[str, Any] = {
    "model_type": "deepseek_v41",
    "architectures": ["DeepseekV41ForCausalLM"],
    "torch_dtype": "bfloat16",
    "text_config": _DEEPSEEK_V41_TEXT,
}
FAMILY_CONFIGS["family/deepseek-v41-defaults"] = _DEEPSEEK_V41
# Eight layers, each compressed one its own KV source (values chosen): four compressor
# rings outgrow the block the other caches set, so vLLM splits them over two groups
FAMILY_CONFIGS["family/deepseek-v41-rings"] = {
    **_DEEPSEEK_V41,
    "text_config": {
        **_DEEPSEEK_V41_TEXT,
        "num_hidden_layers": 8,
        "compress_ratios": [0, 2, 2, 2, 2, 1, 1, 1],
        "kv_source_layer_ids": [1, 2, 3, 4, 5],
        "index_source_layer_ids": [1],
        "candidate_source_layer_id": -1,
    },
}
# The defaults with DSpark stages (vLLM DSparkV41DraftModel, models/deepseek_v41/nvidia/
# dspark.py ``DSparkDeepseekV4Model``: the fields it reads, values chosen): three stages
# (num_nextn_predict_layers, as the V4.1 checkpoints' mtp.{0,1,2}), three fused target
# layers, a Markov rank of 256 and 64 routed experts a stage; compress_ratios runs on over
# the stages ([0, 2, 1]: a window-only stage and two that read layer 42's compressed cache)
FAMILY_CONFIGS["family/deepseek-v41-dspark"] = {
    **_DEEPSEEK_V41,
    "text_config": {
        **_DEEPSEEK_V41_TEXT,
        "compress_ratios": [*_DSV41_RATIOS, 0, 2, 1],
        "num_nextn_predict_layers": 3,
        "dspark_target_layer_ids": [1, 21, 41],
        "dspark_markov_rank": 256,
        "dspark_n_routed_experts": 64,
    },
}
# Kimi-Linear (vLLM KimiLinearForCausalLM, vllm/models/kimi_k3): no verbatim Hub config
# is reachable here, and vLLM's own ``KimiLinearConfig`` defaults
# (vllm/transformers_utils/configs/kimi_linear.py) describe no KDA, MLA or MoE at all, so
# the geometry is transformers 5.20.2's ``KimiLinearConfig`` defaults
# (models/kimi_linear/configuration_kimi_linear.py; its docstring names
# moonshotai/Kimi-Linear-48B-A3B-Instruct), written under the field names vLLM's config
# class reads: 27 layers, hidden 2304, 32 heads, MLA latent 512 + 64 rope (nope 128, v 128,
# no q LoRA), 256 experts of 1024 (top 8, one shared, the first layer dense 9216),
# KDA 32 heads of 128 with a 4-tap conv. The layer pattern is transformers' default
# (``full_attention`` where ``i and i % 4 == 0``, 0-indexed) in vLLM's 1-indexed
# ``linear_attn_config`` lists; ``mla_use_nope`` true (vLLM's KimiDecoderLayer asserts it).
# Not a released checkpoint's config.
_KIMI_LINEAR_LAYERS = 27
_KIMI_FULL = [i + 1 for i in range(_KIMI_LINEAR_LAYERS) if i and i % 4 == 0]
_KIMI_LINEAR: dict[str, Any] = {
    "model_type": "kimi_linear",
    "architectures": ["KimiLinearForCausalLM"],
    "vocab_size": 163840,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "moe_intermediate_size": 1024,
    "num_hidden_layers": _KIMI_LINEAR_LAYERS,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "mla_use_nope": True,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 2.446,
    "moe_renormalize": True,
    "moe_router_activation_func": "sigmoid",
    "hidden_act": "silu",
    "max_position_embeddings": 1048576,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "linear_attn_config": {
        "kda_layers": [i for i in range(1, _KIMI_LINEAR_LAYERS + 1) if i not in _KIMI_FULL],
        "full_attn_layers": _KIMI_FULL,
        "num_heads": 32,
        "head_dim": 128,
        "short_conv_kernel_size": 4,
    },
}
FAMILY_CONFIGS["family/kimi-linear-defaults"] = _KIMI_LINEAR
# Kimi K3 (vLLM KimiK3ForConditionalGeneration, vllm/models/kimi_k3/nvidia): no verbatim
# Hub config is reachable here, and neither vLLM's KimiK3Config nor its KimiLinearConfig
# (vllm/transformers_utils/configs/kimi_k3.py, kimi_linear.py) defaults to a KDA, MLA or
# MoE layer, nor transformers 5.20.2 has a Kimi K3 config, so the text model is
# Kimi-Linear's geometry above (transformers' KimiLinearConfig defaults) with the
# switches vLLM's Kimi K3 code reads turned on at values chosen here to exercise them,
# not a released checkpoint's: the full-rank KDA gate with a gate_lower_bound of -5.0
# (kda.py _KDA_GATE_LOGBOUND_MIN, the bound's floor), a q LoRA of 1536 and the MLA output
# gate, attention residuals every 4 layers, a latent MoE of 1024 with its norm, one MTP
# layer. The wrapper's vision_config is left to KimiK3VisionConfig's defaults.
_KIMI_K3_TEXT: dict[str, Any] = {
    **{k: v for k, v in _KIMI_LINEAR.items() if k not in ("architectures", "linear_attn_config")},
    "q_lora_rank": 1536,
    "mla_use_output_gate": True,
    "attn_res_block_size": 4,
    "routed_expert_hidden_size": 1024,
    "latent_moe_use_norm": True,
    "num_nextn_predict_layers": 1,
    "linear_attn_config": {
        **_KIMI_LINEAR["linear_attn_config"],
        "use_full_rank_gate": True,
        "gate_lower_bound": -5.0,
    },
}
_KIMI_K3: dict[str, Any] = {
    "model_type": "kimi_k3",
    "architectures": ["KimiK3ForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": _KIMI_K3_TEXT,
}
FAMILY_CONFIGS["family/kimi-k3"] = _KIMI_K3
# the same without gate_lower_bound: vLLM's KDA prefill is Triton then (kda.py
# resolve_kda_prefill_backend: FlashKDA needs a bounded gate), no prefill checkpoint
_KIMI_K3_UNBOUNDED = copy.deepcopy(_KIMI_K3)
del _KIMI_K3_UNBOUNDED["text_config"]["linear_attn_config"]["gate_lower_bound"]
FAMILY_CONFIGS["family/kimi-k3-unbounded-gate"] = _KIMI_K3_UNBOUNDED
# MiniMax-M3 (vLLM MiniMaxM3SparseForConditionalGeneration, vllm/models/minimax_m3): no
# verbatim Hub config is reachable here, so the text model is vLLM 0.33.0's own
# ``MiniMaxM3TextConfig`` defaults (vllm/transformers_utils/configs/minimax_m3.py, whose
# docstring says they mirror the MiniMax-M3-preview checkpoint's ``text_config``): 60
# layers, hidden 6144, 64 heads, 4 KV heads of 128, the first 3 layers dense (MLP 12288)
# and plain attention, the other 57 MoE (128 experts of 3072, top 4, one shared) and
# sparse (index keys of 128, 4 index heads), in the vision-language wrapper
# (``minimax_m3_vl``, ``MiniMaxM3Config``) the checkpoint ships. No vision_config: the
# tower keeps no KV cache and its weights are not counted. Not a released config.
_MINIMAX_M3_LAYERS = 60
_MINIMAX_M3_TEXT: dict[str, Any] = {
    "model_type": "minimax_m3_text",
    "architectures": ["MiniMaxM3SparseForCausalLM"],
    "vocab_size": 200064,
    "hidden_size": 6144,
    "intermediate_size": 3072,
    "dense_intermediate_size": 12288,
    "shared_intermediate_size": 3072,
    "num_hidden_layers": _MINIMAX_M3_LAYERS,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "max_position_embeddings": 524288,
    "rms_norm_eps": 1e-6,
    "use_gemma_norm": True,
    "attention_output_gate": False,
    "rope_theta": 5000000,
    "rotary_dim": 64,
    "partial_rotary_factor": 0.5,
    "hidden_act": "swigluoai",
    "swiglu_alpha": 1.702,
    "swiglu_beta": 1.0,
    "swiglu_limit": 7.0,
    "use_qk_norm": True,
    "qk_norm_type": "per_head",
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "n_shared_experts": 1,
    "scoring_func": "sigmoid",
    "use_routing_bias": True,
    "routed_scaling_factor": 2.0,
    "num_mtp_modules": 1,
    "moe_layer_freq": [0] * 3 + [1] * 57,
    "sparse_attention_config": {
        "use_sparse_attention": True,
        "sparse_index_dim": 128,
        "sparse_num_index_heads": 4,
        "sparse_topk_blocks": 16,
        "sparse_block_size": 128,
        "sparse_disable_index_value": [0] * 3 + [1] * 57,
        "sparse_score_type": "max",
        "sparse_init_block": 0,
        "sparse_local_block": 1,
        "sparse_attention_freq": [0] * 3 + [1] * 57,
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
FAMILY_CONFIGS["family/minimax-m3-defaults"] = {
    "model_type": "minimax_m3_vl",
    "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": _MINIMAX_M3_TEXT,
}
# The same text model with another layer pattern and 8 KV (and index) heads, 12 layers:
# layer 0 dense, layers 0-1 and 6 plain attention, the others sparse
_MINIMAX_M3_PATTERN = [0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]
FAMILY_CONFIGS["family/minimax-m3-pattern"] = {
    "model_type": "minimax_m3_vl",
    "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": {
        **_MINIMAX_M3_TEXT,
        "num_hidden_layers": 12,
        "num_key_value_heads": 8,
        "moe_layer_freq": [0] + [1] * 11,
        "sparse_attention_config": {
            **_MINIMAX_M3_TEXT["sparse_attention_config"],
            "sparse_num_index_heads": 8,
            "sparse_disable_index_value": _MINIMAX_M3_PATTERN,
            "sparse_attention_freq": _MINIMAX_M3_PATTERN,
        },
    },
}
# The pattern variant with two MTP modules (num_mtp_modules 2, a value chosen: the class
# default is 1): vLLM's MiniMaxM3MTP builds one sparse MoE decoder layer per module
# (models/minimax_m3/nvidia/mtp.py) and SpeculativeConfig takes K a multiple of 2 above 2
FAMILY_CONFIGS["family/minimax-m3-mtp2"] = {
    **FAMILY_CONFIGS["family/minimax-m3-pattern"],
    "text_config": {
        **FAMILY_CONFIGS["family/minimax-m3-pattern"]["text_config"],
        "num_mtp_modules": 2,
    },
}
# An EAGLE3 head for MiniMax-M3 (MiniMaxM3SparseForConditionalGeneration is SupportsEagle3):
# one Llama layer on the target's hidden size, 8 KV heads of 128 (values chosen; no
# released head's config is reachable)
FAMILY_CONFIGS["family/minimax-m3-eagle3-head"] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 6144,
    "intermediate_size": 16384,
    "num_hidden_layers": 1,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 200064,
    "draft_vocab_size": 32000,
    "target_hidden_size": 6144,
    "max_position_embeddings": 524288,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
KIMI_LINEAR = _KIMI_LINEAR
KIMI_K3 = _KIMI_K3
KIMI_K3_UNBOUNDED = _KIMI_K3_UNBOUNDED
MINIMAX_M3_EAGLE3_HEAD = FAMILY_CONFIGS["family/minimax-m3-eagle3-head"]
MINIMAX_M3 = FAMILY_CONFIGS["family/minimax-m3-defaults"]
MINIMAX_M3_PATTERN = FAMILY_CONFIGS["family/minimax-m3-pattern"]
MINIMAX_M3_MTP2 = FAMILY_CONFIGS["family/minimax-m3-mtp2"]
# Step-3.5 (vLLM Step3p5ForCausalLM, model_executor/models/step3p5.py): no verbatim Hub
# config is reachable here. vLLM 0.33.0 reads ``step3p5`` with transformers 5.20.2's
# ``Step3p7TextConfig`` (transformers_utils/config.py), so the defaults config is that
# class's defaults written out (45 layers, hidden 4096, 64 heads, 8 KV groups of 128,
# every layer full attention, layers 3..44 MoE: 288 experts of 1280 plus a 1280-wide
# shared expert, dense layers 11264, vocabulary 128815, no MTP), plus the three flags
# vLLM's FusedMoEBlock reads with no default in that class (``use_moe_router_bias`` and
# ``need_fp32_gate`` asserted true, ``norm_expert_weight``). Not a released config.
_STEP3P5_LAYERS = 45
_STEP3P5: dict[str, Any] = {
    "model_type": "step3p5",
    "architectures": ["Step3p5ForCausalLM"],
    "vocab_size": 128815,
    "hidden_size": 4096,
    "intermediate_size": 11264,
    "num_hidden_layers": _STEP3P5_LAYERS,
    "num_attention_heads": 64,
    "num_attention_groups": 8,
    "head_dim": 128,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-5,
    "moe_num_experts": 288,
    "moe_top_k": 8,
    "moe_intermediate_size": 1280,
    "share_expert_dim": 1280,
    "moe_router_activation": "sigmoid",
    "use_moe_router_bias": True,
    "need_fp32_gate": True,
    "norm_expert_weight": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
FAMILY_CONFIGS["family/step3p5-defaults"] = _STEP3P5
# The hybrid layout the Step 3.5 Flash model card describes (github.com/stepfun-ai/
# Step-3.5-Flash README: three sliding-window layers to each full one, MTP-3 whose layers
# are sliding-window attention with a dense FFN), in the legacy hub fields the class
# reads: ``layer_types`` padded with the three MTP layers' entries (full on layers
# 0, 4, ..., 44: 12 full, 33 sliding), ``moe_layers_enum``, ``attention_other_setting``;
# the window (512), the sliding layers' 96 query heads and the head-wise gate are values
# chosen to exercise those fields, not a released checkpoint's.
_STEP3P5_MTP = 3
FAMILY_CONFIGS["family/step3p5-hybrid"] = {
    **_STEP3P5,
    "max_position_embeddings": 262144,
    "sliding_window": 512,
    "layer_types": [
        "full_attention" if i % 4 == 0 else "sliding_attention" for i in range(_STEP3P5_LAYERS)
    ]
    + ["sliding_attention"] * _STEP3P5_MTP,
    "attention_other_setting": {
        "attention_type": "sliding_attention",
        "num_attention_heads": 96,
        "num_attention_groups": 8,
        "head_dim": 128,
    },
    "use_head_wise_attn_gate": True,
    "moe_layers_enum": ",".join(str(i) for i in range(3, _STEP3P5_LAYERS)),
    "num_nextn_predict_layers": _STEP3P5_MTP,
}
# The same hybrid geometry in the fields transformers' Step3p7TextConfig writes itself
# (``num_key_value_heads``, ``n_routed_experts``, ``num_sliding_attention_heads``,
# unpadded ``layer_types`` / ``mlp_layer_types`` beside ``mtp_layer_types`` /
# ``mtp_mlp_layer_types``) with one MTP layer, as the model card's vLLM command
# overrides it (``--hf-overrides '{"num_nextn_predict_layers": 1}'``)
_STEP3P5_UPSTREAM = {
    k: v for k, v in _STEP3P5.items() if k not in ("num_attention_groups", "moe_num_experts")
}
FAMILY_CONFIGS["family/step3p5-upstream"] = {
    **_STEP3P5_UPSTREAM,
    "num_key_value_heads": 8,
    "n_routed_experts": 288,
    "max_position_embeddings": 262144,
    "sliding_window": 512,
    "layer_types": FAMILY_CONFIGS["family/step3p5-hybrid"]["layer_types"][:_STEP3P5_LAYERS],
    "mtp_layer_types": ["sliding_attention"],
    "mlp_layer_types": ["dense"] * 3 + ["sparse"] * (_STEP3P5_LAYERS - 3),
    "mtp_mlp_layer_types": ["dense"],
    "num_sliding_attention_heads": 96,
    "use_head_wise_attn_gate": True,
    "num_nextn_predict_layers": 1,
}
# The hybrid layout with the sliding layers' query heads equal to the full layers' (64):
# SGLang 0.5.23 starts only on such a config (its pinned transformers 5.19.0 reads
# ``step3p5`` as a heterogeneous ``Step3p7TextConfig`` when the heads differ, and
# ``utils/hf_transformers/config.py`` ``parse`` fails on ``num_attention_heads``)
FAMILY_CONFIGS["family/step3p5-uniform"] = {
    **FAMILY_CONFIGS["family/step3p5-hybrid"],
    "attention_other_setting": {
        **FAMILY_CONFIGS["family/step3p5-hybrid"]["attention_other_setting"],
        "num_attention_heads": 64,
    },
}
STEP3P5 = _STEP3P5
STEP3P5_UNIFORM = FAMILY_CONFIGS["family/step3p5-uniform"]
STEP3P5_UPSTREAM = FAMILY_CONFIGS["family/step3p5-upstream"]
STEP3P5_HYBRID = FAMILY_CONFIGS["family/step3p5-hybrid"]
DEEPSEEK_V4 = _DEEPSEEK_V4
DEEPSEEK_V4_SLIDING = FAMILY_CONFIGS["family/deepseek-v4-sliding"]
DEEPSEEK_V41 = _DEEPSEEK_V41
DEEPSEEK_V41_RINGS = FAMILY_CONFIGS["family/deepseek-v41-rings"]
DEEPSEEK_V41_DSPARK = FAMILY_CONFIGS["family/deepseek-v41-dspark"]
GEMMA4_TEXT = _GEMMA4_TEXT
GEMMA4_KV_SHARED = FAMILY_CONFIGS["family/gemma4-kv-shared"]
GEMMA4_EAGLE3_HEAD = FAMILY_CONFIGS["family/gemma4-eagle3-head"]
GEMMA4_ASSISTANT = FAMILY_CONFIGS["family/gemma4-assistant"]


def gemma4_multimodal(text: dict[str, Any]) -> dict[str, Any]:
    """A Gemma-4 text config inside the multimodal checkpoint's wrapper (``gemma4``,
    ``Gemma4ForConditionalGeneration``, the text fields as its ``text_config``): the
    form SGLang 0.5.23 reads (its HF parser fails on a ``gemma4_text`` config). Not in
    ``FAMILY_CONFIGS``: the vLLM harness plans the text configs themselves."""
    return {
        "model_type": "gemma4",
        "architectures": ["Gemma4ForConditionalGeneration"],
        "torch_dtype": "bfloat16",
        "text_config": {k: v for k, v in text.items() if k != "architectures"},
    }


GEMMA4_MULTIMODAL = {
    "family/gemma4-kv-shared-mm": gemma4_multimodal(FAMILY_CONFIGS["family/gemma4-kv-shared"]),
    "family/gemma4-moe-mm": gemma4_multimodal(FAMILY_CONFIGS["family/gemma4-moe"]),
}
DFLASH_FULL = FAMILY_CONFIGS["family/dflash-full"]
DFLASH_SWA = FAMILY_CONFIGS["family/dflash-swa"]


# A small config for weights by hand (values chosen): hidden 256, 2 heads of 512 (64
# rotary: the V4.1 compressor asserts both), 4 experts; layer 0 window-only, layer 1 a
# ratio-2 KV and index source, layer 2 its consumer and an index source reading layer 1's
# keys, layer 3 a ratio-1 KV and index source
# The small DeepSeek-V4 / V4.1 dimensions the by-hand weight tests share (values chosen):
# vocabulary 1000, hidden 256, 4 layers, 4 experts of 32 (2 a token), low-rank q 32 and o
# 2 x 16, 2 hyper-connection copies, a 4-head indexer of 32
DEEPSEEK_V4_SMALL_DIMS: dict[str, Any] = {
    "vocab_size": 1000,
    "hidden_size": 256,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "q_lora_rank": 32,
    "o_groups": 2,
    "o_lora_rank": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "hc_mult": 2,
    "index_n_heads": 4,
    "index_head_dim": 32,
}

DEEPSEEK_V41_SMALL_TEXT: dict[str, Any] = {
    **DEEPSEEK_V41["text_config"],
    **DEEPSEEK_V4_SMALL_DIMS,
    "num_attention_heads": 2,
    "compress_ratios": [0, 2, 2, 1],
    "kv_source_layer_ids": [1, 3],
    "index_source_layer_ids": [1, 2, 3],
    "candidate_source_layer_id": -1,
}


def folder(path: Path, cfg: dict[str, Any]) -> str:
    """``cfg`` written as ``path/config.json`` (``path`` created); the folder, as a str."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg), "utf-8")
    return str(path)


def vllm_plan(tmp_path: Path, cfg: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """``cfg`` planned with ``--engine vllm`` at the family tests' defaults (no spec, 40
    GiB, 32,768 tokens, batch 256, 8,192 batched tokens; ``kw`` overrides): the engine's
    ``detail`` plus its ``settings``."""
    from kvbudget import plan

    args: dict[str, Any] = {
        "spec": "none",
        "engine": "vllm",
        "kv_budget": "40GiB",
        "host_budget": 0,
        "max_seq_len": 32768,
        "max_batch_size": 256,
        "max_num_batched_tokens": 8192,
        **kw,
    }
    p = plan(folder(tmp_path, cfg), **args)
    return {**dict(p.engine.detail), "settings": dict(p.engine.settings)}
