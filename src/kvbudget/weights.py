"""Weights of a model: exact parameter counts and the bytes one rank holds.

Two questions, two functions:

* :func:`count_params` - how many parameters the checkpoint stores, by component
  (embeddings, lm_head, attention, recurrent mixers, dense MLP, routed and shared
  experts, routers, norms, EAGLE3 ``fc``, MTP layers, vision tower);
* :func:`weights_bytes` - how many bytes of weights **one rank** holds when an engine
  shards the model over ``tp`` tensor-parallel ranks and ``pp`` pipeline stages, in the
  checkpoint's storage format.

Both read one inventory of weight tensors built from the config, so they always agree.

Sharding (vLLM's layers; SGLang and TensorRT-LLM shard the same way):

* column-parallel linears (q/k/v, gate/up, MLA ``q_b_proj``/``kv_b_proj``, Mamba and
  Gated DeltaNet input projections and convs) split their output rows by head:
  ``ceil(heads / tp)`` heads per rank, a head replicated when there are fewer heads than
  ranks (KV heads, Mamba groups); their biases split the same way;
* row-parallel linears (o_proj, down_proj, out_proj) split their input columns the same
  way; their biases are replicated;
* routed experts split each expert's intermediate size: ``ceil(moe_intermediate / tp)``
  (tensor parallel); with expert parallelism (``ep > 1``) each rank holds
  ``ceil(num_experts / ep)`` whole experts instead (vLLM's ``FusedMoE`` with
  ``enable_expert_parallel``, SGLang's ``--ep-size``);
* with data-parallel attention (``attention_tp < tp``) the attention weights are split
  over ``attention_tp`` ranks only (each attention-DP group holds a full copy);
* vocab-parallel embeddings and lm_head hold ``ceil(pad64(vocab) / tp)`` rows per rank,
  where ``pad64`` rounds the vocabulary up to a multiple of 64 (vLLM's
  ``DEFAULT_VOCAB_PADDING_SIZE``; every preset's vocabulary already is one);
* replicated on every rank: norms, routers (and DeepSeek's ``e_score_correction_bias``),
  MLA ``q_a_proj`` and ``kv_a_proj_with_mqa`` (vLLM fuses them into ``fused_qkv_a_proj``
  with ``disable_tp=True``, ``vllm/model_executor/models/deepseek_v2.py``), the EAGLE3
  ``fc`` (a ``ReplicatedLinear``), the MTP ``eh_proj`` (a plain ``nn.Linear`` in vLLM's
  ``deepseek_mtp.py``), and the vision tower's embeddings, norms and projector.

Pipeline parallelism: embeddings (and a vision tower) on stage 0; the final norm and
lm_head on the last stage; decoder layers per :func:`kvbudget.cost.pp_stage_layers`; MTP
layers on the last stage. With tied embeddings and ``pp > 1`` the last stage holds its
own copy of the embedding as the lm_head (vLLM builds ``embed_tokens`` on the last rank
to tie it). An EAGLE3 head lives wholly on the last stage.

Storage (``config["quantization_config"]``):

==========================  ===============================================================
``fp8`` + block ``[b0,b1]``   quantized linears: 1 byte per weight + one float32 scale per
                              ``b0 x b1`` block (DeepSeek-V3 ``weight_scale_inv``)
``fp8`` without blocks        1 byte per weight + one float32 scale per tensor
``mxfp4`` (gpt-oss)           routed-expert weights only: 4 bits per value + one 1-byte
                              e8m0 scale per 32 values along the input dimension
``modelopt`` NVFP4            quantized linears: 4 bits per value + one fp8 scale per 16
                              values + two float32 per-tensor scales (weight_scale_2,
                              input_scale)
none                          every weight in ``weights_dtype``
==========================  ===============================================================

What a quantization never converts, in any of these checkpoints: embeddings, lm_head,
norms, biases, routers, convolutions, recurrent parameters (``dt_bias``, ``A_log``,
``D``), attention sinks, the MTP ``eh_proj`` and the vision tower; plus every module
matched by the config's ``modules_to_not_convert`` / ``ignored_layers`` / ``ignore`` /
``exclude_modules`` globs. Those stay in ``weights_dtype``.

Not modelled: copies an engine makes after loading (vLLM's MLA keeps bf16 copies of
``kv_b_proj`` as ``W_UK_T``/``W_UV``), kernel-specific padding of quantized expert
weights, expert parallelism, and vision encoders run data-parallel.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from kvbudget._validate import require_int, require_model
from kvbudget.cost import pp_stage_layers
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, InvalidArgumentError, UnsupportedArchitectureError
from kvbudget.layers import per_rank
from kvbudget.model import MAX_CONFIG_COUNT, MLA_MODEL_TYPES, QWEN35_MODEL_TYPES, ModelSpec

__all__ = ["ParamCounts", "WeightsBytes", "count_params", "weights_bytes"]

Component = Literal[
    "embeddings",
    "lm_head",
    "attention",
    "recurrent",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "routers",
    "norms",
    "eagle3_fc",
    "mtp",
    "vision",
]
Shard = Literal["replicated", "column", "row", "vocab"]
# Where a tensor lives under pipeline parallelism: the first stage, the last stage, the
# MTP layers (last stage, only when asked for), or the stage of decoder layer ``int``.
Place = Literal["first", "last", "mtp"] | int
Parts = tuple[tuple[int, int], ...]  # (number of heads, values per head) along one dim

_VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE
_FIXED_BYTES = {"fp32": 4, "int64": 8}
_EXCLUDE_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    """Parameters the checkpoint stores, by component; exact integers, immutable.

    Every learned tensor is counted once: ``lm_head`` is 0 when the embeddings are tied;
    an EAGLE3 head counts no embeddings (engines share the target's, see
    :func:`count_params`); MTP layers count their own parts only (their embeddings and
    head are the main model's). Index maps (EAGLE3 ``d2t``) are not parameters.

    ``attention`` includes q/k norms, MLA latent norms, biases and sinks; ``recurrent``
    the Mamba2 / Gated DeltaNet mixers (their gated norms included); ``routers`` the
    router weights and biases, DeepSeek's ``e_score_correction_bias`` and Qwen3-Next's
    shared-expert gate; ``norms`` the per-layer and final norms; ``mtp`` whole MTP
    layers; ``vision`` the vision tower and multimodal projector.
    """

    embeddings: int = 0
    lm_head: int = 0
    attention: int = 0
    recurrent: int = 0
    dense_mlp: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    routers: int = 0
    norms: int = 0
    eagle3_fc: int = 0
    mtp: int = 0
    vision: int = 0

    @property
    def total(self) -> int:
        """Every parameter of the checkpoint, MTP layers and vision tower included."""
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def language_model(self) -> int:
        """The parameters of the model proper: ``total`` less MTP layers and vision tower."""
        return self.total - self.mtp - self.vision


@dataclass(frozen=True, kw_only=True)
class WeightsBytes:
    """Bytes of weights held by one rank of one pipeline stage, by component; immutable.

    Components are those of :class:`ParamCounts` (``lm_head_bytes`` also holds an
    EAGLE3 head's int64 ``draft_id_to_target_id`` map). ``total_bytes`` is their sum.
    ``weights_dtype`` is the storage of every tensor the checkpoint does not quantize;
    ``quantization`` names the checkpoint format (``"none"``, ``"fp8"``,
    ``"fp8-block128x128"``, ``"mxfp4"``, ``"nvfp4"``).
    """

    tp: int
    pp: int
    pp_stage: int
    include_mtp: bool
    weights_dtype: str
    quantization: str
    embeddings_bytes: int = 0
    lm_head_bytes: int = 0
    attention_bytes: int = 0
    recurrent_bytes: int = 0
    dense_mlp_bytes: int = 0
    routed_experts_bytes: int = 0
    shared_experts_bytes: int = 0
    routers_bytes: int = 0
    norms_bytes: int = 0
    eagle3_fc_bytes: int = 0
    mtp_bytes: int = 0
    vision_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """All weight bytes on this rank."""
        return sum(getattr(self, f.name) for f in fields(self) if f.name.endswith("_bytes"))


# --------------------------------------------------------------------------- inventory


@dataclass(frozen=True, kw_only=True)
class _Weight:
    """One checkpoint tensor (or ``copies`` identical ones, e.g. experts): ``rows x cols``.

    ``rows`` are output features (vocabulary rows, channels, a vector's length), ``cols``
    input features (1 for a vector). ``out_parts`` / ``in_parts`` give each dim as heads
    of a size, which is how TP splits it (``column`` splits rows, ``row`` columns).
    ``linear`` marks a linear-layer weight that checkpoint quantization may convert;
    ``expert`` a routed-expert weight (kept when MTP layers refile it under ``mtp``).
    ``fixed`` pins the storage (``fp32``, ``int64``) regardless of the model dtype.
    """

    name: str
    component: Component
    place: Place
    out_parts: Parts
    in_parts: Parts = ((1, 1),)
    copies: int = 1
    shard: Shard = "replicated"
    linear: bool = False
    fixed: str | None = None
    is_param: bool = True
    expert: bool = False

    @property
    def rows(self) -> int:
        return sum(n * size for n, size in self.out_parts)

    @property
    def cols(self) -> int:
        return sum(n * size for n, size in self.in_parts)

    @property
    def num_params(self) -> int:
        return self.copies * self.rows * self.cols if self.is_param else 0

    def rank_shape(self, tp: int) -> tuple[int, int]:
        """``(rows, cols)`` of one copy on one of ``tp`` ranks."""
        if self.shard == "column":
            return sum(per_rank(n, tp) * size for n, size in self.out_parts), self.cols
        if self.shard == "row":
            return self.rows, sum(per_rank(n, tp) * size for n, size in self.in_parts)
        if self.shard == "vocab":
            padded = -(-self.rows // _VOCAB_PADDING) * _VOCAB_PADDING
            return -(-padded // tp), self.cols
        return self.rows, self.cols


def _parts(size: int | Parts) -> Parts:
    return ((size, 1),) if isinstance(size, int) else size


class _Inventory:
    """The tensors of one model, collected by the architecture builders below."""

    def __init__(self) -> None:
        self.weights: list[_Weight] = []

    def at(self, prefix: str, place: Place, component: Component) -> _At:
        """A scope adding tensors named ``prefix.<name>``, at ``place``, as ``component``."""
        return _At(inv=self, prefix=prefix, place=place, component=component)

    def extend_as_mtp(self, other: _Inventory) -> None:
        """Add ``other``'s tensors as MTP weights (component and place ``mtp``)."""
        self.weights += [replace(w, component="mtp", place="mtp") for w in other.weights]


@dataclass(frozen=True, kw_only=True)
class _At:
    """Adds tensors under one module prefix, at one place, filed under one component."""

    inv: _Inventory
    prefix: str
    place: Place
    component: Component

    def sub(self, name: str, component: Component | None = None) -> _At:
        """The scope of child module ``name`` (optionally filed under ``component``)."""
        return replace(self, prefix=self._name(name), component=component or self.component)

    def _name(self, name: str) -> str:
        return ".".join(part for part in (self.prefix, name) if part)

    def tensor(self, name: str, out: int | Parts, inp: int | Parts = 1, **kw: Any) -> None:
        """One tensor of ``out x inp`` (``inp`` 1 for a vector); empty ones are skipped."""
        weight = _Weight(
            name=self._name(name),
            component=self.component,
            place=self.place,
            out_parts=_parts(out),
            in_parts=_parts(inp),
            expert=self.component == "routed_experts",
            **kw,
        )
        if weight.rows * weight.cols:
            self.inv.weights.append(weight)

    def norm(self, name: str, size: int, *, bias: bool = False) -> None:
        """A replicated norm weight (and bias, for a LayerNorm)."""
        self.tensor(name, size)
        if bias:
            self.tensor(f"{name}.bias", size)

    def linear(
        self,
        name: str,
        out: int | Parts,
        inp: int | Parts,
        *,
        shard: Shard,
        bias: bool = False,
        copies: int = 1,
        quantizable: bool = True,
    ) -> None:
        """A linear layer; a column-parallel bias is split like the rows, others replicated."""
        self.tensor(name, out, inp, copies=copies, shard=shard, linear=quantizable)
        if bias:
            bias_shard: Shard = "column" if shard == "column" else "replicated"
            self.tensor(f"{name}.bias", out, copies=copies, shard=bias_shard)

    def vocab(self, name: str, rows: int, hidden: int) -> None:
        """A vocab-parallel embedding or lm_head."""
        self.tensor(name, rows, hidden, shard="vocab")


# --------------------------------------------------------------------------- config access


class _Cfg:
    """Typed reads of the raw config; failures are ConfigErrors naming the field."""

    def __init__(
        self, model: ModelSpec, cfg: Mapping[str, Any] | None = None, prefix: str = ""
    ) -> None:
        self.model = model
        self.cfg = model.config if cfg is None else cfg
        self.prefix = prefix

    def _error(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, source=self.model.source, field=self.prefix + key)

    def num(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is None:
                raise self._error(key, "required to count the weights but missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._error(key, f"expected an integer >= {minimum}, got {value!r}")
        if value > MAX_CONFIG_COUNT:
            raise self._error(
                key,
                f"{value} is more than any real model has (kvbudget reads counts up to "
                f"{MAX_CONFIG_COUNT:,})",
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._error(key, f"expected true or false, got {value!r}")
        return value

    def head_dim(self, key: str = "head_dim") -> int:
        if self.cfg.get(key) is not None:
            return self.num(key)
        return self.num("hidden_size") // self.num("num_attention_heads")


# --------------------------------------------------------------------------- architectures

_LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "minimax_m2"})
_GEMMA = frozenset({"gemma2", "gemma3", "gemma3_text"})
_MLA = MLA_MODEL_TYPES
_QWEN35 = QWEN35_MODEL_TYPES  # the model reader's sets: one list per family
_QK_NORM = frozenset({"qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text"}) | _QWEN35


def _attention(at: _At, c: _Cfg, *, in_features: int) -> None:
    """Softmax attention of the Llama family: q/k/v/o, optional biases, q/k norms, sinks."""
    model_type = c.model.model_type
    heads = c.num("num_attention_heads")
    kv_heads = c.num("num_key_value_heads", heads)
    head_dim = c.head_dim("attention_head_dim" if model_type == "nemotron_h" else "head_dim")
    bias_qkv = model_type == "qwen2" or c.flag("attention_bias", False)
    bias_o = model_type != "qwen2" and c.flag("attention_bias", False)
    gated = model_type == "qwen3_next" or model_type in _QWEN35
    q_size = 2 * head_dim if gated else head_dim  # gated query
    at.linear("q_proj", ((heads, q_size),), in_features, shard="column", bias=bias_qkv)
    for proj in ("k_proj", "v_proj"):
        at.linear(proj, ((kv_heads, head_dim),), in_features, shard="column", bias=bias_qkv)
    at.linear("o_proj", c.num("hidden_size"), ((heads, head_dim),), shard="row", bias=bias_o)
    if model_type in _QK_NORM:
        at.norm("q_norm", head_dim)
        at.norm("k_norm", head_dim)
    if model_type == "minimax_m2":  # q/k norms over the whole projection (per layer)
        at.tensor("q_norm", ((heads, head_dim),), shard="column")
        at.tensor("k_norm", ((kv_heads, head_dim),), shard="column")
    if model_type == "gpt_oss":
        at.tensor("sinks", ((heads, 1),), shard="column")


def _gated_mlp(at: _At, hidden: int, inter: int, *, copies: int = 1, bias: bool = False) -> None:
    """gate_proj and up_proj (column-parallel), down_proj (row-parallel)."""
    for proj in ("gate_proj", "up_proj"):
        at.linear(proj, inter, hidden, shard="column", bias=bias, copies=copies)
    at.linear("down_proj", hidden, inter, shard="row", bias=bias, copies=copies)


def _relu2_mlp(at: _At, hidden: int, inter: int, *, bias: bool, copies: int = 1) -> None:
    """Nemotron's ungated MLP: up_proj (column-parallel), down_proj (row-parallel)."""
    at.linear("up_proj", inter, hidden, shard="column", bias=bias, copies=copies)
    at.linear("down_proj", hidden, inter, shard="row", bias=bias, copies=copies)


def _tied(c: _Cfg) -> bool:
    """``tie_word_embeddings``; when absent, transformers' per-model default (Gemma ties)."""
    return c.flag("tie_word_embeddings", c.model.model_type in _GEMMA)


def _final(inv: _Inventory, c: _Cfg, norm: str, head: str = "lm_head") -> None:
    """The final norm and (unless tied) the lm_head, on the last stage."""
    inv.at(norm, "last", "norms").norm("", c.num("hidden_size"))
    if not _tied(c):
        inv.at(head, "last", "lm_head").vocab("", c.num("vocab_size"), c.num("hidden_size"))


def _llama_family(inv: _Inventory, c: _Cfg) -> None:
    """Llama, Mistral, Qwen2/3, Qwen3-MoE, Gemma-2/3 (text) and gpt-oss."""
    model_type = c.model.model_type
    hidden = c.num("hidden_size")
    gemma = model_type in _GEMMA
    lm = "language_model.model" if model_type == "gemma3" else "model"
    inv.at(lm, "first", "embeddings").vocab("embed_tokens", c.num("vocab_size"), hidden)
    norms = ["input_layernorm", "post_attention_layernorm"]
    if gemma:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    for i in range(c.num("num_hidden_layers")):
        layer = inv.at(f"{lm}.layers.{i}", i, "norms")
        _attention(layer.sub("self_attn", "attention"), c, in_features=hidden)
        for norm in norms:
            layer.norm(norm, hidden)
        if model_type == "gpt_oss":
            _gpt_oss_moe(layer.sub("mlp"), c)
        elif model_type == "minimax_m2":
            _minimax_moe(layer.sub("block_sparse_moe"), c)
        elif model_type == "qwen3_moe" and _is_sparse_qwen(c, i):
            _qwen_moe(layer.sub("mlp"), c)
        else:
            mlp = layer.sub("mlp", "dense_mlp")
            _gated_mlp(mlp, hidden, c.num("intermediate_size"), bias=c.flag("mlp_bias", False))
    _final(inv, c, f"{lm}.norm", "language_model.lm_head" if model_type == "gemma3" else "lm_head")


def _minimax_moe(moe: _At, c: _Cfg) -> None:
    """MiniMax-M2's sparse block (vLLM minimax_m2.py): a router with a score-correction
    bias, ``num_local_experts`` experts (w1/w3 gate and up, w2 down), no shared expert."""
    hidden, experts = c.num("hidden_size"), c.num("num_local_experts")
    router = moe.sub("", "routers")
    router.linear("gate", experts, hidden, shard="replicated", quantizable=False)
    router.tensor("e_score_correction_bias", experts, fixed="fp32")
    inter = c.num("intermediate_size")
    _gated_mlp(moe.sub("experts", "routed_experts"), hidden, inter, copies=experts)


def _is_sparse_qwen(c: _Cfg, i: int) -> bool:
    """Qwen-MoE rule: sparse iff not in ``mlp_only_layers`` and ``(i+1) % step == 0``."""
    only = c.cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(x, int) for x in only):
        raise c._error("mlp_only_layers", f"expected a list of layer indices, got {only!r}")
    step = c.num("decoder_sparse_step", 1)
    return c.num("num_experts", 0, minimum=0) > 0 and i not in only and (i + 1) % step == 0


def _qwen_moe(mlp: _At, c: _Cfg) -> None:
    """Qwen3-MoE / Qwen3-Next sparse block: router, experts, optional shared expert."""
    hidden = c.num("hidden_size")
    experts = c.num("num_experts")
    mlp.sub("", "routers").tensor("gate", experts, hidden)
    experts_at = mlp.sub("experts", "routed_experts")
    _gated_mlp(experts_at, hidden, c.num("moe_intermediate_size"), copies=experts)
    shared = c.num("shared_expert_intermediate_size", 0, minimum=0)
    if shared:
        _gated_mlp(mlp.sub("shared_expert", "shared_experts"), hidden, shared)
        mlp.sub("", "routers").tensor("shared_expert_gate", 1, hidden)


def _gpt_oss_moe(mlp: _At, c: _Cfg) -> None:
    """gpt-oss: a biased router and biased experts (fused gate_up, then down)."""
    hidden = c.num("hidden_size")
    experts = c.num("num_local_experts")
    inter = c.num("intermediate_size")
    router = mlp.sub("", "routers")
    router.linear("router", experts, hidden, shard="replicated", bias=True, quantizable=False)
    at = mlp.sub("experts", "routed_experts")
    at.linear("gate_up_proj", ((inter, 2),), hidden, shard="column", bias=True, copies=experts)
    at.linear("down_proj", hidden, inter, shard="row", bias=True, copies=experts)


# ---- DeepSeek (MLA + MoE + MTP)


def _mla(at: _At, c: _Cfg) -> None:
    """Multi-head latent attention; the down projections are replicated (vLLM)."""
    hidden = c.num("hidden_size")
    heads = c.num("num_attention_heads")
    rope = c.num("qk_rope_head_dim")
    qk_head = c.num("qk_nope_head_dim") + rope
    kv_rank = c.num("kv_lora_rank")
    if c.cfg.get("q_lora_rank") is None:
        at.linear("q_proj", ((heads, qk_head),), hidden, shard="column")
    else:
        q_rank = c.num("q_lora_rank")
        at.linear("q_a_proj", q_rank, hidden, shard="replicated")
        at.norm("q_a_layernorm", q_rank)
        at.linear("q_b_proj", ((heads, qk_head),), q_rank, shard="column")
    at.linear("kv_a_proj_with_mqa", kv_rank + rope, hidden, shard="replicated")
    at.norm("kv_a_layernorm", kv_rank)
    kv_b = ((heads, c.num("qk_nope_head_dim") + c.num("v_head_dim")),)
    at.linear("kv_b_proj", kv_b, kv_rank, shard="column")
    at.linear("o_proj", hidden, ((heads, c.num("v_head_dim")),), shard="row")
    index_dim = c.num("index_head_dim", 0, minimum=0)
    if index_dim:
        # DeepSeek-V3.2's indexer, replicated on every rank (vLLM deepseek_v2.py Indexer:
        # ReplicatedLinear wq_b and wk, a LayerNorm k_norm, an unquantized weights_proj)
        idx = at.sub("indexer")
        index_heads = c.num("index_n_heads")
        idx.linear("wq_b", index_heads * index_dim, c.num("q_lora_rank"), shard="replicated")
        idx.linear("wk", index_dim, hidden, shard="replicated")
        idx.norm("k_norm", index_dim, bias=True)
        idx.linear("weights_proj", index_heads, hidden, shard="replicated", quantizable=False)


def _deepseek_layer(layer: _At, c: _Cfg, i: int) -> None:
    """One DeepSeek decoder layer (index ``i``): MLA, norms, a dense MLP or an MoE."""
    hidden = c.num("hidden_size")
    _mla(layer.sub("self_attn", "attention"), c)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    experts = c.num("n_routed_experts", 0, minimum=0)
    sparse = (
        experts > 0
        and i >= c.num("first_k_dense_replace", 0, minimum=0)
        and i % c.num("moe_layer_freq", 1) == 0
    )
    if not sparse:
        _gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.num("intermediate_size"))
        return
    inter = c.num("moe_intermediate_size")
    router = layer.sub("mlp.gate", "routers")
    router.tensor("", experts, hidden)
    if c.cfg.get("topk_method") == "noaux_tc":
        router.tensor("e_score_correction_bias", experts, fixed="fp32")
    _gated_mlp(layer.sub("mlp.experts", "routed_experts"), hidden, inter, copies=experts)
    shared = c.num("n_shared_experts", 0, minimum=0)
    if shared:
        _gated_mlp(layer.sub("mlp.shared_experts", "shared_experts"), hidden, inter * shared)


def _deepseek(inv: _Inventory, c: _Cfg) -> None:
    hidden = c.num("hidden_size")
    num_layers = c.num("num_hidden_layers")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.num("vocab_size"), hidden)
    for i in range(num_layers):
        _deepseek_layer(inv.at(f"model.layers.{i}", i, "norms"), c, i)
    _final(inv, c, "model.norm")
    # MTP layers (DeepSeek-V3 report, section 2.2): enorm, hnorm, eh_proj (2H -> H), a
    # full decoder layer and shared_head.norm; the embedding and shared_head.head are
    # the main model's (vLLM's EAGLE proposer points them at the target's).
    for j in range(c.num("num_nextn_predict_layers", 0, minimum=0)):
        mtp = _Inventory()
        layer = mtp.at(f"model.layers.{num_layers + j}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        layer.linear("eh_proj", hidden, 2 * hidden, shard="replicated", quantizable=False)
        _deepseek_layer(layer, c, num_layers + j)
        layer.norm("shared_head.norm", hidden)
        inv.extend_as_mtp(mtp)


# ---- Qwen3-Next (Gated DeltaNet + gated attention + MoE)


def _gated_deltanet(at: _At, c: _Cfg) -> None:
    """A Qwen3-Next ``linear_attention`` mixer, split by key / value heads under TP."""
    nk, dk = c.num("linear_num_key_heads"), c.num("linear_key_head_dim")
    nv, dv = c.num("linear_num_value_heads"), c.num("linear_value_head_dim")
    hidden = c.num("hidden_size")
    at.linear("in_proj_qkvz", ((nk, dk), (nk, dk), (nv, dv), (nv, dv)), hidden, shard="column")
    at.linear("in_proj_ba", ((nv, 1), (nv, 1)), hidden, shard="column")
    conv = ((nk, dk), (nk, dk), (nv, dv))
    at.tensor("conv1d", conv, c.num("linear_conv_kernel_dim"), shard="column")
    at.tensor("dt_bias", ((nv, 1),), shard="column")
    at.tensor("A_log", ((nv, 1),), shard="column")
    at.norm("norm", dv)
    at.linear("out_proj", hidden, ((nv, dv),), shard="row")


def _qwen3_next_layer(layer: _At, c: _Cfg, i: int, kind: str) -> None:
    hidden = c.num("hidden_size")
    if kind == "full_attention":
        _attention(layer.sub("self_attn", "attention"), c, in_features=hidden)
    else:
        _gated_deltanet(layer.sub("linear_attn", "recurrent"), c)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    if _is_sparse_qwen(c, i):
        _qwen_moe(layer.sub("mlp"), c)
    else:
        _gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.num("intermediate_size"))


def _qwen3_next(inv: _Inventory, c: _Cfg) -> None:
    hidden = c.num("hidden_size")
    num_layers = c.num("num_hidden_layers")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.num("vocab_size"), hidden)
    types = c.cfg.get("layer_types")
    if not isinstance(types, list):
        interval = c.num("full_attention_interval")
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    for i in range(num_layers):
        _qwen3_next_layer(inv.at(f"model.layers.{i}", i, "norms"), c, i, types[i])
    _final(inv, c, "model.norm")
    # The checkpoints ship MTP layers under ``mtp.*`` that the config does not declare:
    # vLLM's qwen3_next_mtp.py reads ``num_nextn_predict_layers`` (default 1) and builds
    # a column-parallel ``fc`` (2H -> H), two pre-fc norms, full-attention MoE decoder
    # layers and a final norm; embeddings and lm_head are the main model's.
    mtp = _Inventory()
    at = mtp.at("mtp", "mtp", "norms")
    at.norm("pre_fc_norm_embedding", hidden)
    at.norm("pre_fc_norm_hidden", hidden)
    at.linear("fc", hidden, 2 * hidden, shard="column")
    for j in range(len(c.model.mtp_layers)):  # the count the model reader found
        _qwen3_next_layer(at.sub(f"layers.{j}"), c, num_layers + j, "full_attention")
    at.norm("norm", hidden)
    inv.extend_as_mtp(mtp)


# ---- Nemotron-H (Mamba2 + attention + MLP / MoE blocks)


def _mamba2(at: _At, c: _Cfg) -> None:
    """A Mamba2 mixer: in_proj [z, x, B, C, dt], conv over [x, B, C], per-head vectors."""
    heads, head_dim = c.num("mamba_num_heads"), c.num("mamba_head_dim")
    groups, state = c.num("n_groups"), c.num("ssm_state_size")
    use_bias = c.flag("use_bias", False)
    xbc: Parts = ((heads, head_dim), (groups, state), (groups, state))
    in_proj = ((heads, head_dim), *xbc, (heads, 1))
    at.linear("in_proj", in_proj, c.num("hidden_size"), shard="column", bias=use_bias)
    at.tensor("conv1d", xbc, c.num("conv_kernel"), shard="column")
    if c.flag("use_conv_bias", True):
        at.tensor("conv1d.bias", xbc, shard="column")
    for vector in ("dt_bias", "A_log", "D"):
        at.tensor(vector, ((heads, 1),), shard="column")
    at.tensor("norm", ((heads, head_dim),), shard="column")
    at.linear("out_proj", c.num("hidden_size"), ((heads, head_dim),), shard="row", bias=use_bias)


def _nemotron_moe(mixer: _At, c: _Cfg) -> None:
    """A Nemotron-H ``E`` block: sigmoid router with correction bias, relu2 experts."""
    if c.cfg.get("moe_latent_size") is not None:
        raise UnsupportedArchitectureError(
            f"{c.model.name}: Nemotron-H MoE layers with a latent projection are not modelled",
            source=c.model.source,
            field="moe_latent_size",
        )
    hidden = c.num("hidden_size")
    experts = c.num("n_routed_experts")
    router = mixer.sub("gate", "routers")
    router.tensor("", experts, hidden)
    router.tensor("e_score_correction_bias", experts, fixed="fp32")
    inter = c.num("moe_intermediate_size")
    _relu2_mlp(mixer.sub("experts", "routed_experts"), hidden, inter, bias=False, copies=experts)
    shared = c.num("moe_shared_expert_intermediate_size")
    _relu2_mlp(
        mixer.sub("shared_experts", "shared_experts"),
        hidden,
        shared,
        bias=c.flag("mlp_bias", False),
    )


def _nemotron_h(inv: _Inventory, c: _Cfg) -> None:
    hidden = c.num("hidden_size")
    inv.at("backbone", "first", "embeddings").vocab("embeddings", c.num("vocab_size"), hidden)
    for i, kind in enumerate(str(c.cfg.get("hybrid_override_pattern", ""))):
        layer = inv.at(f"backbone.layers.{i}", i, "norms")
        layer.norm("norm", hidden)
        if kind == "M":
            _mamba2(layer.sub("mixer", "recurrent"), c)
        elif kind == "*":
            _attention(layer.sub("mixer", "attention"), c, in_features=hidden)
        elif kind == "-":
            mlp = layer.sub("mixer", "dense_mlp")
            _relu2_mlp(mlp, hidden, c.num("intermediate_size"), bias=c.flag("mlp_bias", False))
        elif kind == "E":
            _nemotron_moe(layer.sub("mixer"), c)
        else:
            raise ConfigError(
                f"character {i} is {kind!r}; expected M, *, - or E",
                source=c.model.source,
                field="hybrid_override_pattern",
            )
    _final(inv, c, "backbone.norm_f")


# ---- EAGLE3 heads


def _eagle3(inv: _Inventory, c: _Cfg) -> None:
    """An EAGLE3 head (one decoder layer or more), everything on the last PP stage.

    The tensors the published heads ship (SafeAILab/EAGLE issue #265 lists them:
    ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``, ``t2d``): one Llama decoder
    layer whose q/k/v read ``2 x hidden`` (the token embedding concatenated with the
    fused hidden state) with an extra ``hidden_norm``, an ``fc`` of
    ``3 x target_hidden -> hidden``, a final norm, and an lm_head of
    ``draft_vocab_size`` rows. Plus the int64 ``draft_id_to_target_id`` map vLLM always
    allocates (``vllm/model_executor/models/llama_eagle3.py``); ``t2d`` is not loaded.

    Shared with the target, so not counted here: the embeddings (the heads ship none;
    vLLM's ``load_eagle_model`` "Share[s] target embeddings when the draft checkpoint
    does not include its own vocab embedding table", SGLang sets the target's), and the
    lm_head when ``draft_vocab_size`` is null or absent (SGLang then sets
    ``load_lm_head_from_target``; vLLM PR #28549 shows nvidia/gpt-oss-120b-Eagle3 taking
    lm_head and embed_tokens from the verifier).
    """
    hidden = c.num("hidden_size")
    count = c.num("num_hidden_layers", 1)
    for i in range(count):
        # vLLM builds num_hidden_layers decoder layers; the first reads 2 x hidden, the
        # others hidden, and each has a hidden_norm (llama_eagle3.py @00bd1493; a
        # one-layer head's ``midlayer.*`` is loaded as ``layers.0.*``)
        layer = inv.at("midlayer" if count == 1 else f"layers.{i}", "last", "norms")
        _attention(
            layer.sub("self_attn", "attention"), c, in_features=hidden * (2 if i == 0 else 1)
        )
        mlp = layer.sub("mlp", "dense_mlp")
        _gated_mlp(mlp, hidden, c.num("intermediate_size"), bias=c.flag("mlp_bias", False))
        for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            layer.norm(norm, hidden)
    top = inv.at("", "last", "norms")
    eagle = c.cfg.get("eagle_config")
    if not isinstance(eagle, Mapping) or eagle.get("use_aux_hidden_state", True):
        fc_in = 3 * c.num("target_hidden_size", hidden)
        top.sub("", "eagle3_fc").linear("fc", hidden, fc_in, shard="replicated")
    top.norm("norm", hidden)
    head = top.sub("", "lm_head")
    if c.cfg.get("draft_vocab_size") is not None:
        rows = c.num("draft_vocab_size")
        head.vocab("lm_head", rows, hidden)
    else:
        rows = c.num("vocab_size")
    head.tensor("d2t", rows, fixed="int64", is_param=False)


# ---- Gemma-3 vision tower (SigLIP) and projector


def _siglip(inv: _Inventory, c: _Cfg) -> None:
    """SigLIP vision tower and the Gemma-3 multimodal projector, on stage 0.

    Patch embedding (a biased conv), learned position embedding, encoder layers (two
    LayerNorms with bias, biased q/k/v/out, biased fc1/fc2), a post LayerNorm; the
    projector is ``mm_input_projection_weight`` (vision_hidden x text_hidden) and an
    RMSNorm over the vision hidden size. Linears shard like the text model's; they are
    never quantized here.
    """
    vision = _top_config(c.model).get("vision_config")
    if not isinstance(vision, Mapping):
        raise ConfigError(
            "required to count the vision tower but missing",
            source=c.model.source,
            field="vision_config",
        )
    v = _Cfg(c.model, vision, "vision_config.")
    if v.flag("vision_use_head", True):
        raise UnsupportedArchitectureError(
            f"{c.model.name}: a SigLIP pooling head (vision_use_head) is not modelled",
            source=c.model.source,
            field="vision_config.vision_use_head",
        )
    width, inter = v.num("hidden_size"), v.num("intermediate_size")
    heads, patch = v.num("num_attention_heads"), v.num("patch_size")
    tower = inv.at("vision_tower.vision_model", "first", "vision")
    tower.linear(
        "embeddings.patch_embedding",
        width,
        v.num("num_channels", 3) * patch * patch,
        shard="replicated",
        bias=True,
        quantizable=False,
    )
    positions = (v.num("image_size") // patch) ** 2
    tower.tensor("embeddings.position_embedding", positions, width)
    head: Parts = ((heads, width // heads),)
    linears: tuple[tuple[str, int | Parts, int | Parts, Shard], ...] = (
        ("self_attn.q_proj", head, width, "column"),
        ("self_attn.k_proj", head, width, "column"),
        ("self_attn.v_proj", head, width, "column"),
        ("self_attn.out_proj", width, head, "row"),
        ("mlp.fc1", inter, width, "column"),
        ("mlp.fc2", width, inter, "row"),
    )
    for i in range(v.num("num_hidden_layers")):
        layer = tower.sub(f"encoder.layers.{i}")
        for name, out, inp, shard in linears:
            layer.linear(name, out, inp, shard=shard, bias=True, quantizable=False)
        layer.norm("layer_norm1", width, bias=True)
        layer.norm("layer_norm2", width, bias=True)
    tower.norm("post_layernorm", width, bias=True)
    projector = inv.at("multi_modal_projector", "first", "vision")
    projector.tensor("mm_input_projection_weight", width, c.num("hidden_size"))
    projector.norm("mm_soft_emb_norm", width)


def _top_config(model: ModelSpec) -> Mapping[str, Any]:
    """The checkpoint's top-level config (``raw_config``), else the text config.

    For a Gemma-3 multimodal checkpoint the vision tower and any quantization config sit
    beside the text config, at the top level.
    """
    return model.raw_config or model.config


# --------------------------------------------------------------------------- inventory


def _inventory(model: ModelSpec) -> tuple[_Weight, ...]:
    """Every weight tensor of ``model``. Raises on architectures not modelled."""
    c = _Cfg(model)
    inv = _Inventory()
    model_type = model.model_type
    if model.is_eagle3 and model_type in _LLAMA_LIKE:
        _eagle3(inv, c)
    elif model.is_eagle3:
        raise UnsupportedArchitectureError(
            f"{model.name}: EAGLE3 heads are modelled for Llama-style configs, not {model_type!r}",
            source=model.source,
            field="model_type",
        )
    elif model_type in _LLAMA_LIKE or model_type in _GEMMA or model_type == "gpt_oss":
        _llama_family(inv, c)
        if model_type == "gemma3":
            _siglip(inv, c)
    elif model_type in _MLA:
        _deepseek(inv, c)
    elif model_type == "qwen3_next" or model_type in _QWEN35:
        _qwen3_next(inv, c)
    elif model_type == "nemotron_h":
        _nemotron_h(inv, c)
    elif model.assumed and not any(
        k in model.config for k in ("num_experts", "n_routed_experts", "num_local_experts")
    ):  # an unknown model_type read as a generic decoder: Llama's tensors
        _llama_family(inv, c)
    else:
        raise UnsupportedArchitectureError(
            f"cannot count the weights of {model.name}: model_type {model_type!r} is not modelled",
            source=model.source,
            field="model_type",
        )
    return tuple(inv.weights)


def count_params(model: ModelSpec) -> ParamCounts:
    """Exact parameter counts of ``model``'s checkpoint, by component. Pure.

    Counts follow the Hugging Face checkpoint layout of each architecture. An EAGLE3
    head counts its decoder layer, ``fc``, norms and lm_head but no embeddings (engines
    use the target's); MTP layers are counted under ``mtp`` without the embedding and
    head they share (DeepSeek's ``num_nextn_predict_layers``; Qwen3-Next checkpoints
    ship one MTP layer their config does not declare); a Gemma-3 checkpoint's vision
    tower and projector under ``vision``. ``ParamCounts.total`` counts all of them;
    ``language_model`` leaves out MTP and vision.

    Raises:
        UnsupportedArchitectureError: ``model_type`` is not one this module models.
        ConfigError: a field needed for the count is missing or malformed.
    """
    require_model("model", model)
    totals: dict[str, int] = {}
    for w in _inventory(model):
        totals[w.component] = totals.get(w.component, 0) + w.num_params
    return ParamCounts(**totals)


# --------------------------------------------------------------------------- bytes


@dataclass(frozen=True, kw_only=True)
class _Quant:
    """The checkpoint's storage format for quantized linears."""

    method: Literal["none", "fp8", "mxfp4", "nvfp4", "awq", "gptq", "int8"]
    block: tuple[int, int] | None = None  # fp8 weight_block_size
    excluded: tuple[str, ...] = ()
    group: int = 0  # int4 (awq, gptq): input values per scale; 0 = one group per row
    channel_scales: bool = False  # fp8 / int8: one scale per output row, else one
    scale_bytes: int = 4  # bytes of one fp8 / int8 scale as stored
    input_scale: bool = False  # a static activation scale per linear
    packed_shape: bool = False  # compressed-tensors pack-quantized: weight_shape int64 [2]
    zeros: bool = True  # int4 zero points stored (awq, gptq; not compressed-tensors')
    g_idx: bool = False  # gptq act-order: int32 [in]
    name: str = ""  # the label when it is not the method's (compressed-tensors schemes)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.method == "fp8" and self.block is not None:
            return f"fp8-block{self.block[0]}x{self.block[1]}"
        if self.method in ("awq", "gptq"):
            return f"{self.method}-int4-g{self.group or 'row'}"
        return self.method

    def converts(self, w: _Weight) -> bool:
        """Whether this checkpoint stores ``w`` quantized."""
        if self.method == "none" or not w.linear:
            return False
        if self.method == "mxfp4" and not w.expert:
            return False
        return not _excluded(w.name, self.excluded)

    def bytes_for(self, rows: int, cols: int) -> int:
        """Bytes of one quantized ``rows x cols`` weight (input dim = cols)."""
        if self.method in ("awq", "gptq"):
            # int4 values packed 8 per int32 (rows x cols / 2 bytes), fp16 scales per
            # group of inputs and output, int4 zero points packed alike (vLLM awq.py,
            # gptq.py; compressed-tensors' symmetric pack-quantized stores no zeros but an
            # int64 [2] weight_shape), gptq act-order's g_idx int32 per input
            groups = -(-cols // self.group) if self.group else 1
            packed = cols * -(-rows // 8) if self.method == "awq" else rows * -(-cols // 8)
            total = packed * 4 + groups * rows * 2
            if self.zeros:
                total += groups * -(-rows // 8) * 4
            if self.g_idx:
                total += 4 * cols
            if self.packed_shape:
                total += 16
            return total
        if self.method in ("fp8", "int8") and self.block is None:
            scales = rows if self.channel_scales else 1
            return rows * cols + self.scale_bytes * (scales + (1 if self.input_scale else 0))
        if self.method == "fp8":
            assert self.block is not None
            b0, b1 = self.block
            return rows * cols + 4 * -(-rows // b0) * -(-cols // b1)
        if self.method == "mxfp4":
            return rows * -(-cols // 32) * (16 + 1)
        # nvfp4: packed nibbles + an fp8 scale per 16 values + weight_scale_2, input_scale
        return rows * (-(-cols // 2) + -(-cols // 16)) + 8


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` or a dotted prefix of it matches a glob of ``patterns``.

    ``model.layers.*.self_attn`` matches ``model.layers.3.self_attn.q_proj``; a plain
    word (``lm_head``, ``gate``) matches any dotted component run equal to it.
    """
    parts = name.split(".")
    prefixes = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            return True
        if "*" not in pattern and f".{pattern}." in f".{name}.":
            return True
    return False


def _compressed_tensors(qc: Mapping[str, Any], excluded: tuple[str, ...], source: str) -> _Quant:
    """A ``compressed-tensors`` checkpoint with one scheme for its Linear layers (the
    layouts of vLLM's compressed_tensors schemes and the compressed-tensors library:
    scales stored in the model dtype, 2 bytes, except NVFP4's fp8/fp32 ones)."""

    def refuse(why: str, field: str = "config_groups") -> ConfigError:
        return ConfigError(
            f"compressed-tensors {why}; pass the weight bytes explicitly instead",
            source=source,
            field=f"quantization_config.{field}",
        )

    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or len(groups) != 1:
        raise refuse(f"with {0 if not isinstance(groups, Mapping) else len(groups)} schemes "
                     "is not modelled (one scheme for every Linear is)")  # fmt: skip
    (scheme,) = groups.values()
    weights = scheme.get("weights") if isinstance(scheme, Mapping) else None
    if not isinstance(weights, Mapping):
        raise refuse("scheme has no weights block")
    bits, kind = weights.get("num_bits"), weights.get("type")
    strategy = weights.get("strategy")
    fmt = str(qc.get("format", ""))
    acts = scheme.get("input_activations")
    static = isinstance(acts, Mapping) and acts.get("dynamic") is False
    if fmt == "nvfp4-pack-quantized" or (bits == 4 and kind == "float"):
        return _Quant(method="nvfp4", excluded=excluded, name="compressed-tensors-nvfp4")
    if bits == 4 and kind == "int" and strategy in ("group", "channel"):
        if weights.get("symmetric") is False:
            raise refuse("asymmetric int4 (zero points) is not modelled", "config_groups.weights")
        group = weights.get("group_size") if strategy == "group" else 0
        if not isinstance(group, int) or isinstance(group, bool) or group < 0:
            raise refuse(f"group_size {group!r} is not a size", "config_groups.weights")
        return _Quant(
            method="gptq" if weights.get("actorder") == "group" else "awq",
            excluded=excluded,
            group=group,
            zeros=False,
            packed_shape=True,
            g_idx=weights.get("actorder") == "group",
            name=f"compressed-tensors-w4a16-{f'g{group}' if group else 'channel'}",
        )
    if bits == 8 and kind in ("float", "int") and strategy in ("tensor", "channel"):
        return _Quant(
            method="fp8" if kind == "float" else "int8",
            excluded=excluded,
            channel_scales=strategy == "channel",
            scale_bytes=2,
            input_scale=static,
            name=f"compressed-tensors-{'fp8' if kind == 'float' else 'int8'}-{strategy}",
        )
    raise refuse(f"{bits}-bit {kind} weights with strategy {strategy!r} are not modelled")


def _quantization(model: ModelSpec) -> _Quant:
    """Parse ``quantization_config``. Raises ConfigError for formats not modelled."""
    qc = _top_config(model).get("quantization_config")
    if qc is None:
        return _Quant(method="none")
    source = model.source
    if not isinstance(qc, Mapping):
        raise ConfigError(
            f"expected an object, got {qc!r}", source=source, field="quantization_config"
        )
    excluded: list[str] = []
    for key in _EXCLUDE_KEYS:
        value = qc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ConfigError(
                f"expected a list of module names, got {value!r}",
                source=source,
                field=f"quantization_config.{key}",
            )
        excluded += value
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo", "")).upper()
    if method == "fp8" or (method == "modelopt" and algo == "FP8"):
        block = qc.get("weight_block_size")
        if block is None:
            return _Quant(method="fp8", excluded=tuple(excluded))
        if (
            not isinstance(block, list)
            or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise ConfigError(
                f"expected two positive integers, got {block!r}",
                source=source,
                field="quantization_config.weight_block_size",
            )
        return _Quant(method="fp8", block=(block[0], block[1]), excluded=tuple(excluded))
    if method == "mxfp4":
        return _Quant(method="mxfp4", excluded=tuple(excluded))
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit"))
        group = qc.get("group_size", qc.get("q_group_size", 128))
        if bits != 4 or not isinstance(group, int) or isinstance(group, bool) or group == 0:
            raise ConfigError(
                f"{method} is modelled for 4-bit weights in groups (or -1: per row), got bits "
                f"{bits!r}, group_size {group!r}; pass the weight bytes explicitly instead",
                source=source,
                field="quantization_config.bits",
            )
        return _Quant(
            method=method,  # type: ignore[arg-type]
            excluded=tuple(excluded),
            group=max(0, group),
            g_idx=method == "gptq",  # AutoGPTQ writes g_idx for every linear
        )
    if method == "compressed-tensors":
        return _compressed_tensors(qc, tuple(excluded), source)
    if (method == "modelopt" and algo == "NVFP4") or method == "nvfp4":
        group = qc.get("group_size", 16)
        if group != 16:
            raise ConfigError(
                f"NVFP4 uses groups of 16 values, got {group!r}",
                source=source,
                field="quantization_config.group_size",
            )
        return _Quant(method="nvfp4", excluded=tuple(excluded))
    raise ConfigError(
        f"quantization {method or '?'}{'/' + algo if algo else ''} is not modelled "
        "(fp8, fp8 block-scaled, mxfp4, modelopt NVFP4, awq, gptq and compressed-tensors are); "
        "pass the weight bytes "
        "explicitly instead",
        source=source,
        field="quantization_config.quant_method",
    )


_WEIGHTS_DTYPES = ("auto", "fp32", "bf16", "fp16")


def _resolve_weights_dtype(model: ModelSpec, weights_dtype: str, quant: _Quant) -> str:
    """The storage of unquantized tensors; see :func:`weights_bytes`."""
    auto = model.dtype
    if auto is None and quant.method == "mxfp4" and model.model_type == "gpt_oss":
        # openai/gpt-oss README, "Precision format": MXFP4 for the MoE linear weights,
        # "All other tensors will be in BF16." The config carries no torch_dtype.
        auto = "bf16"
    if auto is None and quant.method != "none":
        # a quantized checkpoint whose config names no dtype (MiniMax-M2's fp8 revision
        # fbd8a14b): its unquantized tensors are held in the dtype the engine runs it in,
        # bf16 (vLLM's default when the config has none, as for the KV cache)
        auto = "bf16"
    if auto is None and str(weights_dtype).strip().lower() == "auto":
        raise InvalidArgumentError(
            f"weights_dtype='auto' needs the dtype of {model.name}'s weights, but its config "
            "has no 'torch_dtype'/'dtype'; pass weights_dtype='bf16', 'fp16' or 'fp32'"
        )
    dtype = parse_dtype(weights_dtype, auto=auto, what="weights_dtype")
    if dtype.name not in _WEIGHTS_DTYPES:
        raise InvalidArgumentError(
            f"weights_dtype must be one of {', '.join(_WEIGHTS_DTYPES)}, got {weights_dtype!r} "
            "(quantized storage comes from the config's quantization_config)"
        )
    return dtype.name


def _stage_of(
    model: ModelSpec, place: Place, stages: list[range], pp: int, include_mtp: bool
) -> int | None:
    """The PP stage holding a tensor placed at ``place`` (None: not held at all)."""
    if model.is_eagle3:
        return pp - 1
    if place == "first":
        return 0
    if place == "last":
        return pp - 1
    if place == "mtp":
        return pp - 1 if include_mtp else None
    for stage, layers in enumerate(stages):
        if place in layers:
            return stage
    raise AssertionError(f"layer {place} is on no stage")  # pragma: no cover


def weights_bytes(
    model: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    pp_stage: int | None = None,
    include_mtp: bool = False,
    weights_dtype: str = "auto",
    ep: int = 1,
    attention_tp: int | None = None,
) -> WeightsBytes:
    """Bytes of weights held by one rank, as engines shard them. Pure.

    Args:
        tp: tensor-parallel size; sharding as described in the module docstring.
        pp: pipeline-parallel size; ``pp_stage`` picks a stage, by default the stage
            with the most bytes (the earliest on ties) is reported.
        include_mtp: also load the model's MTP layers (on the last stage) - for MTP
            speculative decoding.
        weights_dtype: storage of the tensors the checkpoint does not quantize: ``auto``
            (the config's ``torch_dtype``; gpt-oss's mxfp4 checkpoints, which carry
            none, are bf16 per the openai/gpt-oss README), ``bf16``, ``fp16`` or
            ``fp32``.
        ep: expert-parallel size: routed experts whole, ``ceil(experts / ep)`` per rank.
        attention_tp: the tensor-parallel size of attention (``tp / dp`` under
            data-parallel attention); default ``tp``.

    Returns:
        A :class:`WeightsBytes`; the caller owns it. ``total_bytes`` is the figure to
        subtract from a GPU's memory for that rank.

    Raises:
        InvalidArgumentError: a bad ``tp``, ``pp``, ``pp_stage`` (``pp`` may not exceed
            the number of decoder layers, except for an EAGLE3 head, which sits on the
            last stage), or ``weights_dtype``, or ``auto`` with no dtype to resolve.
        UnsupportedArchitectureError / ConfigError: as :func:`count_params`, or a
            quantization format this module does not model.
    """
    require_model("model", model)
    require_int("tp", tp, minimum=1)
    require_int("pp", pp, minimum=1)
    require_int("ep", ep, minimum=1)
    attn_tp = tp if attention_tp is None else require_int("attention_tp", attention_tp, minimum=1)
    if not isinstance(include_mtp, bool):
        raise InvalidArgumentError(f"include_mtp must be true or false, got {include_mtp!r}")
    if pp_stage is not None:
        require_int("pp_stage", pp_stage)
        if pp_stage >= pp:
            raise InvalidArgumentError(f"pp_stage={pp_stage} must be < pp={pp}")
    if pp > model.num_layers and not model.is_eagle3:
        raise InvalidArgumentError(
            f"pp={pp} is more pipeline stages than {model.name} has layers ({model.num_layers})"
        )
    inventory = _inventory(model)
    quant = _quantization(model)
    dtype_name = _resolve_weights_dtype(model, weights_dtype, quant)
    plain_bytes = parse_dtype(dtype_name).bits // 8
    stages = pp_stage_layers(model.num_layers, pp)
    tied_copy = pp > 1 and not model.is_eagle3 and _tied(_Cfg(model))

    per_stage: list[dict[str, int]] = [{} for _ in range(pp)]
    for w in inventory:
        stage = _stage_of(model, w.place, stages, pp, include_mtp)
        if stage is None:
            continue
        copies = w.copies
        if w.expert and ep > 1:  # whole experts, spread over the EP ranks
            rows, cols = w.rank_shape(1)
            copies = -(-copies // ep)
        else:
            rows, cols = w.rank_shape(attn_tp if w.component == "attention" else tp)
        if quant.converts(w):
            one = quant.bytes_for(rows, cols)
        else:
            one = rows * cols * (_FIXED_BYTES[w.fixed] if w.fixed else plain_bytes)
        key = f"{w.component}_bytes"
        per_stage[stage][key] = per_stage[stage].get(key, 0) + copies * one
        if tied_copy and w.component == "embeddings":
            last = per_stage[pp - 1]
            last["lm_head_bytes"] = last.get("lm_head_bytes", 0) + w.copies * one

    def result(stage: int) -> WeightsBytes:
        return WeightsBytes(
            tp=tp,
            pp=pp,
            pp_stage=stage,
            include_mtp=include_mtp,
            weights_dtype=dtype_name,
            quantization=quant.label,
            **per_stage[stage],
        )

    if pp_stage is not None:
        return result(pp_stage)
    return max((result(s) for s in range(pp)), key=lambda r: (r.total_bytes, -r.pp_stage))
