"""Step-3.5 (``step3p5``): GQA with per-layer query heads, sliding and full layers, MoE, MTP.

Config, as vLLM 0.33.0 reads it: ``transformers_utils/config.py`` maps ``step3p5`` to
transformers 5.20.2's ``Step3p7TextConfig`` (``models/step3p7/configuration_step3p7.py``),
whose ``__post_init__`` resolves the legacy hub fields:

* ``layer_types`` (``full_attention`` / ``sliding_attention``; every layer full when
  absent) and ``mlp_layer_types`` (``sparse`` / ``dense``; from ``moe_layers_enum``,
  else layers 3 onward sparse); lists padded with ``num_nextn_predict_layers`` trailing
  entries are split into ``mtp_layer_types`` / ``mtp_mlp_layer_types``;
* a sliding layer's query heads: ``num_sliding_attention_heads``, else
  ``attention_other_setting.num_attention_heads``, else ``num_attention_heads``;
* aliases (``attribute_map``): ``num_attention_groups`` is ``num_key_value_heads``,
  ``moe_num_experts`` is ``n_routed_experts``, ``share_expert_dims`` is
  ``share_expert_dim``, ``num_mtp_layers`` is ``num_nextn_predict_layers``.

Cache (vLLM 0.33.0 ``model_executor/models/step3p5.py``): every decoder layer is one
``Attention`` of ``num_attention_groups`` KV heads x ``head_dim`` (the same on every
layer: ``Step3p5DecoderLayer`` passes the global ``num_attention_groups`` and
``head_dim``; only the query heads differ per layer, ``_get_num_attention_heads``); a
``sliding_attention`` layer passes ``per_layer_sliding_window=sliding_window``
(``cache_config.sliding_window`` is cleared). The ``num_nextn_predict_layers`` MTP
layers (``step3p5_mtp.py`` ``Step3p5AMultiTokenPredictorLayer``, indexed from
``num_hidden_layers``) each wrap a full ``Step3p5DecoderLayer``, so each keeps its own
KV of its ``mtp_layer_types`` entry (``_get_layer_type``); vLLM serves them with
``--speculative-config method mtp`` (``config/speculative.py``: ``step3p5`` ->
``step3p5_mtp``, ``n_predict = num_nextn_predict_layers``).

Weights (vLLM's modules, checkpoint names): q/k/v of the layer's query heads and the
shared KV heads (biased with ``attention_bias``), o, GemmaRMSNorm ``q_norm`` /
``k_norm`` of ``head_dim``, the head-wise gate ``g_proj`` (hidden -> query heads) with
``use_head_wise_attn_gate``, two norms; a dense layer's ``mlp`` (``intermediate_size``);
a sparse layer's ``moe``: ``gate`` (``GateLinear``, float32), ``router_bias`` (float32),
``moe_num_experts`` experts of ``moe_intermediate_size`` and the ``share_expert``
(``share_expert_dim``); embeddings, final norm and an untied ``lm_head``. An MTP layer
adds ``enorm``, ``hnorm``, ``eh_proj`` (2H -> H, a plain ``nn.Linear``) and its
``shared_head`` (norm and its own vocab head: ``Step3p5MTP.has_own_lm_head``); its
embedding is the target's (the proposer shares it at PP 1). Routed experts are named as
the packed 3D checkpoint format stores them (``moe.gate_proj`` ``[experts, rows, cols]``);
a per-expert checkpoint (``moe.experts.E.gate_proj.weight_packed``, LLM Compressor's) does
not match those names, so its header bytes are held whole (``other``) rather than split.

Refused, naming the field (vLLM 0.33.0 step3p5.py would not build them): an
``att_impl_type`` other than ``GQA``, one KV head (``load_weights``: "Only support
GQA"), ``use_moe_router_bias`` or ``need_fp32_gate`` not true (asserted),
``tie_word_embeddings`` (vLLM builds its own ``lm_head`` and never ties it), an
``attention_other_setting`` whose KV heads or head size differ from the global ones
(vLLM reads only its query heads), sliding layers without ``sliding_window``, MTP layers
whose attention type no list gives, a ``per_layer_config`` override other than
``num_attention_heads``, a model without an MoE layer (asserted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import final, gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer

ATTENTION_TYPES = ("full_attention", "sliding_attention")
MLP_TYPES = ("dense", "sparse")
FIRST_SPARSE = 3  # Step3p7TextConfig.__post_init__: "all layers from index 3 onward being MoE"


@dataclass(frozen=True, kw_only=True)
class LayerPlan:
    """One decoder (or MTP) layer as vLLM builds it: query heads, window, MLP kind."""

    index: int
    num_heads: int
    sliding: bool
    sparse: bool


def _aliased(f: ConfigFields, names: tuple[str, ...], default: int, minimum: int = 1) -> int:
    """The value of the first present alias (``attribute_map``); aliases that disagree
    are an error naming both."""
    given = {name: f.int(name, minimum=minimum) for name in names if f.has(name)}
    if len(set(given.values())) > 1:
        shown = ", ".join(f"{k}={v}" for k, v in given.items())
        raise f.error(names[0], f"aliases disagree ({shown}); give one of them")
    return next(iter(given.values()), default)


def kv_heads(f: ConfigFields) -> int:
    """``num_attention_groups`` (= ``num_key_value_heads``; Step3p7TextConfig default 8)."""
    kv = _aliased(f, ("num_attention_groups", "num_key_value_heads"), 8)
    if kv == 1:
        raise f.error(
            "num_attention_groups", "1 KV head: vLLM 0.33.0 step3p5.py supports GQA only (> 1)"
        )
    return kv


def num_mtp_layers(f: ConfigFields) -> int:
    """``num_nextn_predict_layers`` (alias ``num_mtp_layers``; default 0)."""
    return _aliased(f, ("num_nextn_predict_layers", "num_mtp_layers"), 0, minimum=0)


def _split(
    f: ConfigFields, key: str, mtp_key: str, n: int, m: int, known: tuple[str, ...]
) -> tuple[list[str], list[str] | None]:
    """A per-layer list of ``n`` entries, or ``n + m`` (its trailing ``m`` the MTP
    layers', as transformers splits them), and the MTP entries (``mtp_key`` when the list
    is not padded; None when neither gives them)."""
    value = f.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise f.error(key, f"expected a list of strings, got {value!r}")
    for i, entry in enumerate(value):
        if entry not in known:
            raise f.error(key, f"entry {i} is {entry!r}; expected one of {list(known)}")
    if m and len(value) == n + m:
        return value[:n], value[n:]
    if len(value) != n:
        padded = f" or {n + m} (with the MTP layers')" if m else ""
        raise f.error(key, f"has {len(value)} entries; expected {n}{padded}")
    if not m or not f.has(mtp_key):  # without MTP layers vLLM reads no mtp_* list
        return value, None
    mtp = f.str_list(mtp_key, m)
    for i, entry in enumerate(mtp):
        if entry not in known:
            raise f.error(mtp_key, f"entry {i} is {entry!r}; expected one of {list(known)}")
    return value, mtp


def attention_types(f: ConfigFields) -> tuple[list[str], list[str]]:
    """The attention type of each decoder layer and each MTP layer."""
    n, m = f.int("num_hidden_layers"), num_mtp_layers(f)
    if not f.has("layer_types"):  # transformers: every layer (and MTP layer) full
        return ["full_attention"] * n, ["full_attention"] * m
    types, mtp = _split(f, "layer_types", "mtp_layer_types", n, m, ATTENTION_TYPES)
    if mtp is None and m:
        raise f.error(
            "layer_types",
            f"has {n} entries and no mtp_layer_types gives the {m} MTP layers' types "
            "(vLLM 0.33.0 step3p5.py _get_layer_type reads them there); pad layer_types "
            "or add mtp_layer_types",
        )
    return types, mtp or []


def mlp_types(f: ConfigFields) -> tuple[list[str], list[str]]:
    """``sparse`` / ``dense`` of each decoder layer and each MTP layer (vLLM
    ``_is_moe_layer``: an MTP layer no list covers is dense)."""
    n, m = f.int("num_hidden_layers"), num_mtp_layers(f)
    if f.has("mlp_layer_types"):
        types, mtp = _split(f, "mlp_layer_types", "mtp_mlp_layer_types", n, m, MLP_TYPES)
        return types, mtp if mtp is not None else ["dense"] * m
    enum = f.get("moe_layers_enum")
    if enum is None:
        sparse = set(range(FIRST_SPARSE, n))
    else:
        items = enum.split(",") if isinstance(enum, str) else enum
        entries = [str(i).strip() for i in items] if isinstance(items, list) else None
        if entries is None or not all(e.isdigit() for e in entries if e):
            raise f.error("moe_layers_enum", f"expected layer indices, got {enum!r}")
        sparse = {int(e) for e in entries if e}
    kinds = ["sparse" if i in sparse else "dense" for i in range(n + m)]
    return kinds[:n], kinds[n:]


def _sliding_heads(f: ConfigFields, heads: int, kv: int, head_dim: int) -> int:
    """A sliding layer's query heads; an ``attention_other_setting`` vLLM would read
    wrongly (other KV heads or head size) is refused."""
    if f.has("num_sliding_attention_heads"):
        return f.int("num_sliding_attention_heads")
    other = f.get("attention_other_setting")
    if other is None:
        return heads
    if not isinstance(other, Mapping):
        raise f.error("attention_other_setting", f"expected a mapping, got {other!r}")
    sub = ConfigFields(other, f.source, f"{f.prefix}attention_other_setting.")
    for key, value in (("num_attention_groups", kv), ("head_dim", head_dim)):
        if sub.has(key) and sub.int(key) != value:
            raise sub.error(
                key,
                f"{sub.int(key)} differs from the model's {value}: vLLM 0.33.0 step3p5.py "
                "builds every layer with the global num_attention_groups and head_dim",
            )
    return sub.int("num_attention_heads", heads)


def _full_heads(f: ConfigFields, n: int, heads: int) -> dict[int, int]:
    """``per_layer_config`` overrides of ``num_attention_heads`` (vLLM reads them on
    full layers of a heterogeneous config)."""
    given = f.get("per_layer_config")
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise f.error("per_layer_config", f"expected a mapping of layer overrides, got {given!r}")
    out: dict[int, int] = {}
    for key, over in given.items():
        if not (str(key).isdigit() and int(key) < n and isinstance(over, Mapping)):
            raise f.error("per_layer_config", f"entry {key!r} is not a layer's overrides")
        extra = sorted(set(over) - {"num_attention_heads"})
        if extra:
            raise f.error(
                f"per_layer_config.{key}",
                f"overrides {', '.join(extra)}; only num_attention_heads is modelled",
            )
        sub = ConfigFields(over, f.source, f"{f.prefix}per_layer_config.{key}.")
        out[int(key)] = sub.int("num_attention_heads", heads)
    return out


def plan_layers(f: ConfigFields) -> tuple[list[LayerPlan], list[LayerPlan]]:
    """Every decoder layer and every MTP layer, as vLLM 0.33.0 builds them."""
    _check_supported(f)
    n = f.int("num_hidden_layers")
    heads, kv, head_dim = f.int("num_attention_heads"), kv_heads(f), f.head_dim()
    attn, mtp_attn = attention_types(f)
    mlp, mtp_mlp = mlp_types(f)
    sliding = _sliding_heads(f, heads, kv, head_dim)
    full = _full_heads(f, n, heads)
    if "sliding_attention" in attn + mtp_attn and not f.has("sliding_window"):
        raise f.error("sliding_window", "required: layer_types has sliding_attention layers")

    def one(i: int, a: str, kind: str) -> LayerPlan:
        is_sliding = a == "sliding_attention"
        h = sliding if is_sliding else full.get(i, heads)
        if h % kv:
            raise f.error("num_attention_groups", f"{kv} does not divide layer {i}'s {h} heads")
        return LayerPlan(index=i, num_heads=h, sliding=is_sliding, sparse=kind == "sparse")

    decoder = [one(i, a, k) for i, (a, k) in enumerate(zip(attn, mlp, strict=True))]
    mtp = [one(n + j, a, k) for j, (a, k) in enumerate(zip(mtp_attn, mtp_mlp, strict=True))]
    if not any(p.sparse for p in decoder):  # Step3p5ForCausalLM: "No MoE layers found"
        key = "mlp_layer_types" if f.has("mlp_layer_types") else "moe_layers_enum"
        raise f.error(key, "names no MoE layer: vLLM 0.33.0 Step3p5ForCausalLM asserts one")
    if (full or sliding_decoder(decoder)) and not all(p.sliding for p in mtp):
        # transformers builds per_layer_config (heterogeneous) from the sliding layers;
        # vLLM reads a full layer's heads from per_layer_config[i], which has no MTP entries
        raise f.error(
            "mtp_layer_types",
            "a full-attention MTP layer beside sliding layers: vLLM 0.33.0 step3p5.py "
            "_get_num_attention_heads indexes per_layer_config past the decoder layers "
            "(IndexError); plan with num_nextn_predict_layers 0",
        )
    return decoder, mtp


def sliding_decoder(plans: list[LayerPlan]) -> bool:
    """Whether any of ``plans`` slides."""
    return any(p.sliding for p in plans)


def _check_supported(f: ConfigFields) -> None:
    """The asserts and ValueErrors of vLLM 0.33.0 step3p5.py, as config errors."""
    if f.get("att_impl_type", "GQA") != "GQA":
        raise f.error(
            "att_impl_type", f"{f.get('att_impl_type')!r}: vLLM 0.33.0 step3p5.py supports GQA"
        )
    for key in ("use_moe_router_bias", "need_fp32_gate"):
        if not f.flag(key, False):
            raise f.error(key, "must be true: vLLM 0.33.0 step3p5.py FusedMoEBlock asserts it")
    if f.flag("tie_word_embeddings", False):
        raise f.error(
            "tie_word_embeddings",
            "true: vLLM 0.33.0 Step3p5ForCausalLM builds its own lm_head and never ties it",
        )


def _cache_layers(f: ConfigFields, plans: list[LayerPlan]) -> list[Layer]:
    kv, head_dim = kv_heads(f), f.head_dim()
    window = f.int("sliding_window") if any(p.sliding for p in plans) else None
    return [
        AttentionLayer(
            index=p.index,
            num_kv_heads=kv,
            head_dim=head_dim,
            sliding_window=window if p.sliding else None,
        )
        for p in plans
    ]


def layers(f: ConfigFields) -> list[Layer]:
    """The decoder's attention layers (sliding ones over ``sliding_window``)."""
    return _cache_layers(f, plan_layers(f)[0])


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """The ``num_nextn_predict_layers`` MTP layers' attention, indexed from ``start``."""
    decoder, mtp = plan_layers(f)
    if start != len(decoder):
        raise f.error("num_hidden_layers", f"MTP layers start at {len(decoder)}, not {start}")
    return tuple(_cache_layers(f, mtp))


def attention_heads(f: ConfigFields) -> list[int]:
    """The query heads of every decoder and MTP layer (TP must divide each)."""
    decoder, mtp = plan_layers(f)
    return [p.num_heads for p in decoder + mtp]


# --------------------------------------------------------------------------- weights


def _attention(at: At, c: ModelFields, heads: int) -> None:
    """``Step3p5Attention``: q/k/v (vLLM's qkv_proj), o, q/k norms, the head-wise gate."""
    hidden, kv, head_dim = c.int("hidden_size"), kv_heads(c), c.head_dim()
    bias = c.flag("attention_bias", False)
    at.linear("q_proj", ((heads, head_dim),), hidden, shard="column", bias=bias)
    for proj in ("k_proj", "v_proj"):
        at.linear(proj, ((kv, head_dim),), hidden, shard="column", bias=bias)
    at.linear("o_proj", hidden, ((heads, head_dim),), shard="row")
    at.norm("q_norm", head_dim)
    at.norm("k_norm", head_dim)
    if c.flag("use_head_wise_attn_gate", False):
        at.linear("g_proj", ((heads, 1),), hidden, shard="column")


def _moe(layer: At, c: ModelFields) -> None:
    """``FusedMoEBlock``: fp32 router and bias, routed experts, the shared expert."""
    hidden = c.int("hidden_size")
    experts = _aliased(c, ("moe_num_experts", "n_routed_experts", "num_local_experts"), 288)
    inter = c.int("moe_intermediate_size")
    router = layer.sub("moe", "routers")
    router.tensor("gate", experts, hidden, fixed="fp32")  # GateLinear(params_dtype=float32)
    router.tensor("router_bias", experts, fixed="fp32")
    gated_mlp(layer.sub("moe", "routed_experts"), hidden, inter, copies=experts)
    shared = _aliased(c, ("share_expert_dim", "share_expert_dims"), 1280)
    gated_mlp(layer.sub("share_expert", "shared_experts"), hidden, shared)


def _decoder_layer(layer: At, c: ModelFields, p: LayerPlan) -> None:
    hidden = c.int("hidden_size")
    _attention(layer.sub("self_attn", "attention"), c, p.num_heads)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    if p.sparse:
        _moe(layer, c)
    else:
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, decoder layers, final norm and lm_head, then the MTP layers."""
    decoder, mtp = plan_layers(c)
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", vocab, hidden)
    for p in decoder:
        _decoder_layer(inv.at(f"model.layers.{p.index}", p.index, "norms"), c, p)
    final(inv, c, "model.norm")
    for p in mtp:
        own = Inventory()
        layer = own.at(f"model.layers.{p.index}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        layer.linear("eh_proj", hidden, 2 * hidden, shard="replicated", quantizable=False)
        _decoder_layer(layer, c, p)
        layer.norm("shared_head.norm", hidden)
        layer.sub("", "lm_head").vocab("shared_head.output", vocab, hidden)
        inv.extend_as_mtp(own)


STEP3P5 = Architecture(
    family="step3p5",
    model_types=frozenset({"step3p5"}),
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
    # Step3p7TextConfig's defaults (transformers 5.20.2) for the fields a checkpoint may
    # leave out and the cache or weights depend on (aliased fields are read above)
    text_defaults=MappingProxyType(
        {
            "vocab_size": 128_815,
            "hidden_size": 4096,
            "intermediate_size": 11_264,
            "num_hidden_layers": 45,
            "num_attention_heads": 64,
            "head_dim": 128,
            "max_position_embeddings": 128_000,
            "moe_intermediate_size": 1280,
        }
    ),
    # SGLang 0.5.23 plans it with limits (kvbudget.engines.sglang_step3p5)
    unmodelled_engines=frozenset({"trtllm"}),
)

ARCHITECTURES = (STEP3P5,)
