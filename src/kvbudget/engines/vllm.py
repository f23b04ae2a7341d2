"""vLLM 0.33's KV cache, as its own sizing code builds it, and the flags that realise a plan.

vLLM keeps **one block pool** for every cached layer of target and draft. Its start-up
planning (``vllm/v1/core/kv_cache_planning.py`` and ``vllm/v1/core/kv_cache_utils.py``
of the vllm 0.33.0 wheel; ``vllm/v1/kv_cache_interface.py`` for the per-layer specs) is,
for the default layer-outer KV layout (FlashAttention on Hopper/Blackwell)::

    specs     one per cached layer and rank: full attention, sliding window, MLA, Mamba
              (attention.py ``get_kv_cache_spec``: a layer with a window is always a
              sliding-window spec, however long max_model_len is)
    groups    all specs equal             -> one group of every layer
              one type, one block size    -> one group (UniformTypeKVCacheSpecs)
              otherwise (hybrid)          -> pages unified to the largest (a smaller
              attention page raises its block size by the integer ratio, or is padded),
              then layers bucketed by spec and split into groups of equal size
              ``group_size`` = fewest layers of a bucket, or the most when
              ``most < 1.5 x fewest``; short groups hold padding layers
              (``_get_kv_cache_groups_uniform_page_size``)
    block     bytes_per_block = max over groups of the summed pages of its layers
    pool      num_blocks = kv_cache_memory_bytes // bytes_per_block   (null block included;
              with PP: the smallest stage's count)
    check     refused at start-up when bytes_per_block x (blocks one max_model_len request
              needs, summed over groups) > kv_cache_memory_bytes - bytes_per_block (the
              null block BlockPool holds back)
    capacity  per request: full/MLA ``cdiv(max_model_len, block)``; sliding
              ``cdiv(min(window - 1 + in_flight, max_model_len), block) + 1`` with
              ``in_flight = max_concurrent_batches x max_num_batched_tokens`` and
              ``max_concurrent_batches = pp + 1`` with async scheduling (Model Runner V2,
              the default) else ``pp``; concurrency ``num_blocks / sum over groups``;
              tokens ``int(concurrency x max_model_len)``; logged as
              "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
              (``update_kv_cache_capacity``).

Hybrid attention/Mamba models (Qwen3-Next, Nemotron-H; ``vllm/platforms/interface.py``
``_align_hybrid_block_size``, ``vllm/model_executor/layers/mamba/``): the attention block
size is raised until one attention page holds a state page (blocks of ``lcm(16, block,
64 when FlashInfer's GDN prefill exports checkpoints)`` tokens), the state page is padded
to the attention page, the conv state keeps ``conv_kernel - 1 + K`` rows, Nemotron-H's SSM
state is float32 (``NemotronHForCausalLMConfig``), and a request holds ``2 + K + 1``
states with prefix caching on ("align" mode, the default) or ``1 + K`` with it off.

DeepSeek-V4 (``models/deepseek_v4``): each layer registers several caches (window,
compressed latent, indexer key, compressor states: :func:`compressed_specs`) with their
own block sizes, on backends with a block-outermost layout, so the groups come from
``_get_packed_kv_cache_groups`` (:func:`packed_groups`), pages are not unified, and a
block is the widest group's summed pages. With more than one MTP module every
sliding-window spec retains ``K - 1`` more tokens (``extra_retained_tokens``).

MiniMax-M3 (``models/minimax_m3``): a sparse layer registers two caches, its lightning
indexer's key (``MiniMaxM3IndexerCache``: an MLA spec of one bf16 head of
``sparse_index_dim``, registered first) and its K/V (a full-attention spec); both
specs are full-attention types of one block size, so every layer shares one group
(``UniformTypeKVCacheSpecs``) whose block holds every layer's page. Its sparse and
indexer backends page 128 tokens, one sparse block (``get_supported_kernel_block_sizes``:
``[128]``), so the plan says ``--block-size 128``.

Speculative decoding adds the draft's layers to the same pool (EAGLE3: the head's own
layer; MTP: the target's MTP layers; draft model: all its layers), each with its own
geometry. ``--kv-cache-memory-bytes`` is the pool's bytes per GPU and overrides
``--gpu-memory-utilization``. Host offload (``--kv-offloading-size``, GiB summed over all
TP x PP ranks) is one budget for every layer.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from kvbudget.cost import pp_stage_layers
from kvbudget.engines import vllm_pp_draft
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import (
    auto_note,
    cdiv,
    command_line,
    comment_lines,
    engine_capacity,
    environment_prefix,
    gib_text,
    kv_dtype_name,
    refuse_unmodelled,
    stage_note,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.engines.vllm_context import (
    ALLOW_LONG_ENV,
    LengthRule,
    derived_length,
    long_length_warning,
)
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import (
    AttentionLayer,
    CompressedMLALayer,
    KimiDeltaLayer,
    Layer,
    MLALayer,
    SharedCompressedMLALayer,
)
from kvbudget.plan_types import EnginePlan, EngineSource, Plan, PoolPlan
from kvbudget.units import format_bytes

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

VERSION = "0.33.0"
# config/model.py _get_and_verify_max_len (0.33.0): the yarn family keeps its length
LENGTH_RULE = LengthRule(
    unscaled_rope_types=frozenset(
        {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
    )
)


@dataclass(frozen=True, kw_only=True)
class VllmRelease:
    """What differs between the vLLM releases kvbudget models (the rest of this module
    holds for each of them; every field cites both releases' code).

    * ``checkpoint_state_kinds``: hybrid layer kinds whose spec keeps one more state per
      request in "align" mode, a prefill checkpoint (``num_prefill_checkpoint_blocks``
      in ``MambaSpec.max_memory_usage_bytes``, kv_cache_interface.py; set by
      ``mamba_mixer2.py`` from 0.32.0 and ``qwen_gdn_linear_attn.py`` from 0.33.0).
    * ``gdn_checkpoint_alignment``: tokens a Gated DeltaNet block size is aligned to in
      align mode (``Platform._align_hybrid_block_size``, platforms/interface.py: the
      ``lcm`` with FlashInfer's GDN checkpoint interval, 0.33.0), or None.
    * ``async_with_ngram``: ngram speculation runs with async scheduling (0.33.0: Model
      Runner V2 runs ngram; 0.29.0 ``VllmConfig.__post_init__`` turns async scheduling
      off for ngram, config/vllm.py:1262-1285, and refuses ``--async-scheduling`` with it).
    * ``v1_runner_specs``: speculation modes the release runs on the V1 model runner,
      which keeps ``pp`` batches in flight under async scheduling with PP > 1, not
      ``pp + 1`` (``VllmConfig.max_concurrent_batches``; 0.29.0's Model Runner V2 takes
      only eagle, eagle3, mtp, config/vllm.py:2562-2574, so ngram and draft-target run
      on V1; 0.33.0 runs them all on V2).
    * ``absent_model_types``: model types the release has no model for (0.29.0: no
      ``deepseek_v41`` in its ``_CONFIG_REGISTRY`` or ``models/``), refused by ``check``.
    * ``speculation_with_pp``: an EAGLE/EAGLE3/MTP/DFlash drafter runs with PP > 1 (0.33.0 gives
      the draft ``pipeline_parallel_size=1``, config/speculative.py:1905; 0.29.0 gives it
      the target's, :1690, and the draft classes lack ``SupportsPP``, so
      ``ModelConfig`` refuses, config/model.py:1424-1430).
    * ``length_rule``: how the release derives the longest ``--max-model-len`` it takes
      without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` (:mod:`kvbudget.engines.vllm_context`).
    * ``check``: the release's own refusals beyond :func:`check` (configs its model
      classes read otherwise), raising InvalidArgumentError; None when it has none.
    * ``kda_ssm_cache_dtype``: Kimi K3's ``KimiK3DeltaAttention`` keeps its recurrent
      state in ``mamba_ssm_cache_dtype`` (0.33.0, models/kimi_k3/nvidia/kda.py
      ``get_state_dtype``); 0.29.0's passes none and keeps it float32 (kda.py:363-375,
      ``kda_state_dtype``, mamba_utils.py:132-138). Both keep one prefill checkpoint
      state on the FlashKDA prefill (``get_kv_cache_spec``; kda.py:594-600 in 0.29.0).
    * ``gpu_memory_utilization``: the ``--gpu-memory-utilization`` the release takes when
      none is given, from which kvbudget derives a budget when none is given either
      (0.33.0 and 0.29.0: 0.92, ``CacheConfig.gpu_memory_utilization``'s default in
      vllm/config/cache.py:215 and :111; 0.34.0: 1.0 with its extensible KV cache, the
      default on CUDA, ``CacheConfig.resolved_gpu_memory_utilization``,
      config/cache.py:494-501).
    * ``pp_embedding``: where a drafter finds an input embedding under PP > 1
      (:class:`kvbudget.engines.vllm_pp_draft.PpEmbedding`: the targets that build it on
      the last stage for a head, both releases; 0.34.0's DeepSeek-V4 and MiniMax-M3 MTP
      classes share it).
    """

    version: str
    ref: str
    checkpoint_state_kinds: frozenset[str]
    gdn_checkpoint_alignment: int | None
    async_with_ngram: bool
    speculation_with_pp: bool
    v1_runner_specs: frozenset[str] = frozenset()
    length_rule: LengthRule = LENGTH_RULE
    check: Callable[[Deployment], None] | None = None
    kda_ssm_cache_dtype: bool = False
    absent_model_types: frozenset[str] = frozenset()
    gpu_memory_utilization: str = "0.92"
    pp_embedding: vllm_pp_draft.PpEmbedding = vllm_pp_draft.PP_EMBEDDING


RELEASE = VllmRelease(
    version=VERSION,
    ref="v0.33.0 (the PyPI wheel)",
    checkpoint_state_kinds=frozenset({"mamba2", "gated_deltanet"}),
    # FlashInfer's GDN prefill exports align-mode checkpoints every 64 tokens on Hopper
    # (gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
    gdn_checkpoint_alignment=64,
    async_with_ngram=True,
    speculation_with_pp=True,
    kda_ssm_cache_dtype=True,
)
# vLLM's refusal of a drafter without SupportsPP under PP (config/model.py)
PP_REFUSAL = (
    "Pipeline parallelism is not supported for this model. Supported models implement "
    "the `SupportsPP` interface."
)

SpecKind = Literal[
    "full_attention", "sliding_window", "chunked_local", "mla", "mamba", "circular_buffer"
]
# a group's kind: its specs' kind, or (a uniform-type group of full-attention and MLA
# specs, MiniMax-M3's K/V beside its index keys) both, as the harness names them
GroupKind = SpecKind | Literal["full_attention+mla"]

# speculative methods that make vLLM turn its hybrid KV cache manager off for chunked
# local attention (VllmConfig: "not yet supported with chunked local attention + eagle";
# SpeculativeConfig.use_eagle: eagle, eagle3, mtp, dflash, dspark): every layer is then
# full attention
# (dflash and dspark too: use_eagle() includes them in 0.33.0, config/speculative.py)
_NO_HYBRID_WITH_CHUNKS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One cached layer on one rank as vLLM describes it (a ``KVCacheSpec``).

    ``page_bytes`` is one block of this layer (padded where vLLM pads it);
    ``geometry`` is what vLLM compares to decide that two specs are the same (heads,
    head size, dtype bytes per token). ``stage`` is the PP stage that holds the layer.
    """

    kind: SpecKind
    block_size: int
    page_bytes: int
    geometry: tuple[int, ...]
    sliding_window: int | None = None
    draft: bool = False
    stage: int = 0
    # Mamba: state pages one request holds (running + speculative + checkpoint)
    states_per_request: int = 0
    # False: the group takes no part in prefix caching (``KVCacheSpec.prefix_cacheable``:
    # DeepSeek-V4.1's bounded-replay windows and compressor rings)
    prefix_cacheable: bool = True

    @property
    def key(self) -> tuple[object, ...]:
        """What makes two specs equal for vLLM (``is_draft`` and the stage excluded)."""
        return (self.kind, self.block_size, self.page_bytes, self.geometry, self.sliding_window)

    @property
    def type_key(self) -> tuple[object, ...]:
        """Specs of one *type* need the same token slots (``is_uniform_type``)."""
        if self.kind in ("full_attention", "mla"):
            return ("full", self.block_size)
        if self.kind == "sliding_window":
            return ("sliding", self.block_size, self.sliding_window)
        if self.kind == "chunked_local":
            return ("chunked", self.block_size, self.sliding_window)
        if self.kind == "circular_buffer":
            return ("circular", self.block_size)
        return ("mamba", self.block_size, self.page_bytes, self.states_per_request)


@dataclass(frozen=True, kw_only=True)
class KvCacheGroup:
    """One vLLM KV cache group: layers sharing one block table."""

    kind: GroupKind
    layers: tuple[int, ...]  # indices into the spec list
    padding_layers: int
    page_bytes: int  # one layer's page (uniform-type groups: the largest)
    block_size: int
    sliding_window: int | None
    draft_layers: int
    prefix_cacheable: bool = True


@dataclass(frozen=True, kw_only=True)
class VllmPool:
    """The pool vLLM builds: groups, block size, blocks, and the logged capacity."""

    groups: tuple[KvCacheGroup, ...]
    block_size: int
    bytes_per_block: int
    num_gpu_blocks: int
    blocks_per_request: int  # summed over the groups
    group_blocks_per_request: tuple[int, ...]  # per group, in ``groups`` order
    max_concurrency: float
    gpu_kv_cache_tokens: int
    refused: str | None


# FlashAttention's kernel block sizes: MultipleOf(16) (flash_attn.py
# get_supported_kernel_block_sizes)
KERNEL_BLOCK = 16
MLA_HYBRID_BLOCK = 128  # platforms/interface.py _align_hybrid_block_size, use_mla
# MiniMax-M3's MiniMaxM3SparseBackend and MiniMaxM3IndexerBackend kernel blocks: [128]
# (models/minimax_m3/common/sparse_attention.py, common/indexer.py
# get_supported_kernel_block_sizes: one sparse block a page)
MINIMAX_M3_BLOCK = 128


def has_index_keys(layers: tuple[Layer, ...]) -> bool:
    """Whether any layer keeps a MiniMax-M3 index key beside its K/V."""
    return any(isinstance(x, AttentionLayer) and x.index_head_dim for x in layers)


@dataclass(frozen=True, kw_only=True)
class MambaSetup:
    """What vLLM sets for a hybrid attention/Mamba model before building specs.

    ``block_size``: the attention block size, raised until one attention page holds a
    Mamba state page (``Platform._align_hybrid_block_size``); ``state_page_bytes``: one
    layer's state (conv rows ``conv_kernel - 1 + K``, SSM state in its own dtype);
    ``page_bytes``: the state page padded to the attention page; ``states_per_request``:
    ``2 + K + checkpoint`` in "align" mode (prefix caching on, the default), ``1 + K``
    in "none" mode (``MambaSpec.max_memory_usage_bytes``).
    """

    block_size: int
    mamba_block_size: int
    state_page_bytes: int
    page_bytes: int
    states_per_request: int


def mamba_setup(d: Deployment, release: VllmRelease) -> MambaSetup | None:
    """vLLM's block-size override and state pages for a hybrid model, or None."""
    target = d.target
    k = d.lookahead_tokens
    states = [
        x.state_bytes(
            d.state_dtype_value, d.parallel.attention_tp, lookahead=k, ssm_dtype=d.ssm_state_dtype
        )
        for x in target.layers
    ]
    state_page = max(states, default=0)
    if not state_page:
        return None
    attention = [x for x in target.layers if x.kind in ("attention", "mla")]
    attn_page_1 = (
        attention[0].bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp) if attention else 0
    )
    align = d.enable_prefix_caching
    gdn = any(x.kind == "gated_deltanet" for x in target.layers)
    checkpoint_alignment = release.gdn_checkpoint_alignment if align and gdn else None
    bs = d.tokens_per_block
    if attn_page_1:
        kernel_align = max(KERNEL_BLOCK, bs)
        if attention[0].kind == "mla":
            # an MLA hybrid (Kimi-Linear): blocks a multiple of 128 for the TRTLLM /
            # FlashInfer MLA decode kernels (``_align_hybrid_block_size``, use_mla)
            kernel_align = max(kernel_align, MLA_HYBRID_BLOCK)
        if align:
            kernel_align = math.lcm(kernel_align, checkpoint_alignment or 1)
        block = kernel_align * cdiv(state_page, kernel_align * attn_page_1)
        block = KERNEL_BLOCK * cdiv(block, KERNEL_BLOCK)
        bs = max(bs, block)
    page = bs * attn_page_1 if attn_page_1 else state_page
    # the layers that declare a prefill checkpoint block (0.33.0: Mamba2 always; GDN when
    # its FlashInfer prefill exports checkpoints, align mode on Hopper)
    kinds = {x.kind for x in target.layers} & release.checkpoint_state_kinds
    checkpoint = 1 if (kinds and (not gdn or checkpoint_alignment)) or flashkda_prefill(d) else 0
    per_request = (2 + k + checkpoint) if align else (1 + k)
    return MambaSetup(
        block_size=bs,
        mamba_block_size=bs if align else d.max_seq_len,
        state_page_bytes=state_page,
        page_bytes=max(page, state_page),
        states_per_request=per_request,
    )


def flashkda_prefill(d: Deployment) -> bool:
    """Whether vLLM prefills the target's Kimi K3 KDA layers on FlashKDA, which gives
    each KDA spec one prefill checkpoint state (0.33.0 models/kimi_k3/nvidia/kda.py
    ``KimiK3DeltaAttention.get_kv_cache_spec``: ``num_prefill_checkpoint_blocks =
    int(kda_prefill_checkpoint_alignment(backend) is not None)``, 1 for ``flashkda``;
    it declares no block alignment, ``MambaBase.get_prefill_checkpoint_alignment``;
    0.29.0 kda.py:594-600 the same).

    ``resolve_kda_prefill_backend("auto")`` (``kda_prefill_backend`` in
    ``--additional-config``, not emitted) takes FlashKDA where ``is_flashkda_supported``:
    on the SM90 this model plans for, a 128-wide head, bfloat16 activations and a
    ``gate_lower_bound``; FlashInfer's KDA prefill (0.33.0) only when asked, Triton
    otherwise (no checkpoint). The recurrent dtype (bf16 or fp32) always qualifies.
    """
    return d.target.dtype in (None, "bf16") and any(
        isinstance(x, KimiDeltaLayer) and x.full_rank_gate and x.bounded_gate and x.head_dim == 128
        for x in d.target.layers
    )


def layer_specs(d: Deployment, release: VllmRelease) -> list[LayerSpec]:
    """Every cached layer of target and draft on one rank, in vLLM's order.

    Target layers first (their PP stage from vLLM's ``get_pp_indices`` split), then the
    draft's (EAGLE3 head, MTP layers or draft model), on the last stage.
    """
    mamba = mamba_setup(d, release)
    if mamba is not None:
        d = replace(d, tokens_per_block=mamba.block_size)
    if has_index_keys(d.target.layers):
        d = replace(d, tokens_per_block=MINIMAX_M3_BLOCK)
    target = d.target
    stage_of = {
        i: s
        for s, layers in enumerate(pp_stage_layers(target.num_layers, d.parallel.pp))
        for i in layers
    }
    specs = [
        spec
        for layer in target.layers
        for spec in _layer_specs(d, layer, stage_of[layer.index], False, mamba)
    ]
    last = d.parallel.pp - 1
    draft_layers: tuple[Layer, ...] = ()
    if d.spec.name in ("mtp", "dspark"):  # MTP layers, DeepSeek-V4.1's DSpark stages
        draft_layers = target.mtp_layers
    elif d.draft is not None:
        draft_layers = d.draft.layers
    specs += [spec for layer in draft_layers for spec in _layer_specs(d, layer, last, True, None)]
    return specs


def _layer_specs(
    d: Deployment, layer: Layer, stage: int, draft: bool, mamba: MambaSetup | None
) -> list[LayerSpec]:
    """The specs one layer registers: one, none, (MiniMax-M3's sparse layers) its index
    key's then its K/V's, or (DeepSeek-V4, V4.1: :mod:`kvbudget.engines.vllm_dsv41`) its
    several caches."""
    if isinstance(layer, SharedCompressedMLALayer):
        from kvbudget.engines.vllm_dsv41 import shared_compressed_specs

        return shared_compressed_specs(d, layer, stage, draft)
    if isinstance(layer, CompressedMLALayer):
        return compressed_specs(layer, stage, draft)
    spec = _layer_spec(d, layer, stage, draft, mamba)
    if spec is None:
        return []
    if isinstance(layer, AttentionLayer) and layer.index_head_dim:
        # MiniMaxM3SparseAttention builds its indexer (whose cache registers itself in
        # static_forward_context) before it registers its own K/V
        bs = d.tokens_per_block
        index = LayerSpec(
            kind="mla",
            block_size=bs,
            page_bytes=layer.index_bytes_per_token * bs,
            geometry=(1, layer.index_head_dim, layer.index_bytes_per_token),
            draft=draft,
            stage=stage,
        )
        return [index, spec]
    return [spec]


# DeepSeek-V4 on SM90 (vLLM 0.33.0): FlashMLA's sparse attention
# (models/deepseek_v4/nvidia/model.py ``_select_dsv4_attn_cls``), the fp8_ds_mla layout
# for any --kv-cache-dtype it takes (attention.py ``_resolve_dsv4_kv_cache_dtype``: auto
# and fp8 both become fp8_ds_mla)
DSV4_BLOCK = 256  # FLASHMLA_SPARSE_DSV4 / DEEPSEEK_V4_INDEXER kernel blocks: [256]
DSV4_SWA_BLOCK = 64  # DeepseekV4SWACache(block_size=64) (backends/mla/sparse_swa.py)
DSV4_ENTRY_BYTES = 584  # fp8_ds_mla: 448 NoPE + 128 RoPE + 8 scale bytes (attention.py)
DSV4_ALIGN = 576  # pages padded to 576 bytes under fp8_ds_mla (_apply_alignment_padding)
FP32_BYTES = 4


def aligned_page(page: int) -> int:
    """A DeepSeek-V4 page padded to a multiple of 576 bytes (``_apply_alignment_padding``)."""
    return cdiv(page, DSV4_ALIGN) * DSV4_ALIGN


def compressed_specs(layer: CompressedMLALayer, stage: int, draft: bool) -> list[LayerSpec]:
    """A DeepSeek-V4 layer's specs in the order its ``__init__`` registers them
    (models/deepseek_v4/attention.py ``DeepseekV4Attention``):

    * ratio 4: the indexer's key cache (``DeepseekV4IndexerCache``: an MLA spec of
      ``index_head_dim + index_head_dim // 128 x 4`` bytes a state, one state per 4
      tokens) and its compressor's fp32 state (``CompressorStateCache``);
    * the window cache (``DeepseekV4SWACache``: a sliding-window MLA spec of 584 bytes a
      token, 64-token blocks);
    * ratio > 1: the compressed latent (``get_kv_cache_spec``: an MLA spec of 584 bytes a
      state, ``tokens_per_state`` = the ratio; a block of 256 tokens holds 256 / ratio
      states) and its compressor's fp32 state.

    A compressor state (compressor.py) is ``2 x coff x dim`` fp32 values a token
    (kv and score, ``coff`` 2 at ratio 4 where windows overlap, else 1) over a window of
    ``coff x ratio`` tokens, in blocks of 4 tokens (ratio 4) or 8 (ratio 128). Every page
    is padded to a multiple of 576 bytes; nothing is split over TP (``max_tp_shards=1``).
    """
    ratio = layer.compress_ratio
    coff = 2 if ratio == 4 else 1

    def spec(kind: SpecKind, block: int, page: int, window: int | None = None) -> LayerSpec:
        return LayerSpec(
            kind=kind,
            block_size=block,
            page_bytes=aligned_page(page),
            geometry=(page,),
            sliding_window=window,
            draft=draft,
            stage=stage,
        )

    def state(dim: int) -> LayerSpec:
        block = 4 if ratio == 4 else 8
        return spec("sliding_window", block, block * 2 * coff * dim * FP32_BYTES, coff * ratio)

    out = []
    if layer.index_head_dim:
        out.append(spec("mla", DSV4_BLOCK, DSV4_BLOCK // ratio * layer.indexer_key_bytes))
        out.append(state(layer.index_head_dim))
    out.append(
        spec("sliding_window", DSV4_SWA_BLOCK, DSV4_SWA_BLOCK * DSV4_ENTRY_BYTES, layer.window)
    )
    if ratio > 1:
        out.append(spec("mla", DSV4_BLOCK, DSV4_BLOCK // ratio * DSV4_ENTRY_BYTES))
        out.append(state(layer.head_dim))
    return out


def _layer_spec(
    d: Deployment, layer: Layer, stage: int, draft: bool, mamba: MambaSetup | None
) -> LayerSpec | None:
    bs = d.tokens_per_block
    per_token = layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp)
    if isinstance(layer, AttentionLayer):
        per_token = layer.kv_bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp)
        window = layer.sliding_window
        kind: SpecKind = "full_attention" if window is None else "sliding_window"
        if layer.chunked:
            # ChunkedLocalAttentionSpec (attention_chunk_size in ``sliding_window``), or
            # FullAttentionSpec when the hybrid manager is off
            full = d.spec.name in _NO_HYBRID_WITH_CHUNKS
            kind, window = ("full_attention", None) if full else ("chunked_local", window)
        return LayerSpec(
            kind=kind,
            block_size=bs,
            page_bytes=per_token * bs,
            geometry=(layer.num_kv_heads, layer.head_dim, per_token),
            sliding_window=window,
            draft=draft,
            stage=stage,
        )
    if isinstance(layer, MLALayer):
        return LayerSpec(
            kind="mla",
            block_size=bs,
            page_bytes=per_token * bs,
            geometry=(1, layer.kv_lora_rank + layer.qk_rope_head_dim, per_token),
            draft=draft,
            stage=stage,
        )
    if mamba is not None and layer.kind in ("gated_deltanet", "kda", "mamba2"):
        return LayerSpec(
            kind="mamba",
            block_size=mamba.mamba_block_size,
            page_bytes=mamba.page_bytes,
            geometry=(mamba.state_page_bytes,),
            draft=draft,
            stage=stage,
            states_per_request=mamba.states_per_request,
        )
    return None


def _all_equal(specs: list[LayerSpec]) -> bool:
    return len({s.key for s in specs}) == 1


def _uniform_type(specs: list[LayerSpec]) -> bool:
    return len({s.type_key for s in specs}) == 1


def _unify_pages(specs: list[LayerSpec]) -> list[LayerSpec]:
    """``unify_kv_cache_spec_page_size``: raise smaller pages to the largest."""
    largest = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == largest:
            out.append(s)
        elif s.kind != "mamba" and largest % s.page_bytes == 0:
            ratio = largest // s.page_bytes
            out.append(replace(s, block_size=s.block_size * ratio, page_bytes=largest))
        elif s.kind in ("full_attention", "sliding_window", "chunked_local", "mamba"):
            out.append(replace(s, page_bytes=largest))  # padded page
        else:
            raise InvalidArgumentError(
                "vLLM cannot unify this model's KV page sizes (an MLA page that does not "
                "divide the largest page); plan it with --engine kvbudget"
            )
    return out


def kv_cache_groups(
    specs: list[LayerSpec], *, packed: bool = False
) -> tuple[list[LayerSpec], list[KvCacheGroup]]:
    """vLLM's KV cache groups for ``specs`` (``get_kv_cache_groups``): the layer-outer
    layout, or with ``packed`` the block-outermost one (DeepSeek-V4's backends), whose
    mixed page sizes are packed, not unified (:func:`packed_groups`).

    Returns the specs as grouped (pages unified for hybrid models) and the groups.
    """
    if not specs:
        return specs, []
    everything = tuple(range(len(specs)))
    if _all_equal(specs) or _uniform_type(specs):
        return specs, [_group(specs, everything, 0)]
    if packed and len({s.page_bytes for s in specs}) > 1:
        return specs, packed_groups(specs)
    unified = _unify_pages(specs)
    buckets: dict[tuple[object, ...], list[int]] = {}
    for i, s in enumerate(unified):
        buckets.setdefault(s.key, []).append(i)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for members in buckets.values():
        count = cdiv(len(members), group_size)
        for g in range(count):
            layers = tuple(members[g::count])
            spec = unified[layers[0]]
            groups.append(
                KvCacheGroup(
                    kind=spec.kind,
                    layers=layers,
                    padding_layers=group_size - len(layers),
                    page_bytes=spec.page_bytes,
                    block_size=spec.block_size,
                    sliding_window=spec.sliding_window,
                    draft_layers=sum(unified[i].draft for i in layers),
                )
            )
    return unified, groups


def _group(specs: list[LayerSpec], layers: tuple[int, ...], padding: int) -> KvCacheGroup:
    """One group of ``layers`` (a uniform type: the first one's kind, block and window,
    or ``full_attention+mla`` when it holds both; its largest page)."""
    first = specs[layers[0]]
    kinds = {specs[i].kind for i in layers}
    kind: GroupKind = "full_attention+mla" if kinds == {"full_attention", "mla"} else first.kind
    return KvCacheGroup(
        kind=kind,
        layers=layers,
        padding_layers=padding,
        page_bytes=max(specs[i].page_bytes for i in layers),
        block_size=first.block_size,
        sliding_window=first.sliding_window,
        draft_layers=sum(specs[i].draft for i in layers),
        prefix_cacheable=all(specs[i].prefix_cacheable for i in layers),
    )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """``_approximate_gcd`` (kv_cache_planning.py): the chunk size in ``[lower_bound,
    max(values)]`` that pads ``values`` up to its multiples least (ties: the larger)."""
    best, best_pad = lower_bound, None
    for size in range(max(1, lower_bound), max(values) + 1):
        pad = sum((size - x % size) % size for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = size, pad
    return best


def packed_groups(specs: list[LayerSpec]) -> list[KvCacheGroup]:
    """``_get_packed_kv_cache_groups`` (kv_cache_planning.py, vLLM 0.33.0).

    Layers are bucketed by type in order (a layer joins the first bucket it is uniform
    with). A bucket is *balanced* when each of its page sizes has as many layers; the
    repeats per group are the ``_approximate_gcd`` of the balanced buckets' largest
    page-size counts, at least the largest count of a balanced bucket that mixes page
    sizes; a balanced bucket splits into ``cdiv(count, repeats)`` groups (repeat ``r``
    of its pattern to group ``r mod n``), any other stays whole. *State* buckets (Mamba,
    circular-buffer, and sliding-window ones when no repeats are set) are then capped at
    the states one block already holds: the block must fit the widest group of every
    other bucket (a state bucket counted one layer a group), and a state bucket splits
    into at least ``cdiv(layers, anchor // page)`` groups. Padding layers: the widest
    group's layers less the group's.
    """
    buckets: dict[tuple[object, ...], list[int]] = {}
    for i, s in enumerate(specs):
        buckets.setdefault(s.type_key, []).append(i)
    shaped = []
    for members in buckets.values():
        by_page: dict[int, list[int]] = {}
        for i in members:
            by_page.setdefault(specs[i].page_bytes, []).append(i)
        counts = [len(v) for v in by_page.values()]
        shaped.append((by_page, len(set(counts)) == 1, max(counts)))
    floor = max((most for by_page, bal, most in shaped if bal and len(by_page) > 1), default=0)
    repeats = _approximate_gcd([m for _, bal, m in shaped if bal], floor) if floor else None

    def state(by_page: dict[int, list[int]]) -> bool:
        kind = specs[next(iter(by_page.values()))[0]].kind
        return kind in ("mamba", "circular_buffer") or (
            repeats is None and kind == "sliding_window"
        )

    def split(balanced: bool, most: int) -> int:
        return cdiv(most, repeats) if balanced and repeats else 1

    def widest_bytes(by_page: dict[int, list[int]], n: int) -> int:
        return sum(cdiv(len(layers), n) * page for page, layers in by_page.items())

    anchor = max(
        widest_bytes(by_page, sum(map(len, by_page.values())) if state(by_page) else split(b, m))
        for by_page, b, m in shaped
    )
    chosen: list[tuple[int, ...]] = []
    for by_page, balanced, most in shaped:
        count = split(balanced, most)
        if anchor and state(by_page):
            first_page = specs[next(iter(by_page.values()))[0]].page_bytes
            per_block = max(anchor // first_page, 1)
            count = max(count, cdiv(sum(map(len, by_page.values())), per_block))
        if count == 1:
            chosen.append(tuple(i for page in by_page.values() for i in page))
            continue
        # vLLM's plain zip (a state bucket of unequal page counts would be cut short there)
        pattern = list(zip(*by_page.values(), strict=False))
        chosen += [tuple(i for rep in pattern[g::count] for i in rep) for g in range(count)]
    widest = max(len(layers) for layers in chosen)
    return [_group(specs, layers, widest - len(layers)) for layers in chosen]


def _group_blocks_per_request(
    group: KvCacheGroup, specs: list[LayerSpec], d: Deployment, release: VllmRelease
) -> int:
    """Blocks of the shared pool one request of max_model_len takes in ``group``."""
    max_len = d.max_seq_len
    if group.kind == "sliding_window":
        assert group.sliding_window is not None
        retained = group.sliding_window - 1 + _extra_retained(d) + _in_flight_tokens(d, release)
        return cdiv(min(retained, max_len), group.block_size) + 1
    if group.kind == "chunked_local":
        # ChunkedLocalAttentionSpec: one chunk plus the in-flight tokens, no extra block
        assert group.sliding_window is not None
        chunk = group.sliding_window + _in_flight_tokens(d, release)
        return cdiv(min(chunk, max_len), group.block_size)
    if group.kind == "mamba":
        return max(specs[i].states_per_request for i in group.layers)
    if group.kind == "circular_buffer":
        return 1  # CircularBufferSpec: one ring block a request for its life
    return cdiv(max_len, group.block_size)


def _extra_retained(d: Deployment) -> int:
    """``extra_retained_tokens`` of every sliding-window spec: ``num_prefill_lookahead_tokens
    - 1`` (``get_global_kv_cache_groups``, kv_cache_planning.py; config/vllm.py): with
    more than one MTP module (``use_multi_module_mtp``: ``min(num_nextn_predict_layers,
    num_speculative_tokens) > 1``) the chain re-prefills ``K - 1`` trailing tokens; 0
    for every other drafter and without one."""
    if d.spec.name != "mtp":
        return 0
    if d.draft is None:
        modules = len(d.target.mtp_layers)
    else:
        given = d.draft.config.get("num_nextn_predict_layers", 1)
        modules = given if isinstance(given, int) else 1
    k = d.lookahead_tokens
    return k - 1 if min(modules, k) > 1 else 0


def async_scheduling(d: Deployment, release: VllmRelease) -> bool:
    """Whether vLLM schedules asynchronously: as set, unless the release runs the
    speculation method without it (0.29.0's ngram)."""
    return d.async_scheduling and (release.async_with_ngram or d.spec.name != "ngram")


def _in_flight_tokens(d: Deployment, release: VllmRelease) -> int:
    """``VllmConfig.max_in_flight_tokens``: batches in flight x max_num_batched_tokens.

    ``max_concurrent_batches``: ``pp + 1`` under async scheduling on Model Runner V2, 2
    on V1 at PP 1, else ``pp`` (V1 does not overlap steps across PP stages).
    """
    pp = d.parallel.pp
    batches = pp
    if async_scheduling(d, release):
        v1 = d.spec.name in release.v1_runner_specs
        batches = pp + 1 if not v1 or pp == 1 else pp
    return batches * d.max_num_batched_tokens


def _bytes_per_block(groups: list[KvCacheGroup], specs: list[LayerSpec], stage: int) -> int:
    """``_get_kv_cache_bytes_per_block`` on one stage: the largest group's summed pages."""
    return max(
        sum(specs[i].page_bytes for i in g.layers if specs[i].stage == stage) for g in groups
    )


def vllm_pool(d: Deployment, budget: int, release: VllmRelease = RELEASE) -> VllmPool:
    """The pool ``release`` of vLLM builds for ``d`` from ``budget`` KV bytes per GPU,
    and its logged capacity figures."""
    packed = any(isinstance(x, CompressedMLALayer) for x in d.target.layers)
    specs, groups = kv_cache_groups(layer_specs(d, release), packed=packed)
    if not groups:
        raise InvalidArgumentError(f"{d.target.name} caches nothing for vLLM to size")
    per_group = tuple(_group_blocks_per_request(g, specs, d, release) for g in groups)
    per_request = sum(per_group)
    counts = []
    refused = None
    for stage in range(d.parallel.pp):
        bpb = _bytes_per_block(groups, specs, stage)
        if bpb == 0:
            continue
        counts.append(budget // bpb)
        usable = budget - bpb
        needed = bpb * per_request
        if refused is None and usable <= 0:
            refused = "No available memory for the cache blocks."
        elif refused is None and needed > usable:
            longest = _estimate_max_len(d, groups, specs, release, usable // bpb)
            estimate = (
                f"Based on the available memory, the estimated maximum model length is {longest}. "
                if longest > 0
                else ""
            )
            refused = (
                f"To serve at least one request with the model's max seq len "
                f"({d.max_seq_len}), ({_gib(needed)} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({_gib(usable)} GiB). "
                f"{estimate}".rstrip()
            )
    num_blocks = min(counts)
    concurrency = num_blocks / per_request
    # the attention block size after any override (what vLLM's cache_config reports):
    # the smallest of the groups that take part in prefix caching (core.py), if any
    attention = [g.block_size for g in groups if g.kind != "mamba" and g.prefix_cacheable]
    attention = attention or [g.block_size for g in groups if g.kind != "mamba"]
    block_size = min(attention) if attention else d.tokens_per_block
    return VllmPool(
        groups=tuple(groups),
        block_size=block_size,
        bytes_per_block=_bytes_per_block(groups, specs, d.parallel.pp - 1),
        num_gpu_blocks=num_blocks,
        blocks_per_request=per_request,
        group_blocks_per_request=per_group,
        max_concurrency=concurrency,
        gpu_kv_cache_tokens=int(concurrency * d.max_seq_len),
        refused=refused,
    )


def _estimate_max_len(
    d: Deployment,
    groups: list[KvCacheGroup],
    specs: list[LayerSpec],
    release: VllmRelease,
    usable_blocks: int,
) -> int:
    """vLLM's ``_estimate_max_model_len_from_groups`` (kv_cache_planning.py): the longest
    max_model_len whose request fits ``usable_blocks`` blocks over all groups, by binary
    search from 1 to max_model_len; 0 when not even one token fits."""

    def fits(length: int) -> bool:
        at = replace(d, max_seq_len=length)
        return (
            sum(_group_blocks_per_request(g, specs, at, release) for g in groups) <= usable_blocks
        )

    if not fits(1):
        return 0
    low, high, best = 1, d.max_seq_len, 1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _gib(num_bytes: int) -> str:
    """vLLM's ``format_gib`` (``vllm/utils/mem_utils.py``): GiB rounded to 2 decimals."""
    return f"{round(num_bytes / (1 << 30), 2)}"


def plan(d: Deployment, ledger: Ledger, release: VllmRelease = RELEASE) -> EnginePlan:
    """vLLM's plan: its pool for ``d``, the flags that make it, its start-up line.

    ``refusals`` holds vLLM's start-up refusal when not one request of max_model_len
    fits beside the null block (or, in a release without it, a drafter under PP).
    Raises InvalidArgumentError for a dtype or model vLLM has no cache for.
    """
    _check_state_dtype(d, release)
    facts = ENGINES["vllm"]
    dtype = kv_dtype_name(d.kv_dtype, facts)
    budget = ledger.min_stage_gpu_bytes
    pool = vllm_pool(d, budget, release)
    refusals = _refusals(d, pool, release)
    ranks = d.parallel.tp * d.parallel.pp
    size = gib_text(ledger.host_bytes * ranks)
    offload = host_offload(d, pool, size, ranks) if size != "0" else None
    pools = _pools(pool, offload, ranks)
    host = next((p for p in pools if p.tier == "host"), None)
    sequences = min(int(pool.max_concurrency), d.max_batch_size)
    capacity = engine_capacity(
        d,
        tokens=pool.gpu_kv_cache_tokens,
        tokens_per_block=pool.block_size,
        gpu_blocks=pool.num_gpu_blocks,
        host_blocks=host.blocks if host else 0,
        host_tokens=host.tokens if host else 0,
        max_concurrency=sequences,
    )
    warnings = []
    if sequences < d.max_batch_size:
        warnings.append(
            f"vLLM's pool holds {pool.max_concurrency:.2f} requests of max_model_len "
            f"{d.max_seq_len} at once (--max-num-seqs {d.max_batch_size}); it "
            "admits more shorter ones"
        )
    warnings += _expert_padding_warnings(d)
    if release.speculation_with_pp:
        warnings += vllm_pp_draft.kept_embedding_warnings(d, release.pp_embedding)
    length = derived_length(d.target.config, d.target.model_type, release.length_rule)
    long_length = length.refuses(d.max_seq_len)
    if long_length:
        warnings.append(long_length_warning(length, d.max_seq_len))
    if d.target.model_type == "minimax_m3_text":
        # vLLM 0.33.0 registers MiniMaxM3Config (minimax_m3_vl) and MiniMaxM3MTPConfig
        # only (transformers_utils/config.py _CONFIG_REGISTRY), and transformers has no
        # minimax_m3_text: its ModelConfig refuses such a config.json
        warnings.append(
            f"vLLM {release.version} does not load a top-level minimax_m3_text config "
            "(only the minimax_m3_vl checkpoint that wraps it, whose KV cache this plan is); "
            "serve the vision-language checkpoint"
        )
    log = (
        f"GPU KV cache size: {pool.gpu_kv_cache_tokens:,} tokens, Maximum concurrency for "
        f"{d.max_seq_len:,} tokens per request: {pool.max_concurrency:.2f}x",
    )
    return EnginePlan(
        name="vllm",
        version=release.version,
        source=source(release),
        pools=pools,
        capacity=capacity,
        settings=_settings(d, budget, dtype, size, release, long_length=long_length),
        log=log,
        notes=tuple(
            _notes(d, ledger, pool, offload, ranks, release)
            # DeepSeek-V4 / V4.1 store fp8_ds_mla whatever the flag (their own note says so)
            + ([] if _compressed(d) else auto_note(d.kv_dtype, facts, dtype))
        ),
        warnings=tuple(warnings),
        refusals=refusals,
        detail={
            **_detail(d, pool, release),
            # vLLM's derived maximum (config/model.py _get_and_verify_max_len) and whether
            # --max-model-len needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 past it
            "derived_max_model_len": length.tokens,
            "allow_long_max_model_len": long_length,
            # the drafter's embed_tokens once loaded (maybe_share_target_embed)
            "draft_embedding": vllm_pp_draft.draft_embedding(d, release.pp_embedding),
        },
    )


def _has_k3_kda(d: Deployment) -> bool:
    return any(isinstance(x, KimiDeltaLayer) and x.full_rank_gate for x in d.target.layers)


# --state-dtype -> vLLM's MambaDType names (config/cache.py)
MAMBA_CACHE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# the ones kda_state_dtype takes
KDA_STATE_DTYPES = {k: MAMBA_CACHE_DTYPES[k] for k in ("fp32", "bf16")}


def _check_kimi_k3(d: Deployment, release: VllmRelease) -> None:
    """InvalidArgumentError for a recurrent dtype vLLM does not keep Kimi K3's KDA state
    in: ``kda_state_dtype`` takes auto, float32 or bfloat16 only, and a release without
    :attr:`VllmRelease.kda_ssm_cache_dtype` float32 only."""
    recurrent = _kda_recurrent_dtype(d)
    if not release.kda_ssm_cache_dtype and recurrent != "fp32":
        raise InvalidArgumentError(
            f"vLLM {release.version} keeps {d.target.name}'s KDA recurrent state in float32 "
            f"whatever --mamba-ssm-cache-dtype says, not {recurrent} (--state-dtype "
            f"{d.state_dtype}); plan --state-dtype auto or fp32, or --engine vllm@{VERSION}"
        )
    if recurrent not in KDA_STATE_DTYPES:
        raise InvalidArgumentError(
            f"vLLM keeps {d.target.name}'s KDA recurrent state in float32 or bfloat16 only "
            f"(kda_state_dtype), not {recurrent} (--state-dtype {d.state_dtype}, the "
            "config's mamba_ssm_cache_dtype under auto); pick --state-dtype fp32 or bf16"
        )


def _kda_recurrent_dtype(d: Deployment) -> str:
    """The dtype kvbudget keeps Kimi K3's KDA recurrent state in: the config's SSM dtype
    under ``auto`` (float32 unless it names one), else ``--state-dtype``."""
    return (d.ssm_state_dtype or d.state_dtype_value).name


def _kda_state_flags(d: Deployment) -> dict[str, str]:
    """``--mamba-cache-dtype`` (conv) and ``--mamba-ssm-cache-dtype`` (recurrent) that
    make vLLM keep Kimi K3's KDA states as planned (``KimiK3DeltaAttention.get_state_dtype``
    reads both; vLLM's ``auto`` is the model dtype and float32, and it reads no
    ``mamba_ssm_cache_dtype`` from the config): what differs from ``auto``."""
    flags = {}
    if d.state_dtype.strip().lower() != "auto":
        flags["--mamba-cache-dtype"] = KDA_STATE_DTYPES[d.state_dtype_value.name]
    recurrent = _kda_recurrent_dtype(d)
    if flags or recurrent != "fp32":
        flags["--mamba-ssm-cache-dtype"] = KDA_STATE_DTYPES[recurrent]
    return flags


def _mamba_state_set(d: Deployment) -> bool:
    """A ``--state-dtype`` other than auto on a target with Mamba2 / Gated DeltaNet layers."""
    return d.state_dtype.strip().lower() != "auto" and any(
        x.kind in ("mamba2", "gated_deltanet") for x in d.target.layers
    )


def _check_state_dtype(d: Deployment, release: VllmRelease) -> None:
    """InvalidArgumentError for a state dtype vLLM keeps no state in: Kimi K3's KDA rules
    (:func:`_check_kimi_k3`), else ``MambaDType`` for Mamba2 / Gated DeltaNet layers."""
    if _has_k3_kda(d):
        _check_kimi_k3(d, release)
    elif _mamba_state_set(d) and d.state_dtype_value.name not in MAMBA_CACHE_DTYPES:
        raise InvalidArgumentError(
            f"vLLM keeps recurrent state in {', '.join(MAMBA_CACHE_DTYPES)} only "
            f"(--mamba-cache-dtype, config/cache.py MambaDType), not --state-dtype "
            f"{d.state_dtype}; pick one of them or auto"
        )


def _state_flags(d: Deployment) -> dict[str, str]:
    """The state dtype flags of the plan: Kimi K3's (:func:`_kda_state_flags`), else for a
    ``--state-dtype`` on Mamba2 / Gated DeltaNet layers ``--mamba-cache-dtype`` and
    ``--mamba-ssm-cache-dtype``: vLLM keeps their conv state in the first and the
    recurrent (temporal) state in the second (``MambaStateDtypeCalculator._mamba_state_dtype``,
    model_executor/layers/mamba/mamba_utils.py), as the plan keeps both in the one dtype
    (checked by :func:`_check_state_dtype`)."""
    if _has_k3_kda(d):
        return _kda_state_flags(d)
    if not _mamba_state_set(d):
        return {}
    name = MAMBA_CACHE_DTYPES[d.state_dtype_value.name]
    return {"--mamba-cache-dtype": name, "--mamba-ssm-cache-dtype": name}


def _compressed(d: Deployment) -> bool:
    """Whether the target has DeepSeek-V4's compressed latents (cache dtype forced)."""
    return any(isinstance(x, CompressedMLALayer) for x in d.target.layers)


def _expert_padding_warnings(d: Deployment) -> list[str]:
    """Routed-expert rows vLLM pads in at this TP (Kimi-Linear's KimiMoE), which the
    checkpoint's weights figure does not hold."""
    from kvbudget.architectures.kimi_linear import vllm_expert_padding_bytes

    layout = d.parallel
    if d.weights_override is not None:  # --weights-bytes is the user's figure, padding and all
        return []
    extra = vllm_expert_padding_bytes(d.target, tp=layout.tp, ep=layout.ep)
    if not extra:
        return []
    return [
        f"vLLM pads {d.target.name}'s routed experts to 256 x TP intermediate rows at "
        f"--tp {layout.tp} without expert parallelism (KimiMoE, min_moe_intermediate_per_"
        f"partition): {format_bytes(extra)} ({extra:,} B) more weights per rank than the "
        "plan counts; leave that much GPU memory free beyond --kv-budget, or use --ep "
        f"{layout.tp} (experts whole per rank, no padding)"
    ]


def _refusals(d: Deployment, pool: VllmPool, release: VllmRelease) -> tuple[str, ...]:
    """What vLLM would refuse at start-up, in its words, with what to change: at
    configuration, at KV sizing, at CUDA-graph set-up (in that order)."""
    found = (
        _pp_refusal(d, release),
        vllm_pp_draft.missing_embedding_refusal(d, release.version, release.pp_embedding)
        if release.speculation_with_pp
        else None,
        _pool_refusal(pool, release),
        _graph_refusal(d, pool, release),
    )
    return tuple(r for r in found if r is not None)


def _pp_refusal(d: Deployment, release: VllmRelease) -> str | None:
    """A drafter under PP in a release that gives it the target's PP size."""
    # a DFlash draft too: 0.29.0's DFlashQwen3Model has no SupportsPP either (its PP 2
    # cases refused in the 0.29.0 harness with vLLM's own message)
    drafter = d.spec.name in ("eagle", "eagle3", "mtp", "dflash", "dspark")
    if not (drafter and d.parallel.pp > 1 and not release.speculation_with_pp):
        return None
    return (
        f"vLLM {release.version} would refuse to start: {PP_REFUSAL} (the {d.spec.name} "
        "drafter is given the target's --pipeline-parallel-size): use --pp 1, or "
        "--engine vllm (0.30.0 and later run the drafter at PP 1)"
    )


def _pool_refusal(pool: VllmPool, release: VllmRelease) -> str | None:
    """Not one request of max_model_len beside the null block (KV sizing)."""
    if pool.refused is None:
        return None
    return (
        f"vLLM {release.version} would refuse to start: {pool.refused} Raise "
        "--kv-budget, lower --max-seq-len, or use a smaller --kv-dtype"
    )


def _graph_refusal(d: Deployment, pool: VllmPool, release: VllmRelease) -> str | None:
    """More sequences than a Mamba/GDN model's blocks: ``CompilationConfig``
    (config/compilation.py, 0.29.0 and 0.33.0) refuses with FULL decode CUDA graphs (the
    default -O2: cudagraph_mode FULL_AND_PIECEWISE, config/vllm.py), since every
    decoding sequence needs one block of the pool."""
    mamba = any(g.kind == "mamba" for g in pool.groups)
    if not (mamba and d.max_batch_size > pool.num_gpu_blocks):
        return None
    blocks = pool.num_gpu_blocks
    return (
        f"vLLM {release.version} would refuse to start: max_num_seqs "
        f"({d.max_batch_size}) exceeds available Mamba cache blocks ({blocks}). Each "
        "decode sequence requires one Mamba cache block, so CUDA graph capture cannot "
        f"proceed. Lower --max-batch-size (--max-num-seqs) to at most {blocks}, or "
        "raise --kv-budget"
    )


# CPUOffloadingSpec (vllm/v1/kv_offload/cpu/spec.py, 0.29.0 and 0.33.0): each chunk's
# row of the host region is rounded up to this many bytes (BLOCK_SIZE_ALIGNMENT)
OFFLOAD_ROW_ALIGNMENT = 4096


@dataclass(frozen=True, kw_only=True)
class HostOffload:
    """What ``--kv-offloading-size S`` (GiB, one total per engine) makes vLLM pin.

    ``CPUOffloadingSpec`` (vllm/v1/kv_offload/cpu/spec.py:106-130 in 0.33.0, :103-127 in
    0.29.0): ``S x 2^30`` bytes are cut into rows, one per CPU block (one GPU block's
    worth, ``blocks_per_chunk`` 1), each row holding every rank's copy of the block
    (``num_copies`` = TP x PP ranks, or 1 for the replicated MLA layout: an MLA model at
    TP > 1, PP 1, on one node, whose ranks hold the same latents), rounded up to 4 KiB;
    ``cpu_blocks = S x 2^30 // row``. The region is one shared /dev/shm mapping pinned
    with ``cudaHostRegister`` (no power-of-two rounding in these releases), drafter
    layers included. Every offloaded KV cache group stores its own copy of a block in a
    CPU block of its own, so ``G`` groups hold about ``1/G`` of the tokens.
    """

    cpu_blocks: int
    row_bytes: int
    region_bytes: int  # the one pinned region of the engine (all its ranks)
    copies: int
    groups: int


def host_offload(d: Deployment, pool: VllmPool, size: str, ranks: int) -> HostOffload:
    """The host region ``--kv-offloading-size size`` makes for ``pool`` (:class:`HostOffload`)."""
    replicated = (
        {g.kind for g in pool.groups} == {"mla"}
        and len(pool.groups) == 1
        and d.parallel.attention_tp > 1
        and d.parallel.pp == 1
        and d.parallel.tp <= d.gpus_per_node
    )
    copies = 1 if replicated else ranks
    row = cdiv(pool.bytes_per_block * copies, OFFLOAD_ROW_ALIGNMENT) * OFFLOAD_ROW_ALIGNMENT
    blocks = int(float(size) * (1 << 30)) // row
    return HostOffload(
        cpu_blocks=blocks,
        row_bytes=row,
        region_bytes=blocks * row,
        copies=copies,
        groups=len(pool.groups),
    )


def _pools(pool: VllmPool, host: HostOffload | None, ranks: int) -> tuple[PoolPlan, ...]:
    """The one GPU block pool (every layer of target and draft) and the host region
    (:class:`HostOffload`), whose bytes per rank are the rank's share of it."""
    role: Literal["target", "target+draft"] = (
        "target+draft" if any(g.draft_layers for g in pool.groups) else "target"
    )
    kinds = {g.kind for g in pool.groups}
    full = {"full_attention", "mla", "full_attention+mla"}
    kind: Literal["kv", "hybrid"] = "kv" if kinds <= full else "hybrid"
    pools = [
        PoolPlan(
            role=role,
            kind=kind,
            tier="gpu",
            tokens_per_block=pool.block_size,
            blocks=pool.num_gpu_blocks,
            bytes=pool.num_gpu_blocks * pool.bytes_per_block,
            tokens=pool.gpu_kv_cache_tokens,
            reserved_blocks=1,  # block 0, the null block BlockPool holds back
            name=f"block pool ({len(pool.groups)} KV cache group"
            f"{'s' if len(pool.groups) != 1 else ''})",
        )
    ]
    if host is not None:
        share = host.region_bytes // ranks
        used = host.cpu_blocks * pool.bytes_per_block * host.copies // ranks
        pools.append(
            PoolPlan(
                role=role,
                kind=kind,
                tier="host",
                tokens_per_block=pool.block_size,
                blocks=host.cpu_blocks,
                bytes=share,
                tokens=host.cpu_blocks // host.groups * pool.block_size,
                padding_bytes=share - used,
                name="CPU offloading (shared region)" if host.copies == 1 else "CPU offloading",
            )
        )
    return tuple(pools)


def _detail(d: Deployment, pool: VllmPool, release: VllmRelease) -> dict[str, Any]:
    """vLLM's own figures: block size, blocks, groups, concurrency (the fidelity fields)."""
    groups = [
        {
            "kind": g.kind,
            "layers": len(g.layers),
            "draft_layers": g.draft_layers,
            "padding_layers": g.padding_layers,
            "page_bytes": g.page_bytes,
            "block_size": g.block_size,
            "sliding_window": g.sliding_window,
            "blocks_per_request": per_request,
        }
        for g, per_request in zip(pool.groups, pool.group_blocks_per_request, strict=True)
    ]
    return {
        "block_size": pool.block_size,
        "bytes_per_block": pool.bytes_per_block,
        "num_gpu_blocks": pool.num_gpu_blocks,
        "usable_gpu_blocks": pool.num_gpu_blocks - 1,
        "blocks_per_request": pool.blocks_per_request,
        "gpu_kv_cache_tokens": pool.gpu_kv_cache_tokens,
        "max_concurrency": pool.max_concurrency,
        "max_in_flight_tokens": _in_flight_tokens(d, release),
        "kv_cache_groups": groups,
        "refused": pool.refused,  # at KV sizing (vLLM's words)
        "pp_refused": _pp_refusal(d, release),  # at configuration
        "cuda_graph_refused": _graph_refusal(d, pool, release),  # at CUDA-graph set-up
    }


def block_flag(d: Deployment) -> int:
    """The ``--block-size`` of the plan: ``tokens_per_block``, or 256 for DeepSeek-V4,
    whose compressed-latent and indexer backends take 256-token blocks only
    (``get_supported_kernel_block_sizes``: models/deepseek_v4/sparse_mla.py,
    v1/attention/backends/mla/indexer.py; its other caches keep their own block sizes),
    or 128 for MiniMax-M3 (:data:`MINIMAX_M3_BLOCK`), or 64 for DeepSeek-V4.1 on SM90
    (:data:`kvbudget.engines.vllm_dsv41.DSV41_BLOCK`)."""
    from kvbudget.engines import vllm_dsv41

    if vllm_dsv41.is_v41(d):
        return vllm_dsv41.DSV41_BLOCK
    if any(isinstance(x, CompressedMLALayer) for x in d.target.layers):
        return DSV4_BLOCK
    if has_index_keys(d.target.layers):
        return MINIMAX_M3_BLOCK
    return d.tokens_per_block


def _settings(
    d: Deployment,
    budget: int,
    dtype: str,
    size: str,
    release: VllmRelease,
    *,
    long_length: bool = False,
) -> dict[str, Any]:
    """The ``vllm serve`` flags of the plan (``env.NAME``: its environment)."""
    facts = ENGINES["vllm"]
    layout = d.parallel
    settings: dict[str, Any] = {f"env.{ALLOW_LONG_ENV}": "1"} if long_length else {}
    settings |= {
        # vLLM's data parallelism (replicas or DP attention) runs --data-parallel-size
        # engines of --tensor-parallel-size ranks each: the attention TP
        "--tensor-parallel-size": layout.attention_tp,
        "--pipeline-parallel-size": layout.pp,
        "--max-model-len": d.max_seq_len,
        "--max-num-seqs": d.max_batch_size,
        "--max-num-batched-tokens": d.max_num_batched_tokens,
        "--async-scheduling" if async_scheduling(d, release) else "--no-async-scheduling": True,
        "--enable-prefix-caching"
        if d.enable_prefix_caching
        else "--no-enable-prefix-caching": True,
        facts.block_knob: block_flag(d),
        facts.kv_dtype_knob: dtype,
        facts.gpu_knob: budget,
    }
    if d.target_revision:  # EngineArgs.revision (vllm/engine/arg_utils.py)
        settings["--revision"] = d.target_revision
    settings.update(_state_flags(d))
    if layout.dp > 1:
        settings["--data-parallel-size"] = layout.dp
    if layout.ep > 1:
        settings["--enable-expert-parallel"] = True
    if size != "0":
        settings["--kv-offloading-backend"] = "native"
        settings[facts.host_knob] = size
    spec = d.spec.name
    if spec in facts.spec_names:
        config: dict[str, object] = {
            "method": facts.spec_names[spec],
            facts.draft_len_knob: d.lookahead_tokens,
        }
        if d.draft_source:
            config[facts.draft_model_knob] = d.draft_source
        if d.draft_revision:  # SpeculativeConfig.revision (vllm/config/speculative.py)
            config["revision"] = d.draft_revision
        config.update(facts.spec_extra.get(spec, {}))
        settings["--speculative-config"] = config
    return settings


def _notes(
    d: Deployment,
    ledger: Ledger,
    pool: VllmPool,
    offload: HostOffload | None,
    ranks: int,
    release: VllmRelease,
) -> list[str]:
    """What each setting does in vLLM, for the emitted comments."""
    facts = ENGINES["vllm"]
    notes = [
        f"# {facts.gpu_knob} is the one block pool per GPU for every layer, draft layers "
        "included; it overrides --gpu-memory-utilization",
        f"# pool: {pool.num_gpu_blocks} blocks of {pool.bytes_per_block} B (one page per "
        f"layer of the widest group), block 0 held back as the null block",
    ]
    if len(pool.groups) > 1:
        notes.append(
            f"# {len(pool.groups)} KV cache groups share the pool; a request of "
            f"max_model_len takes {pool.blocks_per_request} blocks over all groups"
        )
    if any(isinstance(x, SharedCompressedMLALayer) for x in d.target.layers):
        notes.append(
            "# DeepSeek-V4.1: fp8_ds_mla pages (584 B a latent) whatever --kv-cache-dtype, "
            f"and --block-size {block_flag(d)} for its compressed and indexer caches (SM90's "
            "kernel block, whatever --tokens-per-block says); the window caches keep 32-token "
            "blocks and each ratio-2 compressor one ring block a request"
        )
    elif any(isinstance(x, CompressedMLALayer) for x in d.target.layers):
        notes.append(
            "# DeepSeek-V4: fp8_ds_mla pages (584 B a latent) whatever --kv-cache-dtype, "
            f"and --block-size {DSV4_BLOCK} for its compressed caches (whatever "
            "--tokens-per-block says); the window and compressor-state caches keep their "
            "own 64-, 8- and 4-token blocks"
        )
    if has_index_keys(d.target.layers):
        notes.append(
            f"# MiniMax-M3: --block-size {MINIMAX_M3_BLOCK} (its sparse and indexer kernels "
            "page one 128-token sparse block; whatever --tokens-per-block says); each sparse "
            "layer keeps a bf16 index key per token beside its K/V, whatever --kv-cache-dtype"
        )
    if any(g.kind == "sliding_window" for g in pool.groups):
        notes.append(
            "# sliding-window groups are charged window - 1 + max in-flight tokens "
            f"({_in_flight_tokens(d, release)} = batches in flight x --max-num-batched-tokens) per "
            "request: a larger --max-num-batched-tokens lowers the logged capacity"
        )
    if any(g.kind == "mamba" for g in pool.groups):
        other = vllm_pool(
            replace(d, enable_prefix_caching=not d.enable_prefix_caching),
            ledger.min_stage_gpu_bytes,
            release,
        )
        on, off = (pool, other) if d.enable_prefix_caching else (other, pool)
        chosen = "on" if d.enable_prefix_caching else "off"
        # the prefill checkpoint state, where the layers keep one (mamba_setup)
        align = mamba_setup(replace(d, enable_prefix_caching=True), release)
        checkpoint = align is not None and align.states_per_request > 2 + d.lookahead_tokens
        notes.append(
            f"# prefix caching {chosen} for this hybrid model: with it on vLLM keeps "
            f"2 + K{' + 1' if checkpoint else ''} "
            f"states per request (align mode) and holds {on.max_concurrency:.2f} requests of "
            f"max_model_len; with --no-prefix-caching 1 + K states and "
            f"{off.max_concurrency:.2f} requests, but no prefix reuse"
        )
        if checkpoint and flashkda_prefill(d):
            notes.append(
                "# the + 1 is FlashKDA's prefill checkpoint (Kimi K3's KDA layers on an "
                "SM90/SM10x/SM12x GPU: kda.py resolve_kda_prefill_backend); on another GPU, "
                'or with --additional-config \'{"kda_prefill_backend": "triton"}\', vLLM '
                "keeps 2 + K and fits more requests"
            )
    host, layout = ledger.host_bytes, d.parallel
    if offload is not None:
        notes.append(
            f"# {facts.host_knob} is GiB summed over all {ranks} rank(s) "
            f"(TP {layout.tp} x PP {layout.pp}): {host} B per rank x {ranks}, rounded down"
        )
        layout_words = (
            "one copy shared by the TP ranks (replicated MLA layout)"
            if offload.copies == 1
            else "each row every rank's copy of a block"
        )
        notes.append(
            f"# vLLM pins one /dev/shm region of {offload.region_bytes} B for the engine: "
            f"{offload.cpu_blocks} CPU blocks in rows of {offload.row_bytes} B, "
            f"{layout_words}, draft layers included (give the container --shm-size or "
            "--ipc=host)"
        )
        if offload.groups > 1:
            notes.append(
                f"# each of the {offload.groups} KV cache groups stores its own copy of a "
                f"block: the host tier holds about 1/{offload.groups} of its blocks' tokens"
            )
    elif host:
        notes.append(
            f"# host budget under 0.001 GiB in all: {facts.host_knob} left unset (0 would fail)"
        )
    if d.async_scheduling and not async_scheduling(d, release):
        notes.append(
            f"# vLLM {release.version} runs ngram speculation without async scheduling (it "
            "refuses --async-scheduling with it): one batch in flight per PP stage"
        )
    return notes + stage_note(ledger)


def render(plan: Plan) -> str:
    """The ``vllm serve`` command of ``plan.engine.settings``, with comments; the
    environment it needs (the ``env.NAME`` settings) prefixes it."""
    engine = plan.engine
    lines = comment_lines(plan, "vLLM")
    prefix, flags = environment_prefix(engine.settings)
    lines.append(command_line(f"{prefix}vllm serve {shlex.quote(plan.target_source)}", flags))
    return "\n".join(lines) + "\n"


def check(d: Deployment) -> None:
    """InvalidArgumentError for what this model of vLLM does not cover.

    Besides :func:`refuse_unmodelled`: an fp8 KV cache for a model whose attention head
    sizes differ and exceed 256 (Gemma-4's 512-wide global layers). On SM90 vLLM then
    runs those layers on FlashAttention 4, whose fp8 kernel pages 64 tokens
    (``Gemma4Config.verify_and_update_config``, model_executor/models/config.py;
    ``FlashAttentionBackend._get_sm90_fa4_fp8_kv_block_size``,
    v1/attention/backends/flash_attn.py), which this model does not follow.
    """
    refuse_unmodelled(d, "vllm")
    steps, layers = d.max_draft_len, len(d.target.mtp_layers)
    if d.spec.name == "mtp" and layers and steps > layers and steps % layers:
        # SpeculativeConfig.__post_init__ (config/speculative.py): MTP layers are reused
        # in whole rounds
        raise InvalidArgumentError(
            f"vLLM refuses --speculative-config num_speculative_tokens {steps} with "
            f"{d.target.name}'s {layers} MTP layers: num_speculative_tokens:{steps} must be "
            f"divisible by n_predict={layers}; pick --max-draft-len {layers} or a multiple"
        )
    _check_compressed_split(d)
    _check_index_keys(d)
    _check_query_heads(d)
    shared = d.target.config.get("num_kv_shared_layers")
    if d.parallel.pp > 1 and isinstance(shared, int) and shared > 0:
        # Gemma-4's KV-shared layers read an earlier layer's cache by name
        # (kv_sharing_target_layer_name, gemma4.py Gemma4Attention), which a PP split
        # puts on another stage
        raise InvalidArgumentError(
            f"--engine vllm is not modelled for {d.target.name} with --pp {d.parallel.pp}: "
            f"its last {shared} layers read earlier layers' KV caches across the stages; "
            "plan --pp 1, or --engine kvbudget"
        )
    if d.kv_dtype_value.bits > 8:
        return
    for model in (d.target, *([d.draft] if d.draft else [])):
        dims = {x.head_dim for x in model.layers if isinstance(x, AttentionLayer)}
        if len(dims) > 1 and max(dims) > 256:
            raise InvalidArgumentError(
                f"--engine vllm is not modelled for {model.name} with a {d.kv_dtype} KV cache "
                f"(head sizes {sorted(dims)}: vLLM runs the widest on FlashAttention 4 with "
                "its own fp8 page); plan --kv-dtype bf16, or --engine kvbudget"
            )


def _check_index_keys(d: Deployment) -> None:
    """MiniMax-M3 where this model of vLLM does not follow it: a sparse block other than
    the kernels' 128-token page (``MiniMaxM3SparseImpl``: block size = page size = the
    sparse block), or a sub-byte KV cache (NVFP4 pages: the SM100 MSA backend only,
    ``select_main_backend_and_impl_cls``, common/sparse_attention.py)."""
    if not has_index_keys(d.target.layers):
        return
    from kvbudget.architectures.minimax_m3 import SPARSE, TEXT_DEFAULTS

    sparse = d.target.config.get(SPARSE) or TEXT_DEFAULTS[SPARSE]
    block = sparse.get("sparse_block_size") if isinstance(sparse, Mapping) else None
    if block != MINIMAX_M3_BLOCK:
        raise InvalidArgumentError(
            f"--engine vllm is not modelled for {d.target.name} with sparse_attention_config."
            f"sparse_block_size {block}: vLLM's MiniMax-M3 kernels page {MINIMAX_M3_BLOCK} "
            "tokens, one sparse block; plan it with --engine kvbudget"
        )
    if d.kv_dtype_value.bits < 8:
        raise InvalidArgumentError(
            f"--engine vllm is not modelled for {d.target.name} with a {d.kv_dtype} KV cache "
            "(MiniMax-M3 takes NVFP4 on SM100's MSA backend only, with its own pages); plan "
            "--kv-dtype bf16 or fp8"
        )


def _check_query_heads(d: Deployment) -> None:
    """Step-3.5 at a TP size that does not divide one of its layers' query heads (its
    sliding layers have their own count): ``Step3p5Attention.__init__``
    (model_executor/models/step3p5.py) asserts ``total_num_heads % tp_size == 0``."""
    from kvbudget.architectures import step3p5
    from kvbudget.config_fields import ConfigFields

    if d.target.model_type not in step3p5.STEP3P5.model_types:
        return
    tp = d.parallel.attention_tp
    heads = sorted(set(step3p5.attention_heads(ConfigFields(d.target.config, d.target.source))))
    odd = [h for h in heads if h % tp]
    if odd:
        raise InvalidArgumentError(
            f"vLLM would not run {d.target.name} at --tensor-parallel-size {tp}: its layers "
            f"have {' and '.join(map(str, heads))} query heads and each must split evenly "
            f"over the TP ranks ({odd[0]} does not); pick a --tp that divides "
            f"{math.gcd(*heads)}"
        )


def _check_compressed_split(d: Deployment) -> None:
    """DeepSeek-V4 at a TP size its heads or output groups do not split into, or under PP
    with a stage of window-only layers (compress rate 0): that
    stage's only backend (the window cache's) supports more KV cache layouts than the
    others' (FlashMLA's sparse and indexer backends: block-outermost only), and the
    engine core's ``resolve_kv_cache_layout`` (v1/attention/backends/utils.py) asserts
    "Workers disagree on supported KV cache layouts" at start-up."""
    layers = d.target.layers
    if not any(isinstance(x, CompressedMLALayer) for x in layers):
        return
    from kvbudget.engines import vllm_dsv41

    tp = d.parallel.attention_tp
    heads, groups = d.target.num_attention_heads, d.target.config.get("o_groups")
    # DeepseekV4Attention.__init__ (attention.py): ``assert n_heads % tp_size == 0``, and
    # the grouped output projection runs ``o_groups // tp`` groups a rank (none below 1)
    if heads % tp or (isinstance(groups, int) and groups % tp):
        raise InvalidArgumentError(
            f"vLLM would not run {d.target.name} at --tensor-parallel-size {tp}: its "
            f"{heads} heads and {groups} output groups (o_groups) must each split evenly "
            "over the TP ranks; pick a --tp that divides both"
        )
    if vllm_dsv41.is_v41(d):
        vllm_dsv41.check(d)
        return
    if d.parallel.pp == 1:
        return
    for stage, indices in enumerate(pp_stage_layers(d.target.num_layers, d.parallel.pp)):
        if all(
            isinstance(x, CompressedMLALayer) and x.compress_ratio == 1
            for x in (layers[i] for i in indices)
        ):
            raise InvalidArgumentError(
                f"vLLM would not start {d.target.name} with --pipeline-parallel-size "
                f"{d.parallel.pp}: stage {stage} (layers {indices.start}-{indices.stop - 1}) "
                "holds only window-only layers, whose backend's KV cache layouts differ from "
                "the other stages' (resolve_kv_cache_layout: \"Workers disagree on supported "
                'KV cache layouts"); pick a --pp that gives every stage a compressed layer'
            )


def source(release: VllmRelease) -> EngineSource:
    """Where ``release``'s sizing was read: the wheel and the files this module follows."""
    return EngineSource(
        repository="vllm-project/vllm",
        ref=release.ref,
        files=(
            "vllm/v1/core/kv_cache_utils.py",
            "vllm/v1/core/kv_cache_planning.py",
            "vllm/v1/kv_cache_interface.py",
            "vllm/platforms/interface.py",
            "vllm/config/vllm.py",
        ),
    )


def engine_model(release: VllmRelease, *, default: bool) -> EngineModel:
    """The engine model of one vLLM release (``vllm@<version>``)."""

    def plan_release(d: Deployment, ledger: Ledger) -> EnginePlan:
        return plan(d, ledger, release)

    def check_release(d: Deployment) -> None:
        if d.target.model_type in release.absent_model_types:
            raise InvalidArgumentError(
                f"vLLM {release.version} has no model for {d.target.name} (model_type "
                f"{d.target.model_type!r}); plan it with --engine vllm (vLLM {VERSION})"
            )
        check(d)
        if release.check is not None:
            release.check(d)

    return EngineModel(
        name="vllm",
        version=release.version,
        default=default,
        source=source(release),
        summary=f"vLLM {release.version}",
        plan=plan_release,
        check=check_release,
        render=render,
        spec_names=frozenset(ENGINES["vllm"].spec_names),
        memory_default=("gpu_memory_utilization", release.gpu_memory_utilization),
    )


MODEL = engine_model(RELEASE, default=True)
