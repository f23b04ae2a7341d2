"""DeepSeek-V4.1: DeepSeek-V4's compressed attention with compressed caches shared by
groups of layers, as vLLM 0.33.0 runs it (its own package, ``vllm/models/deepseek_v41``).

Config (``vllm/transformers_utils/configs/deepseek_v41.py`` ``DeepseekV41Config``): the
text model sits under ``text_config``, which vLLM flattens onto the config; the class has
no geometry defaults, so nothing is assumed here. The expert dtype comes from
``quantization_config.expert_dtype`` (``quant_config.py`` ``DeepseekV4FP8Config``: MXFP4
routed experts for ``fp4``, the default; read by
:func:`kvbudget.weights.quantization.deepseek_v4_experts`). No verbatim Hub
config is reachable in this project: the tests' config is DeepSeek-V4's transformers
5.20.2 defaults plus the V4.1 fields below (tests/family_configs.py).

Cache, per layer (``models/deepseek_v41/attention.py`` ``DeepseekV4Attention.__init__``),
a :class:`~kvbudget.layers.SharedCompressedMLALayer`:

* ``compress_ratios[i]`` (0 where the list is shorter or absent): 0 the window cache
  only, 1 a compressed latent per token, 2 one per two tokens; nothing else is accepted;
* ``kv_source_layer_ids``: the layers that own a compressed cache and its compressor;
  a layer of ratio > 0 reads the nearest source at or below it;
* ``index_source_layer_ids``: the layers that run the indexer; one that is also a KV
  source owns the indexer key cache, the others read their KV source's (which must then
  be an index source too, else vLLM finds no key cache to read).

V4.1 has no classic MTP layers: ``num_nextn_predict_layers`` counts DSpark stages
(``config/speculative.py``: "DeepSeek V4.1 has no classic-MTP draft"), so ``--spec mtp`` is
refused (:mod:`kvbudget.deployment`) and ``mtp_layers`` are the DSpark stages that
``--spec dspark`` runs (:mod:`kvbudget.architectures.dspark`: one window cache each).

Weights: vLLM's text backbone (``nvidia/model.py`` ``DeepseekV4DecoderLayer``,
``DeepseekV4Model``, ``DeepseekV41LLMForCausalLM``; ``attention.py``; ``compressor.py``
``DeepseekCompressor``), which drops the checkpoint's ``mtp.*`` (DSpark: the draft
loads them, filed as MTP weights by :func:`kvbudget.architectures.dspark.weights`) and
vision weights (``_make_deepseek_v4_weights_mapper``): DeepSeek-V4's attention projections,
MoE (no hash-routed layers: ``num_hash_layers=0``) and mHC mappings, no ``hc_head``;
the compressor (no ``ape``) only on KV sources, the indexer only on index sources.
Engram layers (``engram_layer_ids``: n-gram embedding tables vLLM keeps in pinned host
memory by default, ``config/engram.py``) are not modelled: their weights are refused.
"""

from __future__ import annotations

from kvbudget.architectures import deepseek_v4 as v4
from kvbudget.architectures import dspark
from kvbudget.architectures.base import Architecture
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import Layer, SharedCompressedMLALayer

RATIOS = (0, 1, 2)  # DeepseekV4Attention.__init__: "only 0 (sliding window), 1 and 2"
COMPRESSOR_DIMS = (512, 64)  # DeepseekCompressor: assert head_dim 512, rope 64


def _ids(f: ConfigFields, key: str) -> frozenset[int]:
    value = f.get(key) or []
    if not isinstance(value, list) or any(not isinstance(v, int) for v in value):
        raise f.error(key, f"expected a list of layer indices, got {value!r}")
    return frozenset(value)


def compress_ratios(f: ConfigFields) -> list[int]:
    """Each decoder layer's ratio: ``compress_ratios[i]``, 0 past the list's end."""
    n = f.int("num_hidden_layers")
    given = f.get("compress_ratios") or []
    if not isinstance(given, list) or any(r not in RATIOS for r in given):
        raise f.error(
            "compress_ratios", f"expected a list of 0, 1 or 2 (vLLM's V4.1 ratios), got {given!r}"
        )
    return [int(given[i]) if i < len(given) else 0 for i in range(n)]


def _sources(f: ConfigFields, ratios: list[int]) -> tuple[frozenset[int], frozenset[int]]:
    """``(kv sources, index sources)`` among the decoder layers, checked as vLLM builds
    them; a ConfigError names the layer vLLM would fail on."""
    n = len(ratios)
    kv = frozenset(i for i in _ids(f, "kv_source_layer_ids") if i < n)
    index = frozenset(i for i in _ids(f, "index_source_layer_ids") if i < n)
    for i, ratio in enumerate(ratios):
        below = [s for s in kv if s <= i]
        if ratio and (not kv or not index or not below):
            raise f.error(
                "kv_source_layer_ids",
                f"layer {i} has compress ratio {ratio} but no KV source at or below it "
                "(vLLM needs kv_source_layer_ids and index_source_layer_ids for compressed "
                "layers)",
            )
        if ratio == 0 and (i in kv or i in index):
            raise f.error("compress_ratios", f"layer {i} is a KV or index source but has ratio 0")
        if i in index and i not in kv and max(below) not in index:
            raise f.error(
                "index_source_layer_ids",
                f"layer {i} reads the indexer keys of its KV source, layer {max(below)}, "
                "which is not an index source (vLLM finds no key cache there)",
            )
    if kv and (f.int("head_dim"), v4.rope_head_dim(f)) != COMPRESSOR_DIMS:
        raise f.error("head_dim", "vLLM's V4.1 compressor takes head_dim 512 with 64 rotary")
    return kv, index


def layers(f: ConfigFields) -> list[Layer]:
    """One V4.1 attention layer per decoder layer."""
    ratios = compress_ratios(f)
    kv, index = _sources(f, ratios)
    index_dim = f.int("index_head_dim") if index else 0
    return [
        SharedCompressedMLALayer(
            index=i,
            head_dim=f.int("head_dim"),
            rope_head_dim=v4.rope_head_dim(f),
            window=f.int("sliding_window"),
            compress_ratio=ratio,
            kv_source=i in kv,
            index_head_dim=index_dim if i in kv and i in index else 0,
        )
        for i, ratio in enumerate(ratios)
    ]


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """The DSpark stages (:mod:`kvbudget.architectures.dspark`): V4.1 has no classic MTP
    layers, its ``num_nextn_predict_layers`` counts DSpark stages."""
    return dspark.stage_layers(
        f,
        start,
        head_dim=f.int("head_dim"),
        rope_head_dim=v4.rope_head_dim(f),
        window=f.int("sliding_window"),
    )


# --------------------------------------------------------------------------- weights


def compressor(at: At, c: ModelFields, ratio: int) -> None:
    """``DeepseekCompressor`` (V4.1): the fused kv (and, at ratio 2, gate) projection,
    replicated and unquantized, and the norm; no ``ape``."""
    hidden, head_dim = c.int("hidden_size"), c.int("head_dim")
    for proj in ("wkv", "wgate") if ratio > 1 else ("wkv",):
        at.linear(proj, head_dim, hidden, shard="replicated", quantizable=False)
    at.norm("norm", head_dim)


def indexer(at: At, c: ModelFields, owns_k: bool) -> None:
    """``DeepseekV4Indexer`` (V4.1): its q up and head weights; on a KV source ``wk``
    (from the compressor's latent, bf16) and ``k_norm``; no compressor of its own."""
    heads, dim = c.int("index_n_heads"), c.int("index_head_dim")
    at.linear("wq_b", heads * dim, c.int("q_lora_rank"), shard="replicated")
    at.linear("weights_proj", heads, c.int("hidden_size"), shard="replicated", quantizable=False)
    if owns_k:
        at.linear("wk", dim, c.int("head_dim"), shard="replicated", quantizable=False)
        at.norm("k_norm", dim)


def decoder_layer(
    layer: At,
    c: ModelFields,
    x: SharedCompressedMLALayer,
    index: bool,
    *,
    experts: int | None = None,
) -> None:
    """``DeepseekV4DecoderLayer`` (V4.1): attention, MoE (of ``experts`` routed experts
    where given: a DSpark stage's), two norms, two mHC mappings."""
    hidden = c.int("hidden_size")
    attn = layer.sub("attn", "attention")
    v4.attention(attn, c, 1)  # DeepSeek-V4's projections, sinks and norms
    if x.kv_source:
        compressor(attn.sub("compressor"), c, x.compress_ratio)
    if index:
        indexer(attn.sub("indexer"), c, x.kv_source)
    experts = experts or c.int("n_routed_experts")
    v4.moe(layer, c, x.index, 0, experts=experts)
    vision = c.model.raw_config.get("vision_config") or {}
    if isinstance(vision, dict) and vision.get("num_hidden_layers", 0):
        # vision checkpoints route image tokens with a gate bias of their own, fp32, on
        # every MoE layer (deepseek_v4/nvidia/model.py DeepseekV4MoE: ``bias_vl``)
        gate = layer.sub("ffn.gate", "routers")
        gate.tensor("bias_vl", experts, fixed="fp32")
    layer.norm("attn_norm", hidden)
    layer.norm("ffn_norm", hidden)
    for name in ("hc_attn", "hc_ffn"):
        v4.hyper_connections(layer, c, name)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, decoder layers, final norm, lm_head (no mHC head); the DSpark stages
    as MTP weights."""
    if c.get("engram_layer_ids"):
        raise c.error(
            "engram_layer_ids",
            "DeepSeek-V4.1's Engram n-gram embedding tables are not modelled (vLLM keeps "
            "them in pinned host memory by default, EngramConfig.cpu_offload); plan with an "
            "explicit --kv-budget",
        )
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", vocab, hidden)
    index = _sources(c, compress_ratios(c))[1]
    for x in c.model.layers:
        assert isinstance(x, SharedCompressedMLALayer)
        decoder_layer(inv.at(f"model.layers.{x.index}", x.index, "norms"), c, x, x.index in index)
    inv.at("model", "last", "norms").norm("norm", hidden)
    if not c.flag("tie_word_embeddings", False):
        inv.at("lm_head", "last", "lm_head").vocab("", vocab, hidden)
    dspark.weights(inv, c)


# V4's checkpoint names (deepseek_v4.V4_CHECKPOINT_NAMES; the same prefixes and suffixes
# in vLLM 0.33.0's models/deepseek_v41/nvidia/model.py mapper) but for the DSpark stages,
# which the inventory keeps under the checkpoint's own ``mtp.N`` names (dspark.py)
V41_CHECKPOINT_NAMES = (
    *v4.TOP_LEVEL_NAMES,
    (r"^layers\.", "model.layers."),
    *v4.EXPERT_NAMES,
)

DEEPSEEK_V41 = Architecture(
    family="deepseek_v41",
    model_types=frozenset({"deepseek_v41"}),
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
    nested_types=frozenset({"deepseek_v41"}),
    text_only_note=True,
    # vLLM's (engines/vllm_dsv41.py) and SGLang's (engines/sglang_dsv4.py) engine models
    # build these caches; kvbudget's own cache holds the KV sources' compressed entries
    # in its blocks and every layer's window cache and the ratio-2 sources' compressor
    # inputs in window pools (SharedCompressedMLALayer.window_parts)
    unmodelled_engines=frozenset({"trtllm"}),
    unmodelled_reasons={
        "trtllm": "kvbudget's TensorRT-LLM models have not read a DeepSeek-V4.1 cache manager",
    },
    checkpoint_names=V41_CHECKPOINT_NAMES,
)

ARCHITECTURES = (DEEPSEEK_V41,)
