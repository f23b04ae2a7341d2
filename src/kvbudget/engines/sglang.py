"""SGLang's KV pools, as its own code sizes them, and the flags that realise a plan.

Two versions (:class:`SglangRelease`): ``sglang@0.5.23`` (the PyPI wheel, what ``pip
install sglang`` gives; the default ``sglang``), checked by running that wheel's own
sizing code on CPU (``benchmarks/fidelity/sglang/sglang_fidelity.py``), and
``sglang@main@003fca80`` (:mod:`kvbudget.engines.sglang_main`), where they differ.
Facts from ``sgl-project/sglang`` @ 003fca8027387a3d6565b2c08e497e3020ac6211 unless
another commit is named (files under ``python/sglang/srt/``); each holds in 0.5.23 too
(the harness runs them) unless the release says otherwise:

* **Device pool** (``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``,
  ``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator``): the KV budget is
  ``free memory now - free memory before weights x (1 - --mem-fraction-static)``, so the
  fraction covers target and draft weights plus the KV pools. ``cell`` = bytes per token
  of the rank's target layers, scaled to ``int(cell x (1 + D / L))`` for EAGLE, EAGLE3,
  NEXTN and STANDALONE drafts of ``D`` layers (the draft priced at the *target's* per-layer
  size); ``T = budget // cell // page x page``, then ``min(T, --max-total-tokens)``
  re-aligned to the page (``_apply_token_constraints``). Every pool has ``T + page`` rows
  (page 0 takes padding writes; ``MHATokenToKVPool._kv_buffer_shapes``); ``T`` tokens are
  usable. The draft keeps its own pool of the same ``T`` tokens with its own geometry
  (``KVCacheConfigurator.configure``: the draft worker reuses the target's config).
* **Sliding windows** (``configs/model_config.py`` @ 001adf56 ``is_hybrid_swa_model``): only
  allow-listed architectures (gpt-oss, Llama-4, ...) get a separate sliding pool; Gemma-2/3
  and Mistral keep every layer in the full pool at full length. Hybrid pools
  (``HybridSWAPoolConfigurator``): ``cell = F x (full layers + D) + r x S x sliding layers``
  with ``r = --swa-full-tokens-ratio`` (default 0.8); ``full = int(budget // cell)``
  page-aligned and capped by ``--max-total-tokens``; ``swa = int(full x r)`` page-aligned;
  refused when ``window + page >= swa``.
* **Host pools** (``mem_cache/pool_host/base.py`` @ 712c0617 ``HostKVCache``): ``tokens =
  int(GB x 1e9 // bytes_per_token)``, then ``(tokens // page + 1) x page`` (always one
  page more). ``--hicache-size`` is decimal GB per rank, an int; 0 means unset. Sliding
  hybrids split it between full and sliding host pools by their device bytes
  (``mem_cache/hybrid_cache/hybrid_pool_assembler.py`` @ 00343773, PR #32373). NEXTN/MTP
  draft layers are packed into the target's host pool (inside ``--hicache-size``); EAGLE3
  heads and draft models get a sidecar host pool of the target's host tokens plus one page
  *on top* (PR #30393; PR #35875, which would include it, is open); in 0.5.23
  (``build_full_draft_pools``) the sidecar has the host group's logical size, no page more.
* **Start-up checks** (0.5.23 wheel): a draft whose config derives a shorter context than
  ``--context-length`` (``configs/model_config.py`` ``ModelConfig._derive_context_length``:
  ``get_context_length`` of the draft's config, reached from
  ``model_runner_components/spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``)
  raises "Target model's context_length (...) is greater than the derived context_length"
  unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``: the command is emitted with it,
  and a warning. NGRAM takes ``--speculative-ngram-max-bfs-breadth`` (default 10) as its
  top-k (``arg_groups/speculative_hook.py`` ``_handle_ngram``), refused above 1 with
  ``--page-size`` > 1 outside flashinfer, and refuses DP attention: breadth 1 is emitted
  and NGRAM with DP attention refused in SGLang's words.
* **Hybrid state** (Qwen3-Next, Qwen3.5, Nemotron-H, Kimi-Linear and Kimi K3's KDA
  layers beside MLA: :mod:`kvbudget.engines.sglang_kimi`; 0.5.23 wheel,
  :mod:`kvbudget.engines.sglang_state`): the Mamba pool's slots (``--max-mamba-cache-size``,
  emitted with ``--mamba-radix-cache-strategy``) come out of the budget first, the KV pool
  of the full-attention layers takes the rest (``_handle_max_mamba_cache``, then
  ``DefaultPoolConfigurator`` over the full-attention layers); running requests are those
  whose state fits SGLang's default state share (``--mamba-full-memory-ratio`` 0.9). With
  HiCache the state host pool (``MambaPoolHost``) and the KV host pool split
  ``--hicache-size`` by device bytes (``build_hybrid_mamba_stack``).
* **DSA** (DeepSeek-V3.2; 0.5.23 wheel): ``DSATokenToKVPool`` keeps the indexer key (132 B
  per layer) beside the latent, ``T + page`` rows each, on 64-token pages; with an fp8 KV
  cache the latent takes SGLang's scaled layout (656 B); the MTP draft has its own latent
  and indexer; the indexer host pool (``DSAIndexerPoolHost``) has the MLA host pool's
  tokens, on top of ``--hicache-size``.
* **MiniMax-M3** (0.5.23 wheel, :mod:`kvbudget.engines.sglang_minimax`):
  ``MiniMaxSparseKVPool`` keeps K/V of every layer and one replicated index head per
  sparse layer (index K and V unless ``sparse_disable_index_value``), ``T + page`` rows
  each, priced per token by the same ``_compute_cell_size``; the index host pool has the
  main host pool's tokens, on top of ``--hicache-size``; EAGLE3 heads as for any target;
  no MTP draft.
* **Memory in use before weights** (``_profile_available_bytes``): the fraction multiplies
  what is free when SGLang measures before loading (``measure_pre_model_load_memory``),
  i.e. the GPU's memory less what the CUDA context and NCCL hold then. kvbudget allows
  ``pre_load_bytes`` for it (default :data:`DEFAULT_PRE_LOAD_BYTES`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Any

from kvbudget.cost import pp_stage_layers
from kvbudget.engines import (
    sglang_dsv4,
    sglang_gemma4,
    sglang_kimi,
    sglang_memory,
    sglang_minimax,
    sglang_step3p5,
)
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import (
    GB,
    GIB,
    auto_note,
    cdiv,
    check_block,
    command_line,
    comment_lines,
    engine_capacity,
    environment_prefix,
    kv_dtype_name,
    refuse_unmodelled,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.engines.sglang_context import context_check
from kvbudget.engines.sglang_state import (
    DEFAULT_STRATEGY,
    StateLayout,
    slots_per_request,
    state_layout,
)
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer, MLALayer
from kvbudget.plan_types import (
    EnginePlan,
    EngineSource,
    Plan,
    PoolKind,
    PoolPlan,
    PoolRole,
)
from kvbudget.split import Tier
from kvbudget.units import count_of

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

VERSION = "0.5.23"
# memory in use on a rank before the weights load (CUDA context, NCCL, torch.distributed):
# sgl-project/sglang PR #11716's start-up log on 8 x H200 at TP 8 reads "Load weight
# begin. avail mem=137.29 GB" (GiB, get_available_gpu_memory) on the least free rank,
# 2.43 GiB below an H200's 139.72 GiB (150,021,734,400 B); rounded up to 2.5 GiB
DEFAULT_PRE_LOAD_BYTES = 5 * 1024**3 // 2


@dataclass(frozen=True, kw_only=True)
class SglangRelease:
    """What differs between the SGLang versions kvbudget models.

    ``sidecar_host_padding_page``: a sidecar draft's host pool has one page more than the
    target's host pool (main@003fca80), or the same logical size (0.5.23).
    ``hybrid_pools``: the Mamba / Gated DeltaNet state pools and DSA indexer pools are
    modelled (read and run in 0.5.23's wheel only; refused for a release they were not
    checked against).
    """

    version: str
    ref: str
    default: bool
    sidecar_host_padding_page: bool
    hybrid_pools: bool = True


# model_type of the architectures is_hybrid_swa_model allow-lists (GptOss, Llama4,
# Step3p5ForCausalLM: sglang_step3p5, 0.5.23 only; Gemma4ForConditionalGeneration:
# sglang_gemma4, 0.5.23 only, ...)
HYBRID_SWA_MODEL_TYPES = frozenset({"gpt_oss", "llama4", "step3p5", "gemma4"})
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
DSA_PAGE_TOKENS = 64
# --mamba-full-memory-ratio's fallback, 0.9, in tenths (arg_groups/fields/schedule.py)
MAMBA_FULL_MEMORY_RATIO_TENTHS = 9
# kept free of the computed --mem-fraction-static for small allocations SGLang makes
# before it profiles (buffers besides the weights); a plan's KV is capped by
# --max-total-tokens anyway, so the margin never adds KV
PROFILE_MARGIN_BYTES = 512 * 1024**2


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Bytes per token of SGLang's pools on one rank.

    ``full``: target layers in the full pool (every target layer unless the model is a
    sliding hybrid); ``swa``: sliding layers of a hybrid; ``draft``: the draft pool
    (sidecar) or the packed MTP layers, over the full pool's rows, or the sliding pool's
    with ``draft_in_swa`` (Step-3.5's MTP runners: :mod:`kvbudget.engines.sglang_step3p5`);
    ``cell``: the per-token figure SGLang budgets with (its draft approximation included;
    a float for hybrids, whose ratio is one): ``cell_draft_layers`` draft layers at a
    full layer's size (None: ``draft_layers``) and ``cell_draft_swa`` bytes of draft
    layers in the sliding share.
    """

    full: int
    full_layers: int
    swa: int
    swa_layers: int
    window: int | None
    draft: int
    draft_layers: int
    packed_draft: bool
    per_layer_full: int  # F: one target full layer's bytes per token
    state: StateLayout | None = None  # Mamba / Gated DeltaNet layers (MambaPool)
    indexer: int = 0  # of ``full``: DSA indexer keys (DSATokenToKVPool)
    draft_indexer: int = 0  # of ``draft``
    # a Gemma-4 assistant's fixed dummy pool (sglang_gemma4.frozen_pool_bytes): its
    # layers are priced in ``draft_layers`` but hold no rows of the full pool
    frozen_draft_bytes: int = 0
    draft_in_swa: bool = False
    cell_draft_layers: int | None = None
    cell_draft_swa: int = 0

    def cell(self, ratio: float) -> float:
        """SGLang's per-token budget figure (``_compute_cell_size`` / hybrid ``cell``)."""
        priced = self.draft_layers if self.cell_draft_layers is None else self.cell_draft_layers
        if self.swa_layers:
            full = self.per_layer_full * (self.full_layers + priced)
            return full + ratio * (self.swa + self.cell_draft_swa)
        if not priced:
            return self.full
        return int(self.full * (1 + priced / self.full_layers))


@dataclass(frozen=True, kw_only=True)
class Pools:
    """Tokens SGLang allocates on one rank: device pools and host pools."""

    full_tokens: int
    swa_tokens: int
    device_bytes: int
    host_full_tokens: int = 0
    host_swa_tokens: int = 0
    host_draft_tokens: int = 0
    host_state_slots: int = 0
    host_bytes: int = 0


def is_dsa(d: Deployment) -> bool:
    """DeepSeek-V3.2's sparse attention: MLA layers with an indexer key."""
    return any(isinstance(x, MLALayer) and x.index_head_dim for x in d.target.layers)


def page_tokens(d: Deployment) -> int:
    """SGLang's page: ``--page-size``, raised to 64 for DSA models (ServerArgs
    resolution, 0.5.23: the DSA kernels take 64-token pages), which is emitted."""
    return DSA_PAGE_TOKENS if is_dsa(d) else d.tokens_per_block


def layer_bytes_per_token(layer: Layer, d: Deployment, tp: int) -> int:
    """One layer's bytes per token in SGLang's pools.

    A DSA layer (``DSATokenToKVPool``) holds the MLA latent and the indexer key (fp8 plus
    one fp32 scale per 128, uint8 storage, ``_compute_dsa_indexer_cell_size``); with an
    fp8 KV cache its latent takes SGLang's scaled layout (``calculate_mla_kv_cache_dim``):
    ``kv_lora_rank`` fp8 values, their scales (4 B per 128) and the rope part in bf16.
    A MiniMax-M3 layer's bytes are its ``MiniMaxSparseKVPool``'s
    (:func:`kvbudget.engines.sglang_minimax.layer_bytes`).
    """
    if sglang_minimax.is_minimax_m3(d):
        return sglang_minimax.layer_bytes(layer, d, tp)
    if isinstance(layer, MLALayer) and layer.index_head_dim and d.kv_dtype_value.bits == 8:
        rank = layer.kv_lora_rank
        latent = rank + rank // 128 * 4 + layer.qk_rope_head_dim * 2
        return latent + layer.index_head_dim + layer.index_head_dim // 128 * 4
    return layer.bytes_per_token(d.kv_dtype_value, tp)


def layout(d: Deployment, stage: int) -> Layout:
    """SGLang's per-token bytes for PP stage ``stage`` (drafts on the last stage)."""
    target = d.target
    # Gemma-4: every layer (KV-shared ones too) at its type's shape (sglang_gemma4)
    own = sglang_gemma4.pool_layers(d) if sglang_gemma4.is_gemma4(d) else target.layers
    layers = [own[i] for i in pp_stage_layers(target.num_layers, d.parallel.pp)[stage]]
    state = state_layout(d, [*layers, *target.mtp_layers])
    if state is not None and d.parallel.pp > 1:
        raise InvalidArgumentError(
            "--engine sglang is modelled for Mamba / Gated DeltaNet state pools at --pp 1 "
            "(SGLang charges every stage the largest stage's state: "
            "_handle_max_mamba_cache); plan --pp 1"
        )
    hybrid = target.model_type in HYBRID_SWA_MODEL_TYPES and (
        not sglang_step3p5.is_step3p5(d) or sglang_step3p5.sliding_pool(d)
    )

    def per_token(ls: Sequence[Layer]) -> int:
        return sum(layer_bytes_per_token(x, d, d.parallel.attention_tp) for x in ls)

    cached = [x for x in layers if layer_bytes_per_token(x, d, d.parallel.attention_tp)]
    # Llama-4's chunked layers go to the SWA pool with the chunk as window
    # (model_runner: sliding_window_size = attention_chunk_size); SGLang takes them as
    # layers (i + 1) % 4 != 0 (model_config.get_hybrid_layer_ids @ 001adf56), which is
    # the default no_rope_layers pattern kvbudget reads
    sliding = [x for x in cached if hybrid and x.sliding_window is not None]
    full = [x for x in cached if x not in sliding]
    draft: list[Layer] = []
    packed = False
    if stage == d.parallel.pp - 1:
        if d.spec.name == "mtp":
            draft, packed = list(target.mtp_layers), True
        elif d.draft is not None:
            draft = [x for x in d.draft.layers if layer_bytes_per_token(x, d, 1)]
    windows = {x.sliding_window for x in sliding}
    frozen = sglang_gemma4.assistant_layers(d) if stage == d.parallel.pp - 1 else 0
    lay = Layout(
        full=per_token(full),
        full_layers=len(full),
        swa=per_token(sliding),
        swa_layers=len(sliding),
        window=max(w for w in windows if w is not None) if sliding else None,
        draft=per_token(draft),
        draft_layers=len(draft) + frozen,
        packed_draft=packed and not frozen,
        per_layer_full=layer_bytes_per_token(full[0], d, d.parallel.attention_tp) if full else 0,
        state=state,
        indexer=sum(_indexer_bytes(x, d) for x in full),
        draft_indexer=sum(_indexer_bytes(x, d) for x in draft),
        frozen_draft_bytes=sglang_gemma4.frozen_pool_bytes(d, page_tokens(d)) if frozen else 0,
    )
    return sglang_step3p5.mtp_layout(d, lay)


def _indexer_bytes(layer: Layer, d: Deployment) -> int:
    """A DSA layer's indexer key per token: fp8 values plus a 4-byte scale per 128; a
    MiniMax-M3 sparse layer's index pool row (:func:`sglang_minimax.index_bytes`)."""
    if sglang_minimax.is_minimax_m3(d):
        return sglang_minimax.index_bytes(layer, d)
    if isinstance(layer, MLALayer) and layer.index_head_dim:
        return layer.index_head_dim + layer.index_head_dim // 128 * 4
    return 0


def allocate(
    lay: Layout, budget_bytes: int, page: int, max_total_tokens: int | None, ratio: float
) -> tuple[int, int]:
    """Forward: the (full, swa) tokens SGLang makes from a profiled KV budget.

    ``_profile_available_bytes`` -> ``calculate_pool_sizes`` (or the hybrid solver) ->
    ``_apply_token_constraints``, as the module docstring gives them.
    """
    cell = lay.cell(ratio)
    if lay.swa_layers:
        full = int(budget_bytes // cell) // page * page
        if max_total_tokens is not None:
            full = min(full, max_total_tokens) // page * page
        return full, int(full * ratio) // page * page
    tokens = int(budget_bytes // cell) // page * page
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens) // page * page
    return tokens, 0


def device_bytes(lay: Layout, full: int, swa: int, page: int) -> int:
    """Bytes SGLang's device pools really take: ``T + page`` rows per pool."""
    draft_rows = swa if lay.draft_in_swa else full
    total = (full + page) * lay.full + (draft_rows + page) * lay.draft + lay.frozen_draft_bytes
    if lay.swa_layers:
        total += (swa + page) * lay.swa
    return total


def host_pools(
    lay: Layout,
    hicache_gb: int,
    full: int,
    swa: int,
    page: int,
    *,
    sidecar_page: bool = False,
    state_device_bytes: int = 0,
) -> Pools:
    """Forward: the host pools ``--hicache-size hicache_gb`` makes (``HostKVCache``);
    ``sidecar_page``: the sidecar draft pool has one page more (main@003fca80);
    ``state_device_bytes``: the device ``MambaPool``'s size as HiCache reads it
    (``get_kv_size_bytes``: slots and speculative buffers, the latter at their logical
    size, which is what ``_handle_max_mamba_cache`` reserves)."""

    def tokens(gb: float, per_token: int) -> int:
        return (int(gb * 1e9 // per_token) // page + 1) * page

    spt_full = lay.full + (lay.draft if lay.packed_draft else 0)
    # DSA (_DsaStrategy): --hicache-size sizes the MLA host pool alone; the indexer host
    # pool (DSAIndexerPoolHost) has its tokens and comes on top
    spt_indexer = lay.indexer + (lay.draft_indexer if lay.packed_draft else 0)
    spt_full -= spt_indexer
    state_slots = 0
    if lay.state is not None:
        # build_hybrid_mamba_stack: _split_hicache_size over (KV pool, MambaPool) by
        # device bytes; MambaPoolHost has one slot per page (page_size 1) and one more
        dev_full = (full + page) * lay.full
        share = dev_full + state_device_bytes
        host_full = tokens(hicache_gb * dev_full / share, spt_full)
        per_slot = lay.state.per_request_bytes
        state_slots = int(hicache_gb * state_device_bytes / share * 1e9 // per_slot) + 1
        host_swa = 0
    elif lay.swa_layers:
        dev_full = (full + page) * lay.full
        dev_swa = (swa + page) * lay.swa
        share = dev_full + dev_swa
        host_full = tokens(hicache_gb * dev_full / share, spt_full)
        host_swa = tokens(hicache_gb * dev_swa / share, lay.swa)
    else:
        host_full, host_swa = tokens(hicache_gb, spt_full), 0
    extra = page if sidecar_page else 0
    sidecar = host_full + extra if lay.draft and not lay.packed_draft else 0
    pinned = host_full * (spt_full + spt_indexer) + host_swa * lay.swa + sidecar * lay.draft
    if lay.state is not None:
        pinned += state_slots * lay.state.per_request_bytes
    return Pools(
        full_tokens=full,
        swa_tokens=swa,
        device_bytes=device_bytes(lay, full, swa, page),
        host_full_tokens=host_full,
        host_swa_tokens=host_swa,
        host_draft_tokens=sidecar,
        host_state_slots=state_slots,
        host_bytes=pinned,
    )


def _swa_tokens_needed(lay: Layout, d: Deployment) -> int:
    """Sliding-pool tokens for ``max_batch_size`` running requests plus a prefill chunk.

    Per request the window, the lookahead and two pages of alignment (the same terms as
    SGLang's ``SWAChunkCapPoolConfigurator``: window + draft tokens + page + decode page).
    """
    assert lay.window is not None
    page = page_tokens(d)
    per_request = min(lay.window, d.max_seq_len) + d.lookahead_tokens + 1 + 2 * page
    need = d.max_batch_size * per_request + d.max_num_batched_tokens + page
    return max(cdiv(need, page) * page, (lay.window + page) // page * page + page)


def _ratio_for(swa: int, full: int) -> float:
    """The smallest 3-decimal ratio with ``int(full x r) // page x page >= swa``."""
    value = (Decimal(swa) / Decimal(full)).quantize(Decimal("0.001"), rounding=ROUND_CEILING)
    return float(value)


@dataclass(frozen=True, kw_only=True)
class StatePlan:
    """SGLang's Mamba state pool on one DP worker, set by ``--max-mamba-cache-size``.

    ``slots``: state slots (``max_mamba_cache_size`` per worker), ``running`` requests x
    ``slots_per_request``; ``spec_slots``: rows of the speculative buffers (running + 1);
    ``pool_bytes`` / ``spec_bytes``: what ``MambaPool`` allocates; ``reserved_bytes``:
    what ``_handle_max_mamba_cache`` takes out of the profiled budget for both.
    """

    strategy: str
    slots_per_request: int
    running: int
    slots: int
    draft_tokens: int | None
    pool_bytes: int
    spec_bytes: int
    reserved_bytes: int

    @property
    def bytes(self) -> int:
        """Every state buffer the pool allocates."""
        return self.pool_bytes + self.spec_bytes


def state_plan(
    d: Deployment, st: StateLayout, budget_bytes: int, strategy: str = DEFAULT_STRATEGY
) -> StatePlan:
    """The state pool for ``--max-running-requests`` (per worker) running requests, each
    with its ``--mamba-radix-cache-strategy`` slots (``_handle_max_mamba_cache``, its
    explicit-size branch), or for fewer: the most whose reservation fits SGLang's own
    default state share of the budget, ``mamba_full_memory_ratio / (1 +
    mamba_full_memory_ratio)`` (0.9 / 1.9, ``arg_groups/fields/schedule.py``)."""
    attn_dp = attn_dp_of(d)
    per_request = slots_per_request(strategy)
    draft_tokens = d.lookahead_tokens + 1 if d.spec.name in ENGINES["sglang"].spec_names else None
    spec_rows = draft_tokens or 0
    # reserved(n) = per_req x (n x slots_per_request + 1 + (n + 1) x D)
    share = budget_bytes * MAMBA_FULL_MEMORY_RATIO_TENTHS // (10 + MAMBA_FULL_MEMORY_RATIO_TENTHS)
    fits = (share // st.per_request_bytes - 1 - spec_rows) // (per_request + spec_rows)
    running = min(max(1, d.max_batch_size // attn_dp), fits)
    if running < 1:
        raise InfeasibleBudgetError(
            f"SGLang's Mamba state for one request ({per_request} slots of "
            f"{st.per_request_bytes} B{' and its speculative buffers' if spec_rows else ''}) "
            f"does not fit {share} B, SGLang's default state share of {budget_bytes} B per "
            "rank; raise --kv-budget or --tp"
        )
    slots = running * per_request
    spec = st.spec_pool_bytes(running, draft_tokens) if draft_tokens else 0
    reserved = st.slot_pool_bytes(slots) + (
        st.spec_reserved_bytes(running, draft_tokens) if draft_tokens else 0
    )
    return StatePlan(
        strategy=strategy,
        slots_per_request=per_request,
        running=running,
        slots=slots,
        draft_tokens=draft_tokens,
        pool_bytes=st.slot_pool_bytes(slots),
        spec_bytes=spec,
        reserved_bytes=reserved,
    )


@dataclass(frozen=True, kw_only=True)
class SglangPlan:
    """The pools kvbudget plans for SGLang and the settings that produce them."""

    layout: Layout
    full_tokens: int
    swa_tokens: int
    ratio: float | None
    device_bytes: int
    budget_bytes: int  # what SGLang must profile for T to fit (its own cell)
    state: StatePlan | None = None


def plan_stage(d: Deployment, stage: int, budget: int) -> SglangPlan:
    """Backward: the largest page-aligned T whose real pools fit ``budget`` bytes beside
    a Mamba state pool counted at what SGLang's profile takes out for it, its reservation
    where that is more than it allocates (so that the emitted ``--mem-fraction-static``
    is the one the budget was derived under)."""
    lay = layout(d, stage)
    page = page_tokens(d)
    if not lay.full and not lay.swa:
        raise InvalidArgumentError(f"{d.target.name} caches nothing for SGLang to size")
    state = state_plan(d, lay.state, budget) if lay.state is not None else None
    if state is not None:
        budget -= max(state.bytes, state.reserved_bytes)
    swa = _swa_tokens_needed(lay, d) if lay.swa_layers else 0
    swa_side = lay.swa + (lay.draft if lay.draft_in_swa else 0)  # bytes per sliding row
    fixed = (swa + page) * swa_side if lay.swa_layers else 0
    slope = lay.full + (0 if lay.draft_in_swa else lay.draft)
    full = ((budget - fixed) // slope - page) // page * page if slope else 0
    if lay.swa_layers and full < swa:
        # the sliding pool cannot outgrow the full pool (ratio at most 1): both pools
        # get the same tokens, fewer requests' windows than max_batch_size
        full = (budget // (slope + swa_side) - page) // page * page
    ratio = None
    while full > 0:
        if lay.swa_layers:
            # --swa-full-tokens-ratio must be in (0, 1] (ServerArgs resolution refuses
            # more): a sliding pool never outgrows the full pool
            ratio = min(_ratio_for(swa, full), 1.0)
            swa_got = int(full * ratio) // page * page
        else:
            swa_got = 0
        if device_bytes(lay, full, swa_got, page) <= budget:
            swa = swa_got
            break
        full -= page
    if full <= 0:
        raise InfeasibleBudgetError(
            f"SGLang's pools do not fit {budget} bytes per rank: the sliding pool for "
            f"{d.max_batch_size} requests ({swa} tokens) leaves no full-attention "
            "tokens; lower --max-batch-size or raise --kv-budget"
        )
    profiled = (full + page) * lay.cell(ratio or 0.0)
    return SglangPlan(
        layout=lay,
        full_tokens=full,
        swa_tokens=swa,
        ratio=ratio,
        device_bytes=device_bytes(lay, full, swa, page),
        budget_bytes=int(profiled) + 1 + (state.reserved_bytes if state else 0),
        state=state,
    )


def _hicache_gb(
    lay: Layout,
    host_bytes: int,
    full: int,
    swa: int,
    page: int,
    sidecar_page: bool,
    state_device_bytes: int = 0,
) -> int:
    """The largest whole ``--hicache-size`` whose host pools (sidecar too) fit ``host_bytes``."""
    gb = host_bytes // GB

    def pinned(gb: int) -> int:
        return host_pools(
            lay,
            gb,
            full,
            swa,
            page,
            sidecar_page=sidecar_page,
            state_device_bytes=state_device_bytes,
        ).host_bytes

    while gb > 0 and pinned(gb) > host_bytes:
        gb -= 1
    return gb


def pre_load_bytes(d: Deployment) -> int:
    """Memory taken on a rank before the weights load: the deployment's, or the default."""
    return DEFAULT_PRE_LOAD_BYTES if d.pre_load_bytes is None else d.pre_load_bytes


def _mem_fraction(d: Deployment, weights_bytes: int | None, profiled_bytes: int) -> str | None:
    """``--mem-fraction-static`` so the profiled budget holds ``profiled_bytes``.

    SGLang profiles ``free now - free before weights x (1 - fraction)`` with ``free now =
    free before weights - weights`` (``_profile_available_bytes``), so ``fraction x (memory
    - pre_load_bytes) >= weights + KV budget (+ margin)``, rounded up to 3 decimals; None
    when the GPU memory or the weights are unknown.
    """
    if d.gpu_rule.memory_bytes is None or weights_bytes is None:
        return None
    memory = d.gpu_rule.memory_bytes - pre_load_bytes(d)
    need = weights_bytes + profiled_bytes + PROFILE_MARGIN_BYTES
    value = (Decimal(need) / Decimal(memory)).quantize(Decimal("0.001"), rounding=ROUND_CEILING)
    return str(value)


def _stage_budget(d: Deployment, ledger: Ledger) -> int:
    """The bytes per rank SGLang's pools may take: the ledger's, less, where the budget
    was derived from the GPU's memory beside the ledger's weights, the weights SGLang
    loads beyond them (Step-3.5's MTP runners' embeddings), which take that memory."""
    extra = sglang_step3p5.draft_embedding_bytes(d) if d.gpu_rule.derived else 0
    if extra >= ledger.min_stage_gpu_bytes:
        raise InfeasibleBudgetError(
            f"the {extra:,} B of embeddings SGLang's MTP draft runners load beside the "
            f"weights leave nothing of the {ledger.min_stage_gpu_bytes:,} B KV budget per "
            "rank; raise the memory fraction or --tp, or lower --max-draft-len"
        )
    return ledger.min_stage_gpu_bytes - extra


def plan(d: Deployment, ledger: Ledger, release: SglangRelease | None = None) -> EnginePlan:
    """SGLang's plan for ``d`` under ``release`` (default 0.5.23): its pools, flags and
    start-up lines."""
    release = release or RELEASE
    facts = ENGINES["sglang"]
    check_block(d.tokens_per_block, facts)
    if sglang_dsv4.is_dsv4(d):
        return _plan_dsv4(d, ledger, release)
    dtype = kv_dtype_name(d.kv_dtype, facts)
    page = page_tokens(d)
    stages = [plan_stage(d, s, _stage_budget(d, ledger)) for s in range(d.parallel.pp)]
    chosen = min(stages, key=lambda st: st.full_tokens)
    lay = stages[-1].layout  # the last stage holds the draft
    full, swa = chosen.full_tokens, chosen.swa_tokens
    side_page = release.sidecar_host_padding_page
    state = chosen.state
    state_dev = state.reserved_bytes if state else 0
    gb = _hicache_gb(lay, ledger.host_bytes, full, swa, page, side_page, state_dev)
    sglang_step3p5.check_hicache(d, gb)
    host = (
        host_pools(lay, gb, full, swa, page, sidecar_page=side_page, state_device_bytes=state_dev)
        if gb
        else None
    )
    profiled = max(st.budget_bytes for st in stages)
    # weights as SGLang loads them: the ledger's, and Step-3.5's MTP runners' embeddings
    weights = sglang_step3p5.loaded_weights_bytes(d, ledger.max_weights_bytes)
    fraction = _mem_fraction(d, weights, profiled)
    sequences = min(full // (d.max_seq_len + d.lookahead_tokens), d.max_batch_size)
    if state is not None:
        sequences = min(sequences, state.running)
    capacity = engine_capacity(
        d,
        tokens=full,
        tokens_per_block=page,
        gpu_blocks=full // page,
        host_blocks=host.host_full_tokens // page if host else 0,
        host_tokens=host.host_full_tokens if host else 0,
        max_concurrency=sequences,
    )
    context = context_check(d)
    warnings = list(context.warnings) + sglang_step3p5.warnings(d)
    if lay.swa_layers and swa < _swa_tokens_needed(lay, d):
        warnings.append(
            f"SGLang's sliding pool ({swa} tokens, --swa-full-tokens-ratio at its maximum "
            f"1) is smaller than the {_swa_tokens_needed(lay, d)} tokens "
            f"{d.max_batch_size} running requests' windows take; fewer run at once"
        )
    if state is not None and state.running < max(1, d.max_batch_size // attn_dp_of(d)):
        warnings.append(
            f"SGLang's Mamba state pool holds {count_of(state.running, 'running request')} "
            f"per worker ({state.slots_per_request} state slots each under "
            f"--mamba-radix-cache-strategy {state.strategy}) within its default state share "
            "of the budget (--mamba-full-memory-ratio 0.9); --max-running-requests is "
            "lowered to it"
        )
    settings = (
        _settings(d, dtype, chosen, lay, gb if host else 0, fraction)
        | _state_settings(d, state)
        | dict(context.environment)
    )
    # below the state cap, which the warning above names: the pool's tokens bind
    if sequences < d.max_batch_size and (state is None or sequences < state.running):
        warnings.append(
            f"SGLang's pool holds {count_of(sequences, 'request')} of {d.max_seq_len} "
            "tokens at once "
            f"(--max-running-requests {settings['--max-running-requests']}); shorter "
            "requests share it"
        )
    return EnginePlan(
        name="sglang",
        version=release.version,
        source=_source(release),
        pools=_pools(lay, full, swa, page, host) + _state_pools(state),
        capacity=capacity,
        settings=settings,
        log=_log(d, lay, chosen, host),
        notes=tuple(
            _notes(d, ledger, lay, chosen, host, fraction, profiled)
            + auto_note(d.kv_dtype, facts, dtype)
        ),
        warnings=tuple(warnings),
        detail={
            # SGLang's get_context_length of the target's text config
            "derived_context_length": context.target_tokens,
            "max_total_num_tokens": full,
            "max_running_requests": _max_running_requests(d, full, state),
            "weights_bytes": weights,
            "swa_tokens": swa if lay.swa_layers else None,
            "swa_full_tokens_ratio": chosen.ratio,
            "draft_tokens": full if lay.draft and not lay.packed_draft else None,
            "device_bytes": chosen.device_bytes,
            "profiled_budget_bytes": profiled,
            "mem_fraction_static": fraction,
            "host_tokens": host.host_full_tokens if host else 0,
            "host_swa_tokens": host.host_swa_tokens if host else 0,
            "host_draft_tokens": host.host_draft_tokens if host else 0,
            "host_state_slots": host.host_state_slots if host else 0,
            "indexer_bytes": (full + page) * lay.indexer if lay.indexer else None,
            "host_indexer_bytes": (
                host.host_full_tokens
                * (lay.indexer + (lay.draft_indexer if lay.packed_draft else 0))
                if host and lay.indexer
                else None
            ),
            "host_bytes": host.host_bytes if host else 0,
            "hicache_size_gb": gb,
            "pre_load_bytes": pre_load_bytes(d),
            "mamba_cache_slots": state.slots if state else None,
            "mamba_state_bytes": state.bytes if state else None,
            "mamba_reserved_bytes": state.reserved_bytes if state else None,
        },
    )


def _plan_dsv4(d: Deployment, ledger: Ledger, release: SglangRelease) -> EnginePlan:
    """DeepSeek-V4's (and V4.1's) plan (:mod:`kvbudget.engines.sglang_dsv4`): the most full tokens
    whose pools fit the rank's KV budget, pinned by ``--max-total-tokens``."""
    sglang_dsv4.check(d, host_bytes=ledger.host_bytes)
    facts = ENGINES["sglang"]
    dtype = kv_dtype_name(d.kv_dtype, facts)
    if dtype not in sglang_dsv4.KV_DTYPES:
        raise InvalidArgumentError(
            f"SGLang keeps DeepSeek-V4's latents in its 584-byte fp8 row and fails at "
            f"start-up on --kv-cache-dtype {dtype} (DeepSeekV4SingleKVPool.create_buffer "
            "asserts a uint8 store); pass --kv-dtype fp8 or auto"
        )
    lay = sglang_dsv4.layout_of(d)
    budget = ledger.min_stage_gpu_bytes
    p = sglang_dsv4.largest_pools(d, lay, budget)
    if p is None:
        raise InfeasibleBudgetError(
            f"SGLang's DeepSeek-V4 pools need a sliding pool of more than "
            f"{lay.window + sglang_dsv4.PAGE_TOKENS} tokens (validate_swa_pool_size) at "
            f"--swa-full-tokens-ratio {sglang_dsv4.SWA_FULL_TOKENS_RATIO}; {budget:,} B of KV "
            "budget per rank do not hold them; raise --kv-budget"
        )
    page = sglang_dsv4.PAGE_TOKENS
    fraction = _mem_fraction(d, ledger.max_weights_bytes, budget)
    context = context_check(d)
    warnings = list(context.warnings)
    if d.kv_dtype != "fp8":
        warnings.append(
            "SGLang keeps DeepSeek-V4's cache in fp8 whatever the checkpoint's dtype "
            "(--kv-cache-dtype auto resolves to fp8_e4m3: arg_groups/overrides.py "
            f"_deepseek_v4_kv_cache_dtype); the plan's pools are those fp8 rows, not {d.kv_dtype}"
        )
    sequences = min(p.full // (d.max_seq_len + d.lookahead_tokens), d.max_batch_size)
    settings = _dsv4_settings(d, p, dtype, fraction) | dict(context.environment)
    return EnginePlan(
        name="sglang",
        version=release.version,
        source=_source(release),
        pools=_dsv4_pools(lay, p),
        capacity=engine_capacity(
            d,
            tokens=p.full,
            tokens_per_block=page,
            gpu_blocks=p.full // page,
            host_blocks=0,
            host_tokens=0,
            max_concurrency=sequences,
        ),
        settings=settings,
        log=(
            f"DSV4 pool sizes: full={p.full}, swa={p.swa}, c4={p.c4}, c128={p.c128}, "
            f"c4_state={p.c4_state}, c128_state=0",
        ),
        notes=(
            f"# {facts.token_knob} is the full pool's tokens; the sliding pool holds "
            f"{p.swa} (--swa-full-tokens-ratio), "
            + (
                "each ratio-1 / ratio-2 KV source all of them / half of them, with fp4 "
                "indexer keys and (ratio 2) a float32 pair state per request"
                if sglang_dsv4.is_v41(d)
                else "the ratio-4 and ratio-128 pools 1/4 and 1/128 of them, with the "
                "indexer keys and the compressors' float32 states"
            ),
            "# SGLang sets --page-size 256 and --kv-cache-dtype fp8_e4m3 for DeepSeek-V4"
            + (" and V4.1" if sglang_dsv4.is_v41(d) else ""),
            *_dsv4_draft_notes(d, lay, p),
        ),
        warnings=tuple(warnings),
        detail={
            # SGLang's get_context_length of the target's text config
            "derived_context_length": context.target_tokens,
            "max_total_num_tokens": p.full,
            "max_running_requests": p.running,
            "weights_bytes": ledger.max_weights_bytes,
            "swa_tokens": p.swa,
            "swa_full_tokens_ratio": sglang_dsv4.SWA_FULL_TOKENS_RATIO,
            "device_bytes": p.total_bytes,
            "draft_bytes": p.draft_swa_bytes or None,
            "profiled_budget_bytes": budget,
            "mem_fraction_static": fraction,
            "indexer_bytes": p.all_indexer_bytes or None,
            "c4_tokens": p.c4,
            "c128_tokens": p.c128,
            "c4_state_rows": p.c4_state,
            "c128_state_rows": p.c128_state,
            "pre_load_bytes": pre_load_bytes(d),
        },
    )


def _dsv4_draft_notes(
    d: Deployment, lay: sglang_dsv4.Dsv4Layout, p: sglang_dsv4.Dsv4Pools
) -> tuple[str, ...]:
    """What the draft of a DeepSeek-V4 (EAGLE) or V4.1 (DSPARK) plan adds, in words."""
    if not lay.draft_layers:
        return ()
    if d.spec.name == "dspark":
        return (
            f"# the DSpark draft (DeepseekV4ForCausalLMDSpark, {lay.draft_layers} "
            f"window-only stages) keeps {p.swa} window rows a stage in a pool of its own; "
            f"the pair rings are {lay.pair_ring} rows, and SGLang's estimate prices the "
            "draft as one layer, (layers + 1) / layers",
        )
    return (
        f"# the MTP draft (DeepseekV4ForCausalLMNextN, one layer) keeps {p.swa} window "
        f"rows of its own; the compressor rings are {lay.rings[0]} and {lay.rings[1]} "
        "rows, and SGLang's estimate prices the draft at (layers + 1) / layers",
    )


def _dsv4_settings(
    d: Deployment, p: sglang_dsv4.Dsv4Pools, dtype: str, fraction: str | None
) -> dict[str, Any]:
    """The ``sglang.launch_server`` flags of a DeepSeek-V4 plan."""
    facts = ENGINES["sglang"]
    settings: dict[str, Any] = {
        "--tp-size": d.parallel.tp,
        "--pp-size": d.parallel.pp,
        "--context-length": d.max_seq_len,
        "--max-running-requests": d.max_batch_size,
        "--chunked-prefill-size": d.max_num_batched_tokens,
        facts.block_knob: sglang_dsv4.PAGE_TOKENS,
        facts.kv_dtype_knob: dtype,
        facts.token_knob: p.full,
        "--swa-full-tokens-ratio": sglang_dsv4.SWA_FULL_TOKENS_RATIO,
    }
    if d.target_revision:
        settings["--revision"] = d.target_revision
    if d.parallel.dp > 1:
        settings["--dp-size"] = d.parallel.dp
    if d.parallel.dp_attention:
        settings["--enable-dp-attention"] = True
    if d.parallel.ep > 1:
        settings["--ep-size"] = d.parallel.ep
    if fraction is not None:
        settings["--mem-fraction-static"] = fraction
    if d.spec.name == "mtp":
        # apply_deepseek_v4_defaults takes EAGLE (top-k 1) or DSPARK, not NEXTN; EAGLE
        # without a draft path runs the checkpoint's own MTP layer (NextN)
        k = d.lookahead_tokens
        settings[facts.spec_knob] = "EAGLE"
        settings[facts.draft_len_knob] = k
        settings["--speculative-eagle-topk"] = 1
        settings["--speculative-num-draft-tokens"] = k + 1
    if d.spec.name == "dspark":
        settings |= sglang_dsv4.dspark_settings(d)
    return settings


def _dsv4_pools(lay: sglang_dsv4.Dsv4Layout, p: sglang_dsv4.Dsv4Pools) -> tuple[PoolPlan, ...]:
    """The DeepSeek-V4 pool's buffers, one :class:`PoolPlan` per kind."""
    page = sglang_dsv4.PAGE_TOKENS

    def pool(
        kind: PoolKind,
        tokens: int,
        per_page: int,
        nbytes: int,
        name: str,
        role: PoolRole = "target",
    ) -> PoolPlan:
        return PoolPlan(
            role=role,
            kind=kind,
            tier="gpu",
            tokens_per_block=per_page,
            blocks=tokens // per_page,
            bytes=nbytes,
            tokens=tokens,
            window_tokens=lay.window if kind == "window" else None,
            name=name,
        )

    out = [pool("window", p.swa, page, p.swa_bytes, "swa")]
    if lay.c4_layers:
        out.append(pool("kv", p.c4, page // 4, p.c4_bytes, "c4"))
        out.append(pool("kv", p.c128 * 32, page // 4, p.indexer_bytes, "c4 indexer"))
        out.append(pool("state", p.c4_state, 1, p.c4_state_bytes, "c4 state"))
    if lay.c128_layers:
        out.append(pool("kv", p.c128, page // 128, p.c128_bytes, "c128"))
        out.append(pool("state", p.c128_state, 1, p.c128_state_bytes, "c128 state"))
    # V4.1's ratio-1 / ratio-2 KV sources: latents, then the indexer's (full + the
    # reserved page) // ratio keys
    low = ((1, lay.c1_layers, p.c1_bytes, p.c1_indexer_bytes),
           (2, lay.c2_layers, p.c2_bytes, p.c2_indexer_bytes))  # fmt: skip
    for ratio, sources, kv, keys in low:
        if sources:
            out.append(pool("kv", p.full // ratio, page // ratio, kv, f"c{ratio}"))
            out.append(pool("kv", (p.full + page) // ratio, sglang_dsv4.LOW_RATIO_INDEX_PAGE,
                            keys, f"c{ratio} indexer"))  # fmt: skip
    if lay.c2_layers:
        slots = (p.running + 1) * lay.pair_ring
        out.append(pool("state", slots, 1, p.c2_state_bytes, "c2 state"))
    if lay.draft_layers:  # the NextN draft's own pool: its window rows only
        out.append(pool("window", p.swa, page, p.draft_swa_bytes, "draft swa", "draft"))
    return tuple(out)


def _max_running_requests(d: Deployment, full: int, state: StatePlan | None = None) -> int:
    """Running requests per DP worker (``KVCacheConfigurator.resolve_max_num_reqs``):
    ``--max-running-requests`` divided by the attention-DP size, at least 1, capped at
    half the pool's tokens (and at the state slots over slots per request, which the
    emitted ``--max-mamba-cache-size`` makes the same figure)."""
    per_worker = max(1, d.max_batch_size // attn_dp_of(d))
    if state is not None:
        per_worker = min(per_worker, state.slots // state.slots_per_request)
    return min(per_worker, full // 2)


def attn_dp_of(d: Deployment) -> int:
    """SGLang's attention-DP size: ``--dp-size`` with DP attention, else 1."""
    return d.parallel.dp if d.parallel.dp_attention else 1


def _state_settings(d: Deployment, state: StatePlan | None) -> dict[str, Any]:
    """``--mamba-radix-cache-strategy`` and ``--max-mamba-cache-size`` (all workers':
    SGLang divides it by the attention-DP size)."""
    if state is None:
        return {}
    attn_dp = attn_dp_of(d)
    settings: dict[str, Any] = {
        "--mamba-radix-cache-strategy": state.strategy,
        "--max-mamba-cache-size": state.slots * attn_dp,
    }
    if state.running < max(1, d.max_batch_size // attn_dp):
        settings["--max-running-requests"] = state.running * attn_dp
    return settings


def _state_pools(state: StatePlan | None) -> tuple[PoolPlan, ...]:
    """The ``MambaPool``: its slots (one padding slot more) and, under speculation, its
    intermediate buffers (running + 1 rows)."""
    if state is None:
        return ()
    per_slot = state.pool_bytes // (state.slots + 1)
    pools = [
        PoolPlan(
            role="target",
            kind="state",
            tier="gpu",
            tokens_per_block=1,
            blocks=state.slots,
            bytes=state.pool_bytes,
            tokens=0,
            padding_bytes=per_slot,
            name="mamba",
        )
    ]
    if state.spec_bytes:
        pools.append(
            PoolPlan(
                role="target",
                kind="state",
                tier="gpu",
                tokens_per_block=1,
                blocks=state.running + 1,
                bytes=state.spec_bytes,
                tokens=0,
                name="mamba speculative",
            )
        )
    return tuple(pools)


def _log(d: Deployment, lay: Layout, chosen: SglangPlan, host: Pools | None) -> tuple[str, ...]:
    """SGLang's start-up lines about its pools."""
    full, swa = chosen.full_tokens, chosen.swa_tokens
    log = []
    if lay.swa_layers:
        log.append(
            f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
        )
    running = d.max_batch_size
    if chosen.state is not None:
        running = min(running, chosen.state.running * attn_dp_of(d))
    log.append(
        f"max_total_num_tokens={full}, chunked_prefill_size={d.max_num_batched_tokens}, "
        f"max_running_requests={running}, context_len={d.max_seq_len}"
    )
    if host is not None:
        # the Mamba host pool logs its own line (pool_host/mamba.py MambaPoolHost)
        state = host.host_state_slots * lay.state.per_request_bytes if lay.state else 0
        log.append(
            f"Allocating {(host.host_bytes - state) / 1e9:.2f} GB host memory for "
            "hierarchical KV cache."
        )
    return tuple(log)


def _settings(
    d: Deployment,
    dtype: str,
    chosen: SglangPlan,
    lay: Layout,
    hicache_gb: int,
    fraction: str | None,
) -> dict[str, Any]:
    """The ``sglang.launch_server`` flags of the plan."""
    facts = ENGINES["sglang"]
    layout = d.parallel
    settings: dict[str, Any] = {
        "--tp-size": layout.tp,
        "--pp-size": layout.pp,
        "--context-length": d.max_seq_len,
        "--max-running-requests": d.max_batch_size,
        "--chunked-prefill-size": d.max_num_batched_tokens,
        facts.block_knob: page_tokens(d),
        facts.kv_dtype_knob: dtype,
        facts.token_knob: chosen.full_tokens,
    }
    if d.target_revision:  # ServerArgs.revision (sglang 0.5.23, srt/arg_groups)
        settings["--revision"] = d.target_revision
    if layout.dp > 1:
        settings["--dp-size"] = layout.dp
    if layout.dp_attention:
        settings["--enable-dp-attention"] = True
    if layout.ep > 1:
        settings["--ep-size"] = layout.ep
    if fraction is not None:
        settings["--mem-fraction-static"] = fraction
    if lay.swa_layers and chosen.ratio is not None:
        settings["--swa-full-tokens-ratio"] = chosen.ratio
    if hicache_gb:
        settings["--enable-hierarchical-cache"] = True
        settings[facts.host_knob] = hicache_gb
    spec = d.spec.name
    if spec in facts.spec_names:
        settings[facts.spec_knob] = sglang_step3p5.spec_algorithm(d, facts.spec_names[spec])
        if d.draft_source:
            settings[facts.draft_model_knob] = d.draft_source
        if d.draft_revision:  # ServerArgs.speculative_draft_model_revision (0.5.23)
            settings["--speculative-draft-model-revision"] = d.draft_revision
        k = d.lookahead_tokens
        if spec != "ngram":
            settings[facts.draft_len_knob] = k
            settings["--speculative-eagle-topk"] = 1
        else:
            # NGRAM's top-k is its BFS breadth (default 10, refused with --page-size > 1
            # outside flashinfer: _handle_ngram); kvbudget plans one chain of K tokens
            settings["--speculative-ngram-max-bfs-breadth"] = 1
        settings["--speculative-num-draft-tokens"] = k + 1
    return settings


def _notes(
    d: Deployment,
    ledger: Ledger,
    lay: Layout,
    chosen: SglangPlan,
    host: Pools | None,
    fraction: str | None,
    profiled: int,
) -> list[str]:
    """What each setting does in SGLang, for the emitted comments."""
    facts = ENGINES["sglang"]
    draft_pool = (
        "; the Gemma-4 assistant (FROZEN_KV_MTP) reads the target's pools and keeps only "
        f"a dummy pool of {sglang_gemma4.FROZEN_DRAFT_TOKENS} tokens"
        if lay.frozen_draft_bytes
        else "; the draft pool holds the same tokens with its own geometry"
        if lay.draft_layers and not lay.draft_in_swa
        else ""
    )
    notes = [
        f"# {facts.token_knob} is the full pool's tokens{draft_pool}",
        "# --mem-fraction-static is the share of GPU memory free before loading for weights "
        f"({'target + draft' if lay.draft_layers else 'the model'}) and KV pools",
    ]
    if fraction is None:
        notes.append(
            "# --mem-fraction-static not computed (GPU memory or weights unknown): set it so "
            f"that the profiled KV budget is at least {profiled} B"
        )
    if lay.draft_layers and not lay.packed_draft:
        notes.append(
            "# SGLang budgets the draft at the target's per-layer size (1 + draft/target "
            "layers); --mem-fraction-static is raised so the full pool still gets "
            f"{chosen.full_tokens} tokens"
        )
    if lay.swa_layers:
        notes.append(
            f"# sliding layers get their own pool: {chosen.swa_tokens} tokens for "
            f"{d.max_batch_size} running requests (window + lookahead + 2 pages each, plus a "
            "prefill chunk)"
        )
    if sglang_step3p5.is_step3p5(d) and not lay.swa_layers:
        notes.append(
            "# with HiCache SGLang keeps Step-3.5's sliding layers in the full pool at full "
            "length (_step3p_overrides sets disable_hybrid_swa_memory)"
        )
    notes += sglang_step3p5.mtp_notes(d, lay, chosen.swa_tokens)
    if d.target.model_type not in HYBRID_SWA_MODEL_TYPES and any(
        isinstance(x, AttentionLayer) and x.sliding_window for x in d.target.layers
    ):
        notes.append(
            "# SGLang keeps this model's sliding-window layers at full length (its "
            "sliding pool is for allow-listed architectures only)"
        )
    if chosen.state is not None:
        st = chosen.state
        notes.append(
            f"# --max-mamba-cache-size: {st.slots} state slots per DP worker ({st.running} "
            f"running requests x {st.slots_per_request} under --mamba-radix-cache-strategy "
            f"{st.strategy}), set so SGLang does not size them by --mamba-full-memory-ratio; "
            f"the state pool takes {st.bytes} B of the budget"
        )
        if st.spec_bytes:
            notes.append(
                f"# speculative state buffers: {st.running + 1} rows x {st.draft_tokens} draft "
                f"tokens, {st.spec_bytes} B (SGLang reserves {st.reserved_bytes} B for the "
                "state pool and them; --mem-fraction-static covers the reservation)"
            )
    if lay.indexer and sglang_minimax.is_minimax_m3(d):
        notes.append(
            "# MiniMax-M3: MiniMaxSparseKVPool keeps K/V of every layer and one replicated "
            "index head per sparse layer"
            + ("; the index host pool comes on top of --hicache-size" if host is not None else "")
        )
    elif lay.indexer:
        notes.append(
            f"# DSA: --page-size {DSA_PAGE_TOKENS} (SGLang raises any other to it); each layer "
            "keeps its indexer key beside the latent"
            + ("; its host pool comes on top of --hicache-size" if host is not None else "")
        )
    if host is not None:
        notes.append(
            f"# {facts.host_knob} is whole decimal GB per rank; the host pools it makes pin "
            f"{host.host_bytes} B of the {ledger.host_bytes} B budget"
        )
        if host.host_draft_tokens:
            size = (
                "target host tokens + 1 page"
                if host.host_draft_tokens > host.host_full_tokens
                else "the target's host tokens"
            )
            notes.append(
                f"# the draft's sidecar host pool ({size}) comes on top of "
                f"{facts.host_knob}: it is counted in that figure"
            )
    elif ledger.host_bytes:
        notes.append(
            f"# host budget under 1 GB after the pools' pages: {facts.host_knob} takes whole "
            "GB and 0 means unset (--hicache-ratio), so HiCache is left off"
        )
    return notes


def _pools(lay: Layout, full: int, swa: int, page: int, host: Pools | None) -> tuple[PoolPlan, ...]:
    """SGLang's device pools (``T + page`` rows each: page 0 takes padding writes) and
    host pools (full, sliding, the draft's sidecar)."""

    def pool(
        role: PoolRole, kind: PoolKind, tier: Tier, tokens: int, per_token: int, name: str
    ) -> PoolPlan:
        rows = tokens + page if tier == "gpu" else tokens
        return PoolPlan(
            role=role,
            kind=kind,
            tier=tier,
            tokens_per_block=page,
            blocks=tokens // page,
            bytes=rows * per_token,
            tokens=tokens,
            window_tokens=lay.window if kind == "window" else None,
            padding_bytes=(rows - tokens // page * page) * per_token,
            name=name,
        )

    pools = [pool("target", "kv", "gpu", full, lay.full, "full")]
    if lay.swa_layers:
        pools.append(pool("target", "window", "gpu", swa, lay.swa, "swa"))
    if lay.frozen_draft_bytes:
        rows = sglang_gemma4.FROZEN_DRAFT_TOKENS + page
        per_row = lay.frozen_draft_bytes // rows
        pools.append(
            pool("draft", "kv", "gpu", sglang_gemma4.FROZEN_DRAFT_TOKENS, per_row, "assistant")
        )
    elif lay.draft_in_swa:  # Step-3.5's MTP runners: one sliding layer each
        pools.append(pool("draft", "window", "gpu", swa, lay.draft, "mtp"))
    elif lay.draft_layers:
        pools.append(
            pool("draft", "kv", "gpu", full, lay.draft, "mtp" if lay.packed_draft else "draft")
        )
    if host is not None:
        packed = lay.packed_draft and lay.draft_layers
        per_token = lay.full + (lay.draft if lay.packed_draft else 0)
        role: PoolRole = "target+draft" if packed else "target"
        pools.append(pool(role, "kv", "host", host.host_full_tokens, per_token, "host full"))
        if lay.swa_layers:
            pools.append(
                pool("target", "window", "host", host.host_swa_tokens, lay.swa, "host swa")
            )
        if host.host_draft_tokens:
            pools.append(
                pool("draft", "kv", "host", host.host_draft_tokens, lay.draft, "host draft")
            )
        if lay.state is not None and host.host_state_slots:
            pools.append(
                PoolPlan(
                    role="target",
                    kind="state",
                    tier="host",
                    tokens_per_block=1,
                    blocks=host.host_state_slots,
                    bytes=host.host_state_slots * lay.state.per_request_bytes,
                    tokens=0,
                    name="host mamba",
                )
            )
    return tuple(pools)


def render(plan: Plan) -> str:
    """The ``sglang.launch_server`` command of ``plan.engine.settings``, with comments;
    the environment it needs (the ``env.NAME`` settings) prefixes it."""
    lines = comment_lines(plan, "SGLang")
    prefix, flags = environment_prefix(plan.engine.settings)
    head = f"{prefix}python -m sglang.launch_server --model-path {shlex.quote(plan.target_source)}"
    lines.append(command_line(head, flags))
    return "\n".join(lines) + "\n"


def check(d: Deployment) -> None:
    """InvalidArgumentError for what this model of SGLang does not cover, and for what
    SGLang refuses at start-up (in its words)."""
    refuse_unmodelled(d, "sglang", models_indexer=True)
    if d.spec.name == "ngram" and d.parallel.dp_attention:
        # arg_groups/speculative_hook.py _handle_ngram (0.5.23 wheel)
        raise InvalidArgumentError(
            'SGLang refuses ngram with DP attention ("Currently ngram speculative '
            'decoding does not support dp attention."); drop --dp-attention or plan '
            "another --spec"
        )


RELEASE = SglangRelease(
    version=VERSION,
    ref="v0.5.23 (the PyPI wheel; it records no commit)",
    default=True,
    sidecar_host_padding_page=False,
)


def _source(release: SglangRelease) -> EngineSource:
    return EngineSource(
        repository="sgl-project/sglang",
        ref=release.ref,
        files=(
            "python/sglang/srt/mem_cache/kv_cache_configurator.py",
            "python/sglang/srt/model_executor/pool_configurator.py",
            "python/sglang/srt/mem_cache/pool_host/base.py",
        ),
    )


def engine_model(release: SglangRelease) -> EngineModel:
    """The registered engine model of ``release``."""

    def plan_release(d: Deployment, ledger: Ledger) -> EnginePlan:
        return plan(d, ledger, release)

    def check_release(d: Deployment) -> None:
        check(d)
        if d.spec.name == "dspark" and release.version != VERSION:
            raise InvalidArgumentError(
                f"--engine sglang@{release.version} is not modelled for --spec dspark "
                f"(SGLang {VERSION}'s DSPARK pools were read and run only); plan it with "
                f"--engine sglang@{VERSION}"
            )
        sglang_step3p5.check(d, release.version)
        sglang_gemma4.check(d, release.version)
        sglang_kimi.check(d)
        sglang_minimax.check(d, release.version, d.host_bytes)
        state = any(
            x.state_bytes(d.state_dtype_value, d.parallel.attention_tp) for x in d.target.layers
        )
        if not release.hybrid_pools and (state or is_dsa(d)):
            raise InvalidArgumentError(
                f"--engine sglang@{release.version} is not modelled for {d.target.name}'s "
                f"{'state' if state else 'sparse-attention indexer'} pools (checked against "
                f"SGLang {VERSION} only); plan it with --engine sglang@{VERSION}"
            )

    return EngineModel(
        name="sglang",
        version=release.version,
        default=release.default,
        source=_source(release),
        summary=f"SGLang {release.version}",
        plan=plan_release,
        check=check_release,
        render=render,
        spec_names=frozenset(ENGINES["sglang"].spec_names),
        reads_pre_load_bytes=True,  # the computed --mem-fraction-static allows for it
        # SGLang's own default --mem-fraction-static, a heuristic of its server arguments
        # (arg_groups/memory_hook.py handle_gpu_memory_settings) for the emitted flags;
        # the emitted --mem-fraction-static realises the budget it derives
        memory_default=sglang_memory.default,
        # --mem-fraction-static F is a share of the memory free before weights load, for
        # the weights, the buffers beside them and the pools (_mem_fraction)
        before_load=lambda d: (pre_load_bytes(d), PROFILE_MARGIN_BYTES),
    )


MODEL = engine_model(RELEASE)

__all__ = [
    "DEFAULT_PRE_LOAD_BYTES",
    "GIB",
    "MODEL",
    "RELEASE",
    "VERSION",
    "SglangRelease",
    "allocate",
    "engine_model",
    "host_pools",
    "layout",
    "plan",
    "render",
]
