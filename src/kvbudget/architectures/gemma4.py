"""Gemma-4 (text, and the multimodal checkpoint's text model).

Read from transformers 5.20.2 ``models/gemma4/configuration_gemma4.py``
(``Gemma4TextConfig.__post_init__``) and vLLM 0.33.0 ``model_executor/models/gemma4.py``
(``Gemma4Attention``, ``Gemma4DecoderLayer``, ``Gemma4Model``; the wheel's commit
``g4ba787ec9``).

Cache, per layer:

* ``layer_types`` (default: every sixth layer ``full_attention``, the others
  ``sliding_attention``); transformers forces the last layer to full attention;
* sliding layers keep ``num_key_value_heads`` x ``head_dim`` over ``sliding_window``
  (halved plus one under ``use_bidirectional_attention: "all"``, as transformers sets it);
* full layers keep ``global_head_dim`` (default 512), and ``num_global_key_value_heads``
  KV heads when ``attention_k_eq_v`` is true (else ``num_key_value_heads``): the
  ``per_layer_config`` transformers builds; a config that already carries a
  ``per_layer_config`` (as transformers writes it back) is read as it is;
* K and V are both cached even when ``attention_k_eq_v`` shares their projection
  (vLLM loads the K weight into both slots, so the layer stores V == K);
* the last ``num_kv_shared_layers`` layers read an earlier layer's cache
  (``kv_sharing_target_layer_name``) and keep none of their own: vLLM's
  ``get_kv_cache_spec`` skips them (v1/worker/gpu/attn_utils.py).

Weights: q/k/v (no v_proj on a ``attention_k_eq_v`` full layer; only q_proj on a
KV-shared layer), o, q_norm and k_norm of each layer's head size, four norms, a gated
MLP (twice as wide on KV-shared layers with ``use_double_wide_mlp``), a parallel MoE block
when ``num_experts`` is set (router with its scales, packed ``gate_up_proj`` experts, three
more norms), the per-layer-embedding (PLE) tables and gates when
``hidden_size_per_layer_input`` > 0, a ``layer_scalar`` per layer, tied embeddings.
The multimodal checkpoint's vision and audio towers keep no KV cache and are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import AttentionStyle, final, gated_mlp, sliding_flags
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer, NoCacheLayer

PATTERN = 6  # Gemma4TextConfig.__post_init__: "by default 5:1"
STYLE = AttentionStyle(qk_norm="head")


def _every_sixth_full(f: ConfigFields, n: int) -> list[bool]:
    return [(i + 1) % PATTERN != 0 for i in range(n)]


def sliding(f: ConfigFields) -> list[bool]:
    """Whether each layer is ``sliding_attention`` (else ``full_attention``): the
    ``layer_types`` list, else every sixth layer full; the last layer always full."""
    flags = sliding_flags(f, f.int("num_hidden_layers"), _every_sixth_full)
    flags[-1] = False  # transformers: "Last layer must use `full_attention`"
    return flags


def geometry(f: ConfigFields, slides: list[bool]) -> list[tuple[int, int]]:
    """``(num_kv_heads, head_dim)`` of every layer, as ``per_layer_config`` sets them."""
    kv, head_dim = f.int("num_key_value_heads"), f.int("head_dim")
    out = [(kv, head_dim)] * len(slides)
    given = f.get("per_layer_config")
    if given is not None:
        if not isinstance(given, Mapping):
            raise f.error(
                "per_layer_config", f"expected a mapping of layer overrides, got {given!r}"
            )
        for key, over in given.items():
            if not (str(key).isdigit() and int(key) < len(slides) and isinstance(over, Mapping)):
                raise f.error("per_layer_config", f"entry {key!r} is not a layer's overrides")
            sub = ConfigFields(over, f.source, f"{f.prefix}per_layer_config.{key}.")
            i = int(key)
            out[i] = (sub.int("num_key_value_heads", kv), sub.int("head_dim", head_dim))
        return out
    global_dim = f.int("global_head_dim", 512)
    global_kv = kv
    if f.flag("attention_k_eq_v", False) and f.has("num_global_key_value_heads"):
        global_kv = f.int("num_global_key_value_heads")
    return [g if s else (global_kv, global_dim) for s, g in zip(slides, out, strict=True)]


def sliding_window(f: ConfigFields) -> int:
    """The window vLLM reads: ``sliding_window``, halved plus one under bidirectional
    attention ("all"), as ``Gemma4TextConfig.__post_init__`` rewrites it."""
    window = f.int("sliding_window")
    return window // 2 + 1 if f.get("use_bidirectional_attention") == "all" else window


def first_kv_shared(f: ConfigFields) -> int:
    """Index of the first layer that reads another layer's KV cache (``n`` when none)."""
    n = f.int("num_hidden_layers")
    shared = f.int("num_kv_shared_layers", 0, minimum=0)
    if shared >= n:
        raise f.error("num_kv_shared_layers", f"{shared} leaves none of the {n} layers a cache")
    return n - shared


def layers(f: ConfigFields) -> list[Layer]:
    """Sliding and full attention layers of their own geometry; KV-shared ones cache nothing."""
    slides = sliding(f)
    geo = geometry(f, slides)
    window = sliding_window(f) if any(slides) else None
    shared_from = first_kv_shared(f)
    out: list[Layer] = []
    for i, (s, (kv, head_dim)) in enumerate(zip(slides, geo, strict=True)):
        if i >= shared_from:
            out.append(NoCacheLayer(index=i))
            continue
        out.append(
            AttentionLayer(
                index=i,
                num_kv_heads=kv,
                head_dim=head_dim,
                sliding_window=window if s else None,
            )
        )
    return out


def attention(
    at: At, c: ModelFields, kv: int, head_dim: int, *, k_only: bool, q_only: bool
) -> None:
    """``Gemma4Attention``'s weights (vLLM builds q/k/v as one qkv_proj from them)."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    bias = c.flag("attention_bias", False)
    at.linear("q_proj", ((heads, head_dim),), hidden, shard="column", bias=bias)
    if not q_only:
        at.linear("k_proj", ((kv, head_dim),), hidden, shard="column", bias=bias)
        if not k_only:
            at.linear("v_proj", ((kv, head_dim),), hidden, shard="column", bias=bias)
        at.norm("k_norm", head_dim)
    at.linear("o_proj", hidden, ((heads, head_dim),), shard="row", bias=bias)
    at.norm("q_norm", head_dim)


def moe(layer: At, c: ModelFields) -> None:
    """The MoE block beside the dense MLP (``Gemma4Router``, ``FusedMoEFactory``)."""
    hidden, experts = c.int("hidden_size"), c.int("num_experts")
    inter = c.int("moe_intermediate_size")
    router = layer.sub("router", "routers")
    router.tensor("scale", hidden)
    router.tensor("per_expert_scale", experts)
    router.linear("proj", experts, hidden, shard="replicated", quantizable=False)
    block = layer.sub("experts", "routed_experts")
    block.linear("gate_up_proj", ((inter, 1), (inter, 1)), hidden, shard="column", copies=experts)
    block.linear("down_proj", hidden, inter, shard="row", copies=experts)
    for norm in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2"):
        layer.norm(norm, hidden)
    layer.norm("pre_feedforward_layernorm_2", hidden)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings (and PLE tables), decoder layers, final norm; the lm_head is tied."""
    prefix = "model.language_model" if c.model.model_type == "gemma4" else "model"
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    slides = sliding(c)
    geo = geometry(c, slides)
    shared_from = first_kv_shared(c)
    k_eq_v = c.flag("attention_k_eq_v", False)
    ple = c.int("hidden_size_per_layer_input", 0, minimum=0)
    embeddings = inv.at(prefix, "first", "embeddings")
    embeddings.vocab("embed_tokens", c.int("vocab_size"), hidden)
    if ple:
        rows = c.int("vocab_size_per_layer_input", c.int("vocab_size"))
        embeddings.vocab("embed_tokens_per_layer", rows, n * ple)
        embeddings.linear("per_layer_model_projection", n * ple, hidden, shard="column")
        embeddings.norm("per_layer_projection_norm", ple)
    double = c.flag("use_double_wide_mlp", False)
    for i in range(n):
        layer = inv.at(f"{prefix}.layers.{i}", i, "norms")
        kv, head_dim = geo[i]
        shared = i >= shared_from
        attention(
            layer.sub("self_attn", "attention"),
            c,
            kv,
            head_dim,
            k_only=k_eq_v and not slides[i],
            q_only=shared,
        )
        inter = c.int("intermediate_size") * (2 if double and shared else 1)
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, inter)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            layer.norm(norm, hidden)
        for norm in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):
            layer.norm(norm, hidden)
        if c.has("num_experts"):  # vLLM: ``getattr(config, "num_experts", None) is not None``
            moe(layer, c)
        if ple:  # the layer's share of the per-layer embeddings, filed with them
            gate = layer.sub("", "embeddings")
            gate.linear("per_layer_input_gate", ple, hidden, shard="replicated")
            gate.linear("per_layer_projection", hidden, ple, shard="replicated")
            gate.norm("post_per_layer_input_norm", hidden)
        layer.tensor("layer_scalar", 1, is_param=False)  # a loaded buffer
    final(inv, c, f"{prefix}.norm", "lm_head", tied_default=True)


def assistant_layers(f: ConfigFields) -> list[Layer]:
    """Gemma-4's MTP assistant: every layer reads the target's KV cache (vLLM 0.33.0
    ``gemma4_mtp.py``: "All assistant decoder layers are KV-shared"; the proposer sets
    their ``kv_sharing_target_layer_name``), so none caches anything."""
    return [NoCacheLayer(index=i) for i in range(f.int("num_hidden_layers"))]


def assistant_weights(inv: Inventory, c: ModelFields) -> None:
    """``Gemma4MTP`` (vLLM 0.33.0 gemma4_mtp.py), all on the last PP stage: per layer a
    Q-only attention (q_proj, o_proj, q_norm of the layer's head size), the gated MLP,
    four norms and ``layer_scalar``; ``pre_projection`` (2 x backbone hidden -> hidden),
    ``post_projection`` (hidden -> backbone), the final norm; the lm_head in the draft's
    own width (tied to its embedding table, which the target's replaces as embedding);
    with ``use_ordered_embeddings`` the centroid projection and its int64 token order."""
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    top = top_fields(c)
    backbone = top.int("backbone_hidden_size", 1536)  # Gemma4AssistantConfig's default
    geo = geometry(c, sliding(c))
    for i in range(n):
        layer = inv.at(f"model.layers.{i}", "last", "norms")
        kv, head_dim = geo[i]
        attention(layer.sub("self_attn", "attention"), c, kv, head_dim, k_only=False, q_only=True)
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            layer.norm(norm, hidden)
        for norm in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):
            layer.norm(norm, hidden)
        layer.tensor("layer_scalar", 1, is_param=False)
    at = inv.at("", "last", "norms")
    fc = at.sub("", "eagle3_fc")  # the draft's projections to and from the target's width
    fc.linear("pre_projection", hidden, 2 * backbone, shard="column")
    fc.linear("post_projection", backbone, hidden, shard="row")
    at.norm("model.norm", hidden)
    at.sub("", "lm_head").vocab("model.embed_tokens", c.int("vocab_size"), hidden)
    if top.flag("use_ordered_embeddings", False):
        masked = at.sub("masked_embedding", "lm_head")
        masked.linear("centroids", top.int("num_centroids", 2048), hidden, shard="replicated")
        masked.tensor("token_ordering", c.int("vocab_size"), fixed="int64", is_param=False)


def top_fields(c: ModelFields) -> ModelFields:
    """The assistant's top-level fields (beside its ``text_config``)."""
    return ModelFields(c.model, c.model.raw_config or c.cfg)


GEMMA4 = Architecture(
    family="gemma4",
    model_types=frozenset({"gemma4", "gemma4_text"}),
    layers=layers,
    weights=weights,
    attention=STYLE,
    ties_embeddings=True,
    nested_types=frozenset({"gemma4"}),
    text_only_note=True,
    # Gemma4TextConfig's defaults (transformers 5.20.2) for the fields a checkpoint may
    # leave out and the cache or weights depend on
    text_defaults=MappingProxyType(
        {
            "vocab_size": 262_144,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 131_072,
            "sliding_window": 512,
            "hidden_size_per_layer_input": 256,
            "vocab_size_per_layer_input": 262_144,
        }
    ),
    # TensorRT-LLM: engines/trtllm_gemma4.py (the V2 manager, every layer at its shape)
)

GEMMA4_ASSISTANT = Architecture(
    family="gemma4",
    model_types=frozenset({"gemma4_assistant"}),
    layers=assistant_layers,
    weights=assistant_weights,
    attention=STYLE,
    ties_embeddings=True,
    nested_types=frozenset({"gemma4_assistant"}),
    text_defaults=GEMMA4.text_defaults,
    unmodelled_engines=frozenset({"trtllm"}),
    unmodelled_reasons=MappingProxyType(
        {
            "trtllm": "TensorRT-LLM's Gemma4ForCausalLM builds no one-model draft (it is no "
            "SpecDecOneEngineForCausalLM), and its transcribed sizing path has no Gemma-4 "
            "assistant draft manager",
        }
    ),
)

ARCHITECTURES = (GEMMA4, GEMMA4_ASSISTANT)
