"""MiniMax-M3: GQA on every layer, block-sparse attention with an index cache on most.

Config, as vLLM 0.33.0 reads it (``vllm/transformers_utils/configs/minimax_m3.py``
``MiniMaxM3TextConfig``; the checkpoint is the vision-language ``minimax_m3_vl``
wrapper, ``MiniMaxM3Config``, whose ``text_config`` is that text model):
``sparse_attention_config.sparse_attention_freq`` marks the sparse layers (an entry per
layer, non-zero: sparse), ``moe_layer_freq`` the MoE layers (zero: a dense MLP of
``dense_intermediate_size``). A field the checkpoint leaves out takes the config class's
default (:data:`TEXT_DEFAULTS`), as vLLM's does.

Cache (vLLM 0.33.0, ``vllm/models/minimax_m3/nvidia/model.py``): every layer keeps K and
V of ``num_key_value_heads`` heads of ``head_dim`` (``MiniMaxM3Attention``: a plain
``Attention``; ``MiniMaxM3SparseAttention.get_kv_cache_spec``: a ``FullAttentionSpec``
of the same geometry); a sparse layer also keeps its lightning indexer's key, one
``sparse_index_dim`` vector a token (``common/indexer.py`` ``MiniMaxM3IndexerCache``:
an ``MLAAttentionSpec`` of one head, bf16 whatever ``--kv-cache-dtype`` says,
replicated on every TP rank): an :class:`~kvbudget.layers.AttentionLayer` with
``index_head_dim``. No window. SGLang 0.5.23 keeps the same layers in its own
``MiniMaxSparseKVPool``, whose index rows and dtype differ
(:mod:`kvbudget.engines.sglang_minimax`).

MTP (vLLM 0.33.0): with ``--speculative-config method mtp`` ``SpeculativeConfig``
promotes a ``minimax_m3_vl`` checkpoint's ``text_config`` to ``minimax_m3_mtp``
(``config/speculative.py`` ``hf_config_override``, ``n_predict = num_mtp_modules``) and
runs ``MiniMaxM3MTP`` (``models/minimax_m3/nvidia/mtp.py``): ``num_mtp_modules``
(default 1) modules, each an ``enorm``/``hnorm``, a replicated ``eh_proj`` (2H -> H), one
``MiniMaxM3DecoderLayer(force_sparse_attn=True, force_moe=True)`` of the text config and
a ``final_layernorm``. Each module's layer is sparse whatever ``sparse_attention_freq``
says, so it keeps the K/V and the index key of a sparse layer: :func:`mtp_layers`, one
per module, indexed after the decoder's. vLLM runs step ``k`` of K on module
``k % num_mtp_modules`` (``MiniMaxM3MultiTokenPredictor.forward``). The modules' own
``embed_tokens`` and ``lm_head`` load the target's tensors and the proposer replaces both
by the target's at PP 1 (``v1/spec_decode/llm_base_proposer.py``
``_maybe_share_embeddings`` / ``_maybe_share_lm_head``: "Detected MTP model"), so the MTP
weights here are the modules' alone, stored under ``[language_model.]model.mtp.layers.{j}``
(``MiniMaxM3MTP._map_checkpoint_name``).

Weights: vLLM's modules under the checkpoint's names (``MiniMaxM3Model.load_weights``:
``q/k/v_proj`` and the indexer's ``index_q_proj`` (sharded like the KV heads) and
``index_k_proj`` (one head, replicated) fused into one ``qkv_proj``; per-head
``q_norm``/``k_norm`` and ``index_q_norm``/``index_k_norm`` of ``head_dim``; dense layers'
``mlp``; MoE layers' ``block_sparse_moe``: an fp32 ``gate`` router and fp32
``e_score_correction_bias`` (``GateLinear(params_dtype=torch.float32)``), a shared
expert of ``intermediate_size x n_shared_experts`` and ``num_local_experts`` experts
(``w1``/``w3`` gate and up, ``w2`` down)). The vision-language checkpoint keeps the text
model under ``language_model.``; its vision tower's weights are not counted.

Refused, naming the field, where vLLM's model would not load the checkpoint as it reads
it: an ``hidden_act`` other than ``swigluoai`` (``MiniMaxM3MLP`` raises), index heads
other than the KV heads and an index head size other than ``head_dim``
(``MinimaxM3QKVParallelLinearWithIndexer`` asserts the first and shards the second as
the first), an output gate or a q/k norm other than per head (vLLM builds neither), a
shared expert whose ``shared_intermediate_size`` is not what vLLM sizes it at.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import final, gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer

SPARSE = "sparse_attention_config"
_DENSE_PREFIX = 3  # the class default: three dense (and non-sparse) layers, then 57
_LAYERS = 60

TEXT_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        # MiniMaxM3TextConfig.__init__ defaults (vLLM 0.33.0), the fields read here
        "vocab_size": 200064,
        "hidden_size": 6144,
        "intermediate_size": 3072,
        "dense_intermediate_size": 12288,
        "shared_intermediate_size": 3072,
        "num_hidden_layers": _LAYERS,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 524288,
        "attention_output_gate": False,
        "hidden_act": "swigluoai",
        "use_qk_norm": True,
        "qk_norm_type": "per_head",
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "n_shared_experts": 1,
        "use_routing_bias": True,
        "num_mtp_modules": 1,
        "tie_word_embeddings": False,
        "moe_layer_freq": (0,) * _DENSE_PREFIX + (1,) * (_LAYERS - _DENSE_PREFIX),
        SPARSE: MappingProxyType(
            {
                "use_sparse_attention": True,
                "sparse_index_dim": 128,
                "sparse_num_index_heads": 4,
                "sparse_topk_blocks": 16,
                "sparse_block_size": 128,
                "sparse_attention_freq": (0,) * _DENSE_PREFIX + (1,) * (_LAYERS - _DENSE_PREFIX),
            }
        ),
    }
)


def _flags(f: ConfigFields, key: str, values: object, num_layers: int) -> list[bool]:
    """One flag per layer from a list of integers (non-zero: set), as vLLM reads
    ``moe_layer_freq`` and ``sparse_attention_freq`` by layer index."""
    if not isinstance(values, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise f.error(key, f"expected a list of integers, one per layer, got {values!r}")
    if len(values) != num_layers:
        raise f.error(key, f"has {len(values)} entries but the model has {num_layers} layers")
    return [v != 0 for v in values]


def _or_default(f: ConfigFields, key: str) -> Any:
    """``key``'s value; null takes the config class's default (``MiniMaxM3TextConfig``
    replaces a None ``moe_layer_freq`` / ``sparse_attention_config`` by it)."""
    value = f.get(key)
    return TEXT_DEFAULTS[key] if value is None else value


def sparse_fields(f: ConfigFields) -> ConfigFields:
    """The ``sparse_attention_config`` fields (``text_config.sparse_attention_config.``)."""
    value = _or_default(f, SPARSE)
    return ConfigFields({SPARSE: value}, f.source, f.prefix, missing=f.missing).nested(SPARSE)


def sparse_flags(f: ConfigFields) -> list[bool]:
    """Which layers run sparse attention (``sparse_attention_freq[i]`` non-zero), checked
    against what vLLM's fused projection takes where any does (:func:`index_dim`)."""
    s = sparse_fields(f)
    flags = _flags(s, "sparse_attention_freq", s.get("sparse_attention_freq"), _num_layers(f))
    if any(flags):
        index_dim(f)
    return flags


def index_dim(f: ConfigFields) -> int:
    """``sparse_index_dim`` of a sparse layer, checked against what vLLM's fused projection
    takes (``MinimaxM3QKVParallelLinearWithIndexer``): index heads = KV heads, index head
    size = ``head_dim``."""
    s = sparse_fields(f)
    kv_heads, head_dim = f.int("num_key_value_heads"), f.head_dim()
    index_heads, dim = s.int("sparse_num_index_heads"), s.int("sparse_index_dim")
    if index_heads != kv_heads:
        raise s.error(
            "sparse_num_index_heads",
            f"{index_heads} index heads, but vLLM's MiniMax-M3 projection takes exactly "
            f"num_key_value_heads ({kv_heads})",
        )
    if dim != head_dim:
        raise s.error(
            "sparse_index_dim",
            f"{dim}, but vLLM's MiniMax-M3 projection shards the index heads at "
            f"head_dim ({head_dim})",
        )
    return dim


def _num_layers(f: ConfigFields) -> int:
    return f.int("num_hidden_layers")


def moe_flags(f: ConfigFields) -> list[bool]:
    """Which layers have an MoE block (``moe_layer_freq[i]`` non-zero)."""
    return _flags(f, "moe_layer_freq", _or_default(f, "moe_layer_freq"), _num_layers(f))


def layers(f: ConfigFields) -> list[Layer]:
    """One GQA layer per decoder layer; the sparse ones keep an index key too."""
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads")
    if heads % kv_heads:
        raise f.error(
            "num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}"
        )
    flags = sparse_flags(f)
    index = index_dim(f) if any(flags) else 0
    return [
        AttentionLayer(
            index=i,
            num_kv_heads=kv_heads,
            head_dim=f.head_dim(),
            index_head_dim=index if sparse else 0,
        )
        for i, sparse in enumerate(flags)
    ]


def num_mtp_modules(f: ConfigFields) -> int:
    """``num_mtp_modules`` (``MiniMaxM3TextConfig`` default 1; 0: no MTP)."""
    return f.int("num_mtp_modules", minimum=0)


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """One sparse layer per MTP module, indexed from ``start`` (the decoder's layer count):
    ``MiniMaxM3DecoderLayer(force_sparse_attn=True)`` keeps K/V and an index key."""
    if start != _num_layers(f):
        raise f.error(
            "num_hidden_layers", f"MTP modules follow layer {_num_layers(f)}, not {start}"
        )
    modules = num_mtp_modules(f)
    if not modules:
        return ()
    index = index_dim(f)
    return tuple(
        AttentionLayer(
            index=start + j,
            num_kv_heads=f.int("num_key_value_heads"),
            head_dim=f.head_dim(),
            index_head_dim=index,
        )
        for j in range(modules)
    )


def check_modelled(c: ConfigFields) -> None:
    """ConfigError naming the field where vLLM's MiniMax-M3 model would not build or
    load the checkpoint as configured (the module docstring lists them)."""
    expected: tuple[tuple[str, object], ...] = (
        ("hidden_act", "swigluoai"),
        ("attention_output_gate", False),
        ("use_qk_norm", True),
        ("qk_norm_type", "per_head"),
    )
    for key, value in expected:
        if c.get(key) is not None and c.get(key) != value:
            raise c.error(
                key,
                f"{c.get(key)!r} is not modelled: vLLM 0.33.0's MiniMax-M3 builds only "
                f"{key} = {value!r}",
            )
    shared = c.int("n_shared_experts", 0, minimum=0)
    expected_shared = c.int("intermediate_size") * shared
    if shared and c.int("shared_intermediate_size", expected_shared) != expected_shared:
        raise c.error(
            "shared_intermediate_size",
            f"{c.int('shared_intermediate_size')}, but vLLM sizes the shared expert at "
            f"intermediate_size x n_shared_experts ({expected_shared})",
        )


def attention(at: At, c: ModelFields, sparse: bool) -> None:
    """GQA projections and per-head q/k norms; a sparse layer's indexer projections."""
    hidden, head_dim = c.int("hidden_size"), c.head_dim()
    heads, kv_heads = c.int("num_attention_heads"), c.int("num_key_value_heads")
    at.linear("q_proj", ((heads, head_dim),), hidden, shard="column")
    for proj in ("k_proj", "v_proj"):
        at.linear(proj, ((kv_heads, head_dim),), hidden, shard="column")
    at.linear("o_proj", hidden, ((heads, head_dim),), shard="row")
    at.norm("q_norm", head_dim)
    at.norm("k_norm", head_dim)
    if not sparse:
        return
    index = sparse_fields(c).int("sparse_index_dim")
    at.linear("index_q_proj", ((kv_heads, index),), hidden, shard="column")
    at.linear("index_k_proj", index, hidden, shard="replicated")
    at.norm("index_q_norm", index)
    at.norm("index_k_norm", index)


def moe(layer: At, c: ModelFields) -> None:
    """``block_sparse_moe``: fp32 router and correction bias, shared expert, experts."""
    block = layer.sub("block_sparse_moe")
    hidden, experts = c.int("hidden_size"), c.int("num_local_experts")
    inter = c.int("intermediate_size")
    router = block.sub("", "routers")
    router.tensor("gate", experts, hidden, fixed="fp32")
    if c.flag("use_routing_bias", False):
        router.tensor("e_score_correction_bias", experts, fixed="fp32")
    shared = c.int("n_shared_experts", 0, minimum=0)
    if shared:
        gated_mlp(block.sub("shared_experts", "shared_experts"), hidden, inter * shared)
    # the checkpoint's expert names (get_expert_mapping: w1 gate, w3 up, w2 down), which
    # the safetensors headers' tensors are matched to
    routed = block.sub("experts", "routed_experts")
    for proj in ("w1", "w3"):
        routed.linear(proj, inter, hidden, shard="column", copies=experts)
    routed.linear("w2", hidden, inter, shard="row", copies=experts)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, decoder layers, final norm and lm_head (``MiniMaxM3SparseForCausalLM``),
    under ``language_model.`` for the vision-language checkpoint."""
    check_modelled(c)
    vl = c.model.model_type == "minimax_m3_vl"
    prefix = "language_model.model" if vl else "model"
    hidden = c.int("hidden_size")
    inv.at(prefix, "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    for i, (sparse, is_moe) in enumerate(zip(sparse_flags(c), moe_flags(c), strict=True)):
        layer = inv.at(f"{prefix}.layers.{i}", i, "norms")
        attention(layer.sub("self_attn", "attention"), c, sparse)
        layer.norm("input_layernorm", hidden)
        layer.norm("post_attention_layernorm", hidden)
        if is_moe:
            moe(layer, c)
        else:
            mlp = layer.sub("mlp", "dense_mlp")
            gated_mlp(mlp, hidden, c.int("dense_intermediate_size"))
    final(inv, c, f"{prefix}.norm", "language_model.lm_head" if vl else "lm_head")
    mtp_weights(inv, c, f"{prefix}.mtp.layers")


def mtp_weights(inv: Inventory, c: ModelFields, prefix: str) -> None:
    """``MiniMaxM3MultiTokenPredictorLayer`` per MTP module under ``prefix.{j}``: enorm,
    hnorm, a replicated ``eh_proj`` (2H -> H, quantized with the model), a sparse MoE
    decoder layer (forced: ``force_sparse_attn``, ``force_moe``) and final_layernorm.
    No embedding or head (the target's, module docstring)."""
    hidden = c.int("hidden_size")
    for j in range(num_mtp_modules(c)):
        own = Inventory()
        layer = own.at(f"{prefix}.{j}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        layer.linear("eh_proj", hidden, 2 * hidden, shard="replicated")
        attention(layer.sub("self_attn", "attention"), c, True)
        layer.norm("input_layernorm", hidden)
        layer.norm("post_attention_layernorm", hidden)
        moe(layer, c)
        layer.norm("final_layernorm", hidden)
        inv.extend_as_mtp(own)


def checked_layers(f: ConfigFields) -> list[Layer]:
    """:func:`layers`, after :func:`check_modelled` and the ``moe_layer_freq`` check (a
    plan never reads a config vLLM would not load)."""
    check_modelled(f)
    moe_flags(f)
    return layers(f)


MINIMAX_M3 = Architecture(
    family="minimax_m3",
    model_types=frozenset({"minimax_m3_text", "minimax_m3_vl"}),
    layers=checked_layers,
    mtp_layers=mtp_layers,
    weights=weights,
    nested_types=frozenset({"minimax_m3_vl"}),
    text_defaults=TEXT_DEFAULTS,
    text_only_note=True,
    # vLLM's pools and SGLang 0.5.23's MiniMaxSparseKVPool (kvbudget.engines.sglang_minimax);
    # TensorRT-LLM has no model of the index cache here
    unmodelled_engines=frozenset({"trtllm"}),
    unmodelled_reasons=MappingProxyType(
        {
            "trtllm": "kvbudget's TensorRT-LLM models have not read a MiniMax-M3 cache manager",
        }
    ),
)

ARCHITECTURES = (MINIMAX_M3,)
