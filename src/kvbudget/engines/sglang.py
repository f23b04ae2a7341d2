"""SGLang's KV pools, as its own code sizes them, and the flags that realise a plan.

Facts from ``sgl-project/sglang`` @ 003fca8027387a3d6565b2c08e497e3020ac6211 unless
another commit is named (files under ``python/sglang/srt/``):

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
  *on top* (PR #30393; PR #35875, which would include it, is open).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kvbudget.cost import pp_stage_layers
from kvbudget.engines.common import (
    GB,
    GIB,
    auto_note,
    cdiv,
    check_block,
    command_line,
    comment_lines,
    kv_dtype_name,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.engines.inputs import EngineInputs
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer
from kvbudget.plan_types import EnginePlan, Plan
from kvbudget.units import count_of

VERSION = "main@003fca80"

# model_type of the architectures is_hybrid_swa_model allow-lists (GptOss, Llama4, ...)
HYBRID_SWA_MODEL_TYPES = frozenset({"gpt_oss", "llama4"})
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
# kept free of the computed --mem-fraction-static for small allocations SGLang makes
# before it profiles (buffers besides the weights); a plan's KV is capped by
# --max-total-tokens anyway, so the margin never adds KV
PROFILE_MARGIN_BYTES = 512 * 1024**2


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Bytes per token of SGLang's pools on one rank.

    ``full``: target layers in the full pool (every target layer unless the model is a
    sliding hybrid); ``swa``: sliding layers of a hybrid; ``draft``: the draft pool
    (sidecar) or the packed MTP layers; ``cell``: the per-token figure SGLang budgets
    with (its draft approximation included; a float for hybrids, whose ratio is one).
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

    def cell(self, ratio: float) -> float:
        """SGLang's per-token budget figure (``_compute_cell_size`` / hybrid ``cell``)."""
        if self.swa_layers:
            return self.per_layer_full * (self.full_layers + self.draft_layers) + ratio * (self.swa)
        if not self.draft_layers:
            return self.full
        return int(self.full * (1 + self.draft_layers / self.full_layers))


@dataclass(frozen=True, kw_only=True)
class Pools:
    """Tokens SGLang allocates on one rank: device pools and host pools."""

    full_tokens: int
    swa_tokens: int
    device_bytes: int
    host_full_tokens: int = 0
    host_swa_tokens: int = 0
    host_draft_tokens: int = 0
    host_bytes: int = 0


def layout(inputs: EngineInputs, stage: int) -> Layout:
    """SGLang's per-token bytes for PP stage ``stage`` (drafts on the last stage)."""
    target = inputs.target
    layers = [target.layers[i] for i in pp_stage_layers(target.num_layers, inputs.pp)[stage]]
    for layer in (*layers, *target.mtp_layers):
        if layer.state_bytes(inputs.state_dtype, inputs.tp):
            raise InvalidArgumentError(
                f"--engine sglang does not model {layer.kind} layers (Mamba state pools) "
                "yet; plan this model with --engine kvbudget or vllm"
            )
    hybrid = target.model_type in HYBRID_SWA_MODEL_TYPES

    def per_token(ls: Sequence[Layer]) -> int:
        return sum(x.bytes_per_token(inputs.kv_dtype, inputs.tp) for x in ls)

    cached = [x for x in layers if x.bytes_per_token(inputs.kv_dtype, inputs.tp)]
    # Llama-4's chunked layers go to the SWA pool with the chunk as window
    # (model_runner: sliding_window_size = attention_chunk_size); SGLang takes them as
    # layers (i + 1) % 4 != 0 (model_config.get_hybrid_layer_ids @ 001adf56), which is
    # the default no_rope_layers pattern kvbudget reads
    sliding = [x for x in cached if hybrid and x.sliding_window is not None]
    full = [x for x in cached if x not in sliding]
    draft: list[Layer] = []
    packed = False
    if stage == inputs.pp - 1:
        if inputs.spec == "mtp":
            draft, packed = list(target.mtp_layers), True
        elif inputs.draft is not None:
            draft = [x for x in inputs.draft.layers if x.bytes_per_token(inputs.kv_dtype, 1)]
    windows = {x.sliding_window for x in sliding}
    return Layout(
        full=per_token(full),
        full_layers=len(full),
        swa=per_token(sliding),
        swa_layers=len(sliding),
        window=max(w for w in windows if w is not None) if sliding else None,
        draft=per_token(draft),
        draft_layers=len(draft),
        packed_draft=packed,
        per_layer_full=full[0].bytes_per_token(inputs.kv_dtype, inputs.tp) if full else 0,
    )


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
    total = (full + page) * lay.full + (full + page) * lay.draft
    if lay.swa_layers:
        total += (swa + page) * lay.swa
    return total


def host_pools(lay: Layout, hicache_gb: int, full: int, swa: int, page: int) -> Pools:
    """Forward: the host pools ``--hicache-size hicache_gb`` makes (``HostKVCache``)."""

    def tokens(gb: float, per_token: int) -> int:
        return (int(gb * 1e9 // per_token) // page + 1) * page

    spt_full = lay.full + (lay.draft if lay.packed_draft else 0)
    if lay.swa_layers:
        dev_full = (full + page) * lay.full
        dev_swa = (swa + page) * lay.swa
        share = dev_full + dev_swa
        host_full = tokens(hicache_gb * dev_full / share, spt_full)
        host_swa = tokens(hicache_gb * dev_swa / share, lay.swa)
    else:
        host_full, host_swa = tokens(hicache_gb, spt_full), 0
    sidecar = host_full + page if lay.draft and not lay.packed_draft else 0
    pinned = host_full * spt_full + host_swa * lay.swa + sidecar * lay.draft
    return Pools(
        full_tokens=full,
        swa_tokens=swa,
        device_bytes=device_bytes(lay, full, swa, page),
        host_full_tokens=host_full,
        host_swa_tokens=host_swa,
        host_draft_tokens=sidecar,
        host_bytes=pinned,
    )


def _swa_tokens_needed(lay: Layout, inputs: EngineInputs) -> int:
    """Sliding-pool tokens for ``max_batch_size`` running requests plus a prefill chunk.

    Per request the window, the lookahead and two pages of alignment (the same terms as
    SGLang's ``SWAChunkCapPoolConfigurator``: window + draft tokens + page + decode page).
    """
    assert lay.window is not None
    page = inputs.tokens_per_block
    per_request = min(lay.window, inputs.max_seq_len) + inputs.lookahead_tokens + 1 + 2 * page
    need = inputs.max_batch_size * per_request + inputs.max_num_batched_tokens + page
    return max(cdiv(need, page) * page, (lay.window + page) // page * page + page)


def _ratio_for(swa: int, full: int) -> float:
    """The smallest 3-decimal ratio with ``int(full x r) // page x page >= swa``."""
    value = (Decimal(swa) / Decimal(full)).quantize(Decimal("0.001"), rounding=ROUND_CEILING)
    return float(value)


@dataclass(frozen=True, kw_only=True)
class SglangPlan:
    """The pools kvbudget plans for SGLang and the settings that produce them."""

    layout: Layout
    full_tokens: int
    swa_tokens: int
    ratio: float | None
    device_bytes: int
    budget_bytes: int  # what SGLang must profile for T to fit (its own cell)


def plan_stage(inputs: EngineInputs, stage: int, budget: int) -> SglangPlan:
    """Backward: the largest page-aligned T whose real pools fit ``budget`` bytes."""
    lay = layout(inputs, stage)
    page = inputs.tokens_per_block
    if not lay.full and not lay.swa:
        raise InvalidArgumentError(f"{inputs.target.name} caches nothing for SGLang to size")
    swa = _swa_tokens_needed(lay, inputs) if lay.swa_layers else 0
    fixed = (swa + page) * lay.swa if lay.swa_layers else 0
    slope = lay.full + lay.draft
    full = ((budget - fixed) // slope - page) // page * page if slope else 0
    ratio = None
    while full > 0:
        if lay.swa_layers:
            ratio = _ratio_for(swa, full)
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
            f"{inputs.max_batch_size} requests ({swa} tokens) leaves no full-attention "
            "tokens; lower --max-batch-size or raise --kv-budget"
        )
    profiled = (full + page) * lay.cell(ratio or 0.0)
    return SglangPlan(
        layout=lay,
        full_tokens=full,
        swa_tokens=swa,
        ratio=ratio,
        device_bytes=device_bytes(lay, full, swa, page),
        budget_bytes=int(profiled) + 1,
    )


def _hicache_gb(lay: Layout, host_bytes: int, full: int, swa: int, page: int) -> int:
    """The largest whole ``--hicache-size`` whose host pools (sidecar too) fit ``host_bytes``."""
    gb = host_bytes // GB
    while gb > 0 and host_pools(lay, gb, full, swa, page).host_bytes > host_bytes:
        gb -= 1
    return gb


def _mem_fraction(inputs: EngineInputs, profiled_bytes: int) -> str | None:
    """``--mem-fraction-static`` so the profiled budget holds ``profiled_bytes``.

    ``fraction x memory before weights >= weights + KV budget (+ margin)``, rounded up to
    3 decimals; None when the GPU memory or the weights are unknown.
    """
    if inputs.gpu_memory_bytes is None or inputs.weights_bytes is None:
        return None
    need = inputs.weights_bytes + profiled_bytes + PROFILE_MARGIN_BYTES
    value = (Decimal(need) / Decimal(inputs.gpu_memory_bytes)).quantize(
        Decimal("0.001"), rounding=ROUND_CEILING
    )
    return str(value)


def build(plan: Plan, inputs: EngineInputs) -> EnginePlan:
    """SGLang's plan for ``inputs``: its pools, flags and start-up lines."""
    facts = ENGINES["sglang"]
    check_block(plan, facts)
    dtype = kv_dtype_name(plan, facts)
    page = inputs.tokens_per_block
    stages = [plan_stage(inputs, s, inputs.gpu_kv_bytes) for s in range(inputs.pp)]
    chosen = min(stages, key=lambda st: st.full_tokens)
    lay = stages[-1].layout  # the last stage holds the draft
    full, swa = chosen.full_tokens, chosen.swa_tokens
    gb = _hicache_gb(lay, inputs.host_bytes, full, swa, page)
    host = host_pools(lay, gb, full, swa, page) if gb else None
    fraction = _mem_fraction(inputs, max(st.budget_bytes for st in stages))
    settings: dict[str, Any] = {
        "--tp-size": inputs.launch_tp or inputs.tp,
        "--pp-size": inputs.pp,
        "--context-length": inputs.max_seq_len,
        "--max-running-requests": inputs.max_batch_size,
        "--chunked-prefill-size": inputs.max_num_batched_tokens,
        facts.block_knob: page,
        facts.kv_dtype_knob: dtype,
        facts.token_knob: full,
    }
    if inputs.dp > 1:
        settings["--dp-size"] = inputs.dp
    if inputs.dp_attention:
        settings["--enable-dp-attention"] = True
    if inputs.ep > 1:
        settings["--ep-size"] = inputs.ep
    if fraction is not None:
        settings["--mem-fraction-static"] = fraction
    if lay.swa_layers and chosen.ratio is not None:
        settings["--swa-full-tokens-ratio"] = chosen.ratio
    if host is not None:
        settings["--enable-hierarchical-cache"] = True
        settings[facts.host_knob] = gb
    if plan.spec in facts.spec_names:
        settings[facts.spec_knob] = facts.spec_names[plan.spec]
        if plan.draft_source:
            settings[facts.draft_model_knob] = plan.draft_source
        k = inputs.max_draft_len
        if plan.spec != "ngram":
            settings[facts.draft_len_knob] = k
            settings["--speculative-eagle-topk"] = 1
        settings["--speculative-num-draft-tokens"] = k + 1
    per_request = inputs.max_seq_len + inputs.lookahead_tokens
    sequences = min(full // per_request, inputs.max_batch_size)
    predicted: dict[str, Any] = {
        "max_total_num_tokens": full,
        "swa_tokens": swa if lay.swa_layers else None,
        "swa_full_tokens_ratio": chosen.ratio,
        "draft_tokens": full if lay.draft and not lay.packed_draft else None,
        "device_bytes": chosen.device_bytes,
        "profiled_budget_bytes": max(st.budget_bytes for st in stages),
        "mem_fraction_static": fraction,
        "pools": _pool_list(lay, full, swa, page),
        "host_tokens": host.host_full_tokens if host else 0,
        "host_swa_tokens": host.host_swa_tokens if host else 0,
        "host_draft_tokens": host.host_draft_tokens if host else 0,
        "host_bytes": host.host_bytes if host else 0,
        "hicache_size_gb": gb,
    }
    log = []
    if lay.swa_layers:
        log.append(
            f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
        )
    log.append(
        f"max_total_num_tokens={full}, chunked_prefill_size={inputs.max_num_batched_tokens}, "
        f"max_running_requests={inputs.max_batch_size}, context_len={inputs.max_seq_len}"
    )
    if host is not None:
        log.append(
            f"Allocating {host.host_bytes / 1e9:.2f} GB host memory for hierarchical KV cache."
        )
    notes = [
        f"# {facts.token_knob} is the full pool's tokens; the draft pool holds the same tokens "
        "with its own geometry",
        "# --mem-fraction-static is the share of GPU memory free before loading for weights "
        "(target + draft) and KV pools",
    ]
    if fraction is None:
        notes.append(
            "# --mem-fraction-static not computed (GPU memory or weights unknown): set it so "
            f"that the profiled KV budget is at least {max(st.budget_bytes for st in stages)} B"
        )
    if lay.draft_layers and not lay.packed_draft:
        notes.append(
            "# SGLang budgets the draft at the target's per-layer size (1 + draft/target "
            "layers); --mem-fraction-static is raised so the full pool still gets "
            f"{full} tokens"
        )
    if lay.swa_layers:
        notes.append(
            f"# sliding layers get their own pool: {swa} tokens for {inputs.max_batch_size} "
            "running requests (window + lookahead + 2 pages each, plus a prefill chunk)"
        )
    if inputs.target.model_type not in HYBRID_SWA_MODEL_TYPES and any(
        isinstance(x, AttentionLayer) and x.sliding_window for x in inputs.target.layers
    ):
        notes.append(
            "# SGLang keeps this model's sliding-window layers at full length (its "
            "sliding pool is for allow-listed architectures only)"
        )
    if host is not None:
        notes.append(
            f"# {facts.host_knob} is whole decimal GB per rank; the host pools it makes pin "
            f"{host.host_bytes} B of the {inputs.host_bytes} B budget"
        )
        if host.host_draft_tokens:
            notes.append(
                "# the draft's sidecar host pool (target host tokens + 1 page) comes on top of "
                f"{facts.host_knob}: it is counted in that figure"
            )
    elif inputs.host_bytes:
        notes.append(
            f"# host budget under 1 GB after the pools' pages: {facts.host_knob} takes whole "
            "GB and 0 means unset (--hicache-ratio), so HiCache is left off"
        )
    warnings = []
    if sequences < inputs.max_batch_size:
        warnings.append(
            f"SGLang's pool holds {count_of(sequences, 'request')} of {inputs.max_seq_len} "
            "tokens at once "
            f"(--max-running-requests {inputs.max_batch_size}); shorter requests share it"
        )
    return EnginePlan(
        name="sglang",
        version=VERSION,
        settings=settings,
        predicted=predicted,
        gpu_tokens=full,
        max_concurrency=sequences,
        log=tuple(log),
        notes=tuple(notes + auto_note(plan, facts, dtype)),
        warnings=tuple(warnings),
    )


def _pool_list(lay: Layout, full: int, swa: int, page: int) -> list[dict[str, Any]]:
    pools: list[dict[str, Any]] = [
        {"pool": "full", "tokens": full, "layers": lay.full_layers, "bytes_per_token": lay.full}
    ]
    if lay.swa_layers:
        pools.append(
            {"pool": "swa", "tokens": swa, "layers": lay.swa_layers, "bytes_per_token": lay.swa}
        )
    if lay.draft_layers:
        pools.append(
            {
                "pool": "draft" if not lay.packed_draft else "mtp",
                "tokens": full,
                "layers": lay.draft_layers,
                "bytes_per_token": lay.draft,
            }
        )
    for p in pools:
        p["rows"] = p["tokens"] + page
    return pools


def render(plan: Plan, engine: EnginePlan) -> str:
    """The ``sglang.launch_server`` command of ``engine.settings``, with comments."""
    lines = comment_lines(plan, engine, "SGLang")
    head = f"python -m sglang.launch_server --model-path {shlex.quote(plan.target_source)}"
    lines.append(command_line(head, engine.settings))
    return "\n".join(lines) + "\n"


__all__ = ["GIB", "VERSION", "allocate", "build", "host_pools", "layout", "render"]
