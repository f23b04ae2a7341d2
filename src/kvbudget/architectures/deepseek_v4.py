"""DeepSeek-V4 (V4-Flash, V4-Pro): compressed shared-KV attention, hyper-connections, MoE.

Config, as transformers 5.20.2 reads it (``models/deepseek_v4/configuration_deepseek_v4.py``
``DeepseekV4Config.__post_init__``): ``layer_types`` per layer (``sliding_attention``,
``compressed_sparse_attention``, ``heavily_compressed_attention``; else the legacy
``compress_ratios`` list of 0 / 4 / 128; else two heavily compressed layers then the two
compressed kinds alternating), ``compress_rates`` per type (default 4 and 128),
``qk_rope_head_dim`` (else ``head_dim x partial_rotary_factor``, default 64 of 512),
``mlp_layer_types`` (else ``num_hash_layers``, default 3, hash-routed MoE layers first).

Cache, per layer (vLLM 0.33.0 ``models/deepseek_v4/attention.py``, the PyPI wheel): a
:class:`~kvbudget.layers.CompressedMLALayer` of ratio ``max(1, compress_rates[type])``
(sliding layers 1: the window cache only), with the indexer on the ratio-4 layers
(``if self.compress_ratio == 4``). The ``num_nextn_predict_layers`` MTP layers follow the
model's; vLLM gives a layer past ``num_hidden_layers`` ratio 1 (the window cache only).
kvbudget's ledger (and so its own cache) reads each layer's bounded caches from
``CompressedMLALayer.window_parts``: the window cache and the compressors' inputs.

Weights: vLLM's modules (``models/deepseek_v4/nvidia/model.py`` ``DeepseekV4DecoderLayer``,
``DeepseekV4MoE``, ``DeepseekV4Model``; ``attention.py``; ``compressor.py``
``DeepseekCompressor``; ``nvidia/mtp.py``), named as vLLM names them after its checkpoint
mapper. DeepSeek-V4.1 (``deepseek_v41``, vLLM's own package) is
:mod:`kvbudget.architectures.deepseek_v41`, which reuses this module's pieces.
"""

from __future__ import annotations

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import CompressedMLALayer, Layer

SLIDING = "sliding_attention"
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
DEFAULT_RATES = {CSA: 4, HCA: 128}
RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}
INDEXED_RATIO = 4  # only the ratio-4 layers run the sparse indexer (attention.py)
DEFAULT_HASH_LAYERS = 3
DEFAULT_ROPE_FACTOR = (64, 512)  # default_partial_rotary_factor = 64 / 512


def layer_types(f: ConfigFields) -> list[str]:
    """Each layer's attention type, as ``DeepseekV4Config.__post_init__`` sets it."""
    n = f.int("num_hidden_layers")
    if f.has("layer_types"):
        types = f.str_list("layer_types", n)
    elif f.has("compress_ratios"):
        ratios = f.get("compress_ratios")
        if not isinstance(ratios, list) or any(r not in RATIO_TYPES for r in ratios):
            raise f.error("compress_ratios", f"expected a list of 0, 4 or 128, got {ratios!r}")
        types = [RATIO_TYPES[r] for r in ratios[:n]]
        if len(types) != n:
            raise f.error("compress_ratios", f"has {len(types)} entries for {n} layers")
    else:
        tail = [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]
        types = [HCA] * min(n, 2) + tail
    for i, t in enumerate(types):
        if t not in (SLIDING, CSA, HCA):
            raise f.error(
                "layer_types", f"entry {i} is {t!r}; expected one of {SLIDING}, {CSA}, {HCA}"
            )
    return types


def compress_ratios(f: ConfigFields) -> list[int]:
    """Each layer's compress ratio as vLLM sets it: ``max(1, compress_rates[type])``."""
    rates = dict(DEFAULT_RATES)
    given = f.get("compress_rates")
    if given is not None:
        if not isinstance(given, dict):
            raise f.error(
                "compress_rates", f"expected a mapping of layer type to rate, got {given!r}"
            )
        rates = {str(k): v for k, v in given.items()}
    for legacy, kind in (("compress_rate_csa", CSA), ("compress_rate_hca", HCA)):
        if f.has(legacy):
            rates[kind] = f.int(legacy)
    out = []
    for t in layer_types(f):
        ratio = max(1, rates.get(t, 0))
        if ratio not in (1, 4, 128):
            # CompressorStateCache: ``assert compress_ratio in [4, 128]`` (compressor.py)
            raise f.error("compress_rates", f"{t} has rate {ratio}; vLLM compresses by 4 or 128")
        out.append(ratio)
    return out


def rope_head_dim(f: ConfigFields) -> int:
    """``qk_rope_head_dim``, else ``head_dim x partial_rotary_factor`` (default 64/512)."""
    if f.has("qk_rope_head_dim"):
        return f.int("qk_rope_head_dim")
    head_dim = f.int("head_dim")
    factor = f.get("partial_rotary_factor")
    if isinstance(factor, (int, float)) and not isinstance(factor, bool):
        return int(head_dim * factor)
    num, den = DEFAULT_ROPE_FACTOR
    return head_dim * num // den


def _layer(f: ConfigFields, index: int, ratio: int) -> CompressedMLALayer:
    return CompressedMLALayer(
        index=index,
        head_dim=f.int("head_dim"),
        rope_head_dim=rope_head_dim(f),
        window=f.int("sliding_window"),
        compress_ratio=ratio,
        index_head_dim=f.int("index_head_dim") if ratio == INDEXED_RATIO else 0,
    )


def layers(f: ConfigFields) -> list[Layer]:
    """One compressed-attention layer per decoder layer, at its type's ratio."""
    return [_layer(f, i, ratio) for i, ratio in enumerate(compress_ratios(f))]


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """``num_nextn_predict_layers`` (default 1) window-only layers after the model's."""
    count = f.int("num_nextn_predict_layers", 1, minimum=0)
    return tuple(_layer(f, start + j, 1) for j in range(count))


# --------------------------------------------------------------------------- weights


def compressor(at: At, c: ModelFields, ratio: int, dim: int) -> None:
    """``DeepseekCompressor``: ``ape`` (fp32, ratio x coff*dim), the fused kv / gate
    projections (replicated, unquantized) and the norm; coff 2 at ratio 4."""
    coff = 2 if ratio == INDEXED_RATIO else 1
    hidden = c.int("hidden_size")
    at.tensor("ape", ratio, coff * dim, fixed="fp32")
    for proj in ("wkv", "wgate"):
        at.linear(proj, coff * dim, hidden, shard="replicated", quantizable=False)
    at.norm("norm", dim)


def attention(at: At, c: ModelFields, ratio: int) -> None:
    """``DeepseekV4Attention``: q down / kv (one replicated fused projection), q norm,
    the column-parallel q up, kv norm, the grouped output projection (``wo_a`` column,
    ``wo_b`` row, both by group), fp32 sinks per head; a compressor when ratio > 1,
    the indexer (its q up, head weights, compressor) at ratio 4."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    head_dim, q_rank = c.int("head_dim"), c.int("q_lora_rank")
    groups, o_rank = c.int("o_groups"), c.int("o_lora_rank")
    at.linear("wq_a", q_rank, hidden, shard="replicated")
    at.linear("wkv", head_dim, hidden, shard="replicated")
    at.norm("q_norm", q_rank)
    at.linear("wq_b", ((heads, head_dim),), q_rank, shard="column")
    at.norm("kv_norm", head_dim)
    at.linear("wo_a", ((groups, o_rank),), heads * head_dim // groups, shard="column")
    at.linear("wo_b", hidden, ((groups, o_rank),), shard="row")
    at.tensor("attn_sink", ((heads, 1),), shard="column", fixed="fp32")
    if ratio > 1:
        compressor(at.sub("compressor"), c, ratio, head_dim)
    if ratio == INDEXED_RATIO:
        idx = at.sub("indexer")
        index_heads, index_dim = c.int("index_n_heads"), c.int("index_head_dim")
        idx.linear("wq_b", index_heads * index_dim, q_rank, shard="replicated")
        idx.linear("weights_proj", index_heads, hidden, shard="replicated", quantizable=False)
        compressor(idx.sub("compressor"), c, ratio, index_dim)


def hyper_connections(at: At, c: ModelFields, name: str, *, head: bool = False) -> None:
    """An mHC mapping, fp32: ``{name}_fn`` (mixes x hc_mult*hidden), ``_base`` (mixes),
    ``_scale``; a layer's mixes ``(2 + hc_mult) x hc_mult`` and 3 scales, the head's
    (``hc_head``) ``hc_mult`` and 1."""
    hc = c.int("hc_mult")
    mixes, scales = (hc, 1) if head else ((2 + hc) * hc, 3)
    at.tensor(f"{name}_fn", mixes, hc * c.int("hidden_size"), fixed="fp32")
    at.tensor(f"{name}_base", mixes, fixed="fp32")
    at.tensor(f"{name}_scale", scales, fixed="fp32")


def moe(layer: At, c: ModelFields, i: int, hash_layers: int, *, experts: int | None = None) -> None:
    """``DeepseekV4MoE``: the router (its ``tid2eid`` table, int32, on hash layers; the
    score correction bias under ``noaux_tc`` off them), routed and shared experts;
    ``experts`` (a DSpark stage's ``dspark_n_routed_experts``) overrides
    ``n_routed_experts``."""
    hidden = c.int("hidden_size")
    experts = experts or c.int("n_routed_experts")
    inter = c.int("moe_intermediate_size")
    gate = layer.sub("ffn.gate", "routers")
    gate.tensor("weight", experts, hidden)
    if i < hash_layers:  # a loaded index table, not a learned weight
        gate.tensor(
            "tid2eid",
            c.int("vocab_size"),
            c.int("num_experts_per_tok"),
            fixed="int32",
            is_param=False,
        )
    elif c.get("topk_method") == "noaux_tc":
        gate.tensor("e_score_correction_bias", experts, fixed="fp32")
    gated_mlp(layer.sub("ffn.experts", "routed_experts"), hidden, inter, copies=experts)
    shared = c.int("n_shared_experts", 0, minimum=0)
    if shared:
        gated_mlp(layer.sub("ffn.shared_experts", "shared_experts"), hidden, inter * shared)


def hash_layer_count(c: ModelFields) -> int:
    """Hash-routed MoE layers: ``mlp_layer_types``' ``hash_moe`` entries, else
    ``num_hash_layers`` (default 3)."""
    n = c.int("num_hidden_layers")
    if c.has("mlp_layer_types"):
        return c.str_list("mlp_layer_types", n).count("hash_moe")
    return min(n, c.int("num_hash_layers", DEFAULT_HASH_LAYERS, minimum=0))


def decoder_layer(layer: At, c: ModelFields, i: int, ratio: int, hash_layers: int) -> None:
    """``DeepseekV4DecoderLayer``: attention, MoE, two norms, two mHC mappings."""
    hidden = c.int("hidden_size")
    attention(layer.sub("attn", "attention"), c, ratio)
    moe(layer, c, i, hash_layers)
    layer.norm("attn_norm", hidden)
    layer.norm("ffn_norm", hidden)
    for name in ("hc_attn", "hc_ffn"):
        hyper_connections(layer, c, name)


def mtp_weights(inv: Inventory, c: ModelFields, hash_layers: int) -> None:
    """The MTP layers (``DeepSeekV4MultiTokenPredictorLayer``, nvidia/mtp.py): enorm,
    hnorm, ``e_proj`` and ``h_proj`` (replicated), the head's mHC mapping, a decoder layer
    (window cache only), ``shared_head.norm``; embedding and head are the main model's."""
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    for j in range(len(c.model.mtp_layers)):
        mtp = Inventory()
        layer = mtp.at(f"model.mtp.{j}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        for proj in ("e_proj", "h_proj"):
            layer.linear(proj, hidden, hidden, shard="replicated")
        hyper_connections(layer, c, "hc_head", head=True)
        decoder_layer(layer, c, n + j, 1, hash_layers)
        layer.norm("shared_head.norm", hidden)
        inv.extend_as_mtp(mtp)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, decoder layers, final norm and mHC head, lm_head, MTP layers."""
    hidden = c.int("hidden_size")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    hash_layers = hash_layer_count(c)
    for i, ratio in enumerate(compress_ratios(c)):
        decoder_layer(inv.at(f"model.layers.{i}", i, "norms"), c, i, ratio, hash_layers)
    last = inv.at("model", "last", "norms")
    last.norm("norm", hidden)
    hyper_connections(last, c, "hc_head", head=True)
    if not c.flag("tie_word_embeddings", False):
        inv.at("lm_head", "last", "lm_head").vocab("", c.int("vocab_size"), hidden)
    mtp_weights(inv, c, hash_layers)


# DeepSeek's own checkpoint names (embed, head, norm, hc_head at the top; layers.N and
# mtp.N below; experts' w1/w3/w2) as vLLM 0.33.0's mapper renames them
# (models/deepseek_v4/nvidia/model.py ``_make_deepseek_v4_weights_mapper``: the
# ``layers.``, ``embed.``, ``norm.``, ``hc_head``, ``mtp.`` prefixes under ``model.``,
# ``head.weight`` to ``lm_head.weight``, ``embed.weight`` to ``embed_tokens.weight``;
# FusedMoE's and the shared experts' w1/w3/w2 are the gate, up and down projections).
# A ``.scale`` tensor is its weight's block scale and shares its weight's placement.
TOP_LEVEL_NAMES: tuple[tuple[str, str], ...] = (
    (r"^embed\.", "model.embed_tokens."),
    (r"^head\.", "lm_head."),
    (r"^(norm\.|hc_head_)", r"model.\1"),
)
EXPERT_NAMES: tuple[tuple[str, str], ...] = (
    (r"\.(experts\.\d+|shared_experts)\.w1\.", r".\1.gate_proj."),
    (r"\.(experts\.\d+|shared_experts)\.w3\.", r".\1.up_proj."),
    (r"\.(experts\.\d+|shared_experts)\.w2\.", r".\1.down_proj."),
)
V4_CHECKPOINT_NAMES = (*TOP_LEVEL_NAMES, (r"^(layers|mtp)\.", r"model.\1."), *EXPERT_NAMES)

DEEPSEEK_V4 = Architecture(
    family="deepseek_v4",
    model_types=frozenset({"deepseek_v4"}),
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
    # vLLM's and SGLang's engine models build these caches (SGLang's without speculation:
    # engines/sglang_dsv4.py); TensorRT-LLM's transcription raises for the family;
    # kvbudget's own cache holds them (the compressed entries in its blocks, the window
    # cache and compressor inputs in window pools: CompressedMLALayer.window_parts) where
    # they are whole bytes (engines/kvbudget_cache.py _check_compressed)
    unmodelled_engines=frozenset({"trtllm"}),
    checkpoint_names=V4_CHECKPOINT_NAMES,
)

ARCHITECTURES = (DEEPSEEK_V4,)
