"""Nemotron-H: Mamba2, attention and MLP/MoE blocks in a ``hybrid_override_pattern``.

Cache: ``M`` Mamba2 layers keep a recurrent state (SSM state in float32 unless
``mamba_ssm_cache_dtype`` says otherwise: vLLM's ``NemotronHForCausalLMConfig``), ``*``
attention layers keep KV, ``-`` (MLP) and ``E`` (MoE) blocks cache nothing. Weights:
vLLM ``nemotron_h.py`` (relu2 MLPs, sigmoid router with a correction bias).
"""

from __future__ import annotations

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import AttentionStyle, attention_weights, final, relu2_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.errors import ConfigError, UnsupportedArchitectureError
from kvbudget.inventory import At, Inventory, ModelFields, Parts
from kvbudget.layers import AttentionLayer, Layer, Mamba2Layer, NoCacheLayer

STYLE = AttentionStyle(head_dim_key="attention_head_dim")


def layers(f: ConfigFields) -> list[Layer]:
    """One layer per pattern character."""
    num_layers = f.int("num_hidden_layers")
    pattern = f.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        raise f.error("hybrid_override_pattern", "required but missing")
    if len(pattern) != num_layers:
        raise f.error(
            "hybrid_override_pattern",
            f"has {len(pattern)} characters but num_hidden_layers is {num_layers}",
        )
    out: list[Layer] = []
    for i, ch in enumerate(pattern):
        if ch == "M":
            out.append(
                Mamba2Layer(
                    index=i,
                    num_heads=f.int("mamba_num_heads"),
                    head_dim=f.int("mamba_head_dim"),
                    n_groups=f.int("n_groups"),
                    ssm_state_size=f.int("ssm_state_size"),
                    conv_kernel=f.int("conv_kernel"),
                )
            )
        elif ch == "*":
            out.append(
                AttentionLayer(
                    index=i,
                    num_kv_heads=f.int("num_key_value_heads"),
                    head_dim=f.head_dim("attention_head_dim"),
                )
            )
        elif ch in "-E":
            out.append(NoCacheLayer(index=i))
        else:
            raise f.error(
                "hybrid_override_pattern",
                f"character {i} is {ch!r}; expected M (Mamba2), * (attention), - (MLP) or E (MoE)",
            )
    return out


def mamba2(at: At, c: ModelFields) -> None:
    """A Mamba2 mixer: in_proj [z, x, B, C, dt], conv over [x, B, C], per-head vectors."""
    heads, head_dim = c.int("mamba_num_heads"), c.int("mamba_head_dim")
    groups, state = c.int("n_groups"), c.int("ssm_state_size")
    use_bias = c.flag("use_bias", False)
    xbc: Parts = ((heads, head_dim), (groups, state), (groups, state))
    in_proj = ((heads, head_dim), *xbc, (heads, 1))
    at.linear("in_proj", in_proj, c.int("hidden_size"), shard="column", bias=use_bias)
    at.tensor("conv1d", xbc, c.int("conv_kernel"), shard="column")
    if c.flag("use_conv_bias", True):
        at.tensor("conv1d.bias", xbc, shard="column")
    for vector in ("dt_bias", "A_log", "D"):
        at.tensor(vector, ((heads, 1),), shard="column")
    at.tensor("norm", ((heads, head_dim),), shard="column")
    at.linear("out_proj", c.int("hidden_size"), ((heads, head_dim),), shard="row", bias=use_bias)


def moe(mixer: At, c: ModelFields) -> None:
    """A Nemotron-H ``E`` block: sigmoid router with correction bias, relu2 experts."""
    if c.cfg.get("moe_latent_size") is not None:
        raise UnsupportedArchitectureError(
            f"{c.model.name}: Nemotron-H MoE layers with a latent projection are not modelled",
            source=c.model.source,
            field="moe_latent_size",
        )
    hidden = c.int("hidden_size")
    experts = c.int("n_routed_experts")
    router = mixer.sub("gate", "routers")
    router.tensor("", experts, hidden)
    router.tensor("e_score_correction_bias", experts, fixed="fp32")
    inter = c.int("moe_intermediate_size")
    relu2_mlp(mixer.sub("experts", "routed_experts"), hidden, inter, bias=False, copies=experts)
    shared = c.int("moe_shared_expert_intermediate_size")
    relu2_mlp(
        mixer.sub("shared_experts", "shared_experts"),
        hidden,
        shared,
        bias=c.flag("mlp_bias", False),
    )


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, the pattern's blocks, the final norm and lm_head."""
    hidden = c.int("hidden_size")
    inv.at("backbone", "first", "embeddings").vocab("embeddings", c.int("vocab_size"), hidden)
    for i, kind in enumerate(str(c.cfg.get("hybrid_override_pattern", ""))):
        layer = inv.at(f"backbone.layers.{i}", i, "norms")
        layer.norm("norm", hidden)
        if kind == "M":
            mamba2(layer.sub("mixer", "recurrent"), c)
        elif kind == "*":
            attention_weights(layer.sub("mixer", "attention"), c, STYLE, in_features=hidden)
        elif kind == "-":
            mlp = layer.sub("mixer", "dense_mlp")
            relu2_mlp(mlp, hidden, c.int("intermediate_size"), bias=c.flag("mlp_bias", False))
        elif kind == "E":
            moe(layer.sub("mixer"), c)
        else:
            raise ConfigError(
                f"character {i} is {kind!r}; expected M, *, - or E",
                source=c.model.source,
                field="hybrid_override_pattern",
            )
    final(inv, c, "backbone.norm_f")


NEMOTRON_H = Architecture(
    family="nemotron_h",
    model_types=frozenset({"nemotron_h"}),
    layers=layers,
    weights=weights,
    attention=STYLE,
    ssm_state_dtype="float32",
)

ARCHITECTURES = (NEMOTRON_H,)
