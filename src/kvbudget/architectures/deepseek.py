"""DeepSeek-V2/V3/V3.2 and Kimi-K2: multi-head latent attention, MoE, MTP layers.

Cache: one MLA latent (``kv_lora_rank + qk_rope_head_dim``) per layer, replicated on
every TP rank; DeepSeek-V3.2 adds its sparse-attention indexer key (``index_head_dim``).
``num_nextn_predict_layers`` MTP layers (MLA too) are indexed after the model's layers.
Kimi-K2 ships ``DeepseekV3ForCausalLM`` under its own ``model_type``. Weights: vLLM
``deepseek_v2.py`` and ``deepseek_mtp.py``.
"""

from __future__ import annotations

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import MlpBuilder, final, gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import Layer, MLALayer


def mla_layers(f: ConfigFields, num_layers: int, start: int = 0) -> list[Layer]:
    """``num_layers`` MLA layers indexed from ``start``."""
    rank = f.int("kv_lora_rank")
    rope = f.int("qk_rope_head_dim")
    indexer = f.int("index_head_dim", 0, minimum=0)  # DeepSeek-V3.2's sparse attention
    return [
        MLALayer(index=start + i, kv_lora_rank=rank, qk_rope_head_dim=rope, index_head_dim=indexer)
        for i in range(num_layers)
    ]


def layers(f: ConfigFields) -> list[Layer]:
    """The decoder's MLA layers."""
    return mla_layers(f, f.int("num_hidden_layers"))


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """``num_nextn_predict_layers`` MLA layers after the model's own."""
    return tuple(mla_layers(f, f.int("num_nextn_predict_layers", 0, minimum=0), start))


def mla(at: At, c: ModelFields) -> None:
    """Multi-head latent attention; the down projections are replicated (vLLM)."""
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    rope = c.int("qk_rope_head_dim")
    qk_head = c.int("qk_nope_head_dim") + rope
    kv_rank = c.int("kv_lora_rank")
    if c.cfg.get("q_lora_rank") is None:
        at.linear("q_proj", ((heads, qk_head),), hidden, shard="column")
    else:
        q_rank = c.int("q_lora_rank")
        at.linear("q_a_proj", q_rank, hidden, shard="replicated")
        at.norm("q_a_layernorm", q_rank)
        at.linear("q_b_proj", ((heads, qk_head),), q_rank, shard="column")
    at.linear("kv_a_proj_with_mqa", kv_rank + rope, hidden, shard="replicated")
    at.norm("kv_a_layernorm", kv_rank)
    kv_b = ((heads, c.int("qk_nope_head_dim") + c.int("v_head_dim")),)
    at.linear("kv_b_proj", kv_b, kv_rank, shard="column")
    at.linear("o_proj", hidden, ((heads, c.int("v_head_dim")),), shard="row")
    index_dim = c.int("index_head_dim", 0, minimum=0)
    if index_dim:
        # DeepSeek-V3.2's indexer, replicated on every rank (vLLM deepseek_v2.py Indexer:
        # ReplicatedLinear wq_b and wk, a LayerNorm k_norm, an unquantized weights_proj)
        idx = at.sub("indexer")
        index_heads = c.int("index_n_heads")
        idx.linear("wq_b", index_heads * index_dim, c.int("q_lora_rank"), shard="replicated")
        idx.linear("wk", index_dim, hidden, shard="replicated")
        idx.norm("k_norm", index_dim, bias=True)
        idx.linear("weights_proj", index_heads, hidden, shard="replicated", quantizable=False)


def moe_mlp(layer: At, c: ModelFields, i: int, *, router_dtype: str | None = None) -> None:
    """Layer ``i``'s MLP in DeepSeek's MoE layout (also GLM-4.5's): dense for the first
    ``first_k_dense_replace`` layers (and off ``moe_layer_freq``), else a router (with
    ``e_score_correction_bias`` under ``noaux_tc`` routing), ``n_routed_experts``
    experts and ``n_shared_experts`` shared experts fused into one MLP.
    ``router_dtype`` pins the router weight's storage (GLM keeps it in fp32)."""
    hidden = c.int("hidden_size")
    experts = c.int("n_routed_experts", 0, minimum=0)
    sparse = (
        experts > 0
        and i >= c.int("first_k_dense_replace", 0, minimum=0)
        and i % c.int("moe_layer_freq", 1) == 0
    )
    if not sparse:
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))
        return
    inter = c.int("moe_intermediate_size")
    router = layer.sub("mlp.gate", "routers")
    router.tensor("", experts, hidden, fixed=router_dtype)
    if c.get("topk_method", "noaux_tc" if router_dtype else None) == "noaux_tc":
        router.tensor("e_score_correction_bias", experts, fixed="fp32")
    gated_mlp(layer.sub("mlp.experts", "routed_experts"), hidden, inter, copies=experts)
    shared = c.int("n_shared_experts", 0, minimum=0)
    if shared:
        gated_mlp(layer.sub("mlp.shared_experts", "shared_experts"), hidden, inter * shared)


def decoder_layer(layer: At, c: ModelFields, i: int) -> None:
    """One DeepSeek decoder layer (index ``i``): MLA, norms, a dense MLP or an MoE."""
    hidden = c.int("hidden_size")
    mla(layer.sub("self_attn", "attention"), c)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    moe_mlp(layer, c, i)


def mtp_weights(inv: Inventory, c: ModelFields, decoder: MlpBuilder) -> None:
    """The ``num_nextn_predict_layers`` MTP layers after the model's (DeepSeek-V3 report,
    section 2.2; GLM-4.5 the same): enorm, hnorm, eh_proj (2H -> H), a full decoder
    layer (``decoder``) and shared_head.norm; the embedding and shared_head.head are the
    main model's (vLLM's proposer points them at the target's)."""
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    for j in range(c.int("num_nextn_predict_layers", 0, minimum=0)):
        mtp = Inventory()
        layer = mtp.at(f"model.layers.{num_layers + j}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        layer.linear("eh_proj", hidden, 2 * hidden, shard="replicated", quantizable=False)
        decoder(layer, c, num_layers + j)
        layer.norm("shared_head.norm", hidden)
        inv.extend_as_mtp(mtp)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, MLA decoder layers, final norm and lm_head, then the MTP layers."""
    hidden = c.int("hidden_size")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    for i in range(c.int("num_hidden_layers")):
        decoder_layer(inv.at(f"model.layers.{i}", i, "norms"), c, i)
    final(inv, c, "model.norm")
    mtp_weights(inv, c, decoder_layer)


DEEPSEEK = Architecture(
    family="deepseek",
    model_types=frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"}),
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
)

ARCHITECTURES = (DEEPSEEK,)
