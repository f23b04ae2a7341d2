"""SGLang 0.5.23's DeepSeek-V4 and V4.1 pools (``DeepSeekV4TokenToKVPool``), as it sizes
them.

Facts from the SGLang 0.5.23 wheel (``python/sglang/srt/``; the PyPI wheel records no
commit), each run by the fidelity harness (``benchmarks/fidelity/sglang``) on the path
modelled here: CUDA on Hopper, no speculative decoding, the checkpoint's MTP layer as
an EAGLE draft or (V4.1) its DSpark stages as a DSPARK draft (below), no HiCache, one PP
stage, the paged (not ``unified_kv``) pool, no encoder SWA replay,
``SGLANG_DSV4_*`` environment switches at their defaults.

* **Config** (``configs/model_config.py`` ``_derive_model_shapes``): SGLang reads the
  per-layer ``compress_ratios`` list (0 sliding only, 4, 128) of DeepSeek's own config;
  a transformers-5 config that has only ``layer_types`` / ``compress_rates`` fails there
  (``AttributeError: ... no attribute 'compress_ratios'``), so kvbudget refuses it.
  ``qk_nope_head_dim = head_dim - qk_rope_head_dim``; the window is ``sliding_window``.
* **Server arguments** (``arg_groups/model_overrides/deepseek_v4.py``,
  ``arg_groups/deepseek_v4_hook.py`` ``apply_deepseek_v4_defaults``,
  ``arg_groups/overrides.py`` ``_deepseek_v4_kv_cache_dtype``): ``--page-size`` 256
  whatever is given; ``--kv-cache-dtype auto`` becomes ``fp8_e4m3`` (only it and
  ``bfloat16`` pass); ``--swa-full-tokens-ratio`` 0.1 when not given; speculative
  decoding only EAGLE (top-k 1) or DSPARK.
* **Latent rows** (``mem_cache/deepseek_v4_memory_pool.py`` ``DeepSeekV4SingleKVPool``,
  layout ``KVLayout.V4``, ``select_dsv4_kv_layout`` off SM100): one row is 448 fp8 nope
  values + 64 bf16 rope values + 7 scale bytes + 1 pad = 584 B (asserted for that
  layout), whatever the KV dtype; a page of ``p`` rows takes ``ceil(p x 584 / 576) x
  576`` B (``create_buffer``'s assertion); a pool of ``size`` rows has
  ``ceil((size + 256) / p)`` pages per layer (``_num_dsv4_physical_kv_pages``: the
  allocator's reserved page at the 256-token logical page).
* **Pools** (``DeepSeekV4TokenToKVPool.__init__``, ``_init_compressed_pools``,
  ``_init_paged_compress_states``): the window (SWA) pool, ``swa`` rows of 256-row
  pages, on every layer; per ratio-4 layer ``full // 4`` compressed rows (64-row pages)
  and an indexer key pool (``DeepSeekV4IndexerPool``, fp8: ``index_head_dim +
  index_head_dim // 128 x 4`` B a row, 64-row pages) of ``c128 x 32`` rows
  (``c4_logical_size``); per ratio-128 layer ``full // 128`` rows (2-row pages).
  Compressor states (``mem_cache/deepseek_v4_compress_state.py`` ``CompressStatePool``,
  float32 by ``SGLANG_DSV4_COMPRESS_STATE_DTYPE``): ``size + ring + 1`` rows padded to
  the ratio; ratio 4 (overlapping, attention and indexer each) ``2 x 2 x dim`` values a
  row, ring 8, ``size = swa // 256 x 8``; ratio 128 ``2 x dim`` values, ring 128,
  ``size = (running + 1) x 128`` (``get_compress_state_ring_size``).
* **Sizing** (``model_executor/pool_configurator.py`` ``DSV4PoolConfigurator``): from
  ``--max-total-tokens`` (``calculate_pool_sizes_from_max_tokens``,
  ``_compute_dsv4_sizes``): ``full`` floored to the page, ``swa = int(full x ratio)``
  floored to the page (refused when ``swa <= window + 256``, ``validate_swa_pool_size``),
  ``c4 = full // 4``, ``c128 = full // 128``; running requests per DP worker
  ``min(max(1, --max-running-requests // dp), full // 2)``
  (``KVCacheConfigurator.resolve_max_num_reqs``). Its byte-budget estimate
  (``calculate_pool_sizes``) prices the same pools per token without the reserved pages,
  so it never admits fewer tokens than these exact bytes; ``--max-total-tokens`` then
  binds (``config_from_budget``).
* **MTP** (``--speculative-algorithm EAGLE``, top-k 1: ``apply_deepseek_v4_defaults``
  refuses NEXTN and any other): the draft worker loads ``DeepseekV4ForCausalLMNextN`` with
  ``num_nextn_predict_layers = 1`` whatever the checkpoint ships
  (``configs/model_config.py`` ``_config_draft_model``), and its configurator builds a
  ``DeepSeekV4TokenToKVPool`` of that one layer at ``COMPRESS_RATIO_NEXTN_LAYER`` (window
  only) with the target's ``swa`` rows and no compressed or state pools
  (``mem_cache/kv_cache_configurator.py`` ``_build_dsv4_kv_pool``, ``_PoolSizes``). The
  target's compressor rings widen to 16 (ratio 4) and 256 (ratio 128)
  (``get_compress_state_ring_size`` with draft tokens), which serve at most
  ``16 - 8 + 2 = 10`` draft tokens (``_assert_ring_serves_draft_tokens``). The byte
  estimate then prices the draft by inflating the per-token bytes by ``(L + 1) / L``
  over the target's ``L`` layers (``DSV4PoolConfigurator.__init__``), which admits fewer
  tokens than the exact pools would: :func:`estimated_full` is that estimate, and the
  plan pins the smaller of it and the exact fit.

**DeepSeek-V4.1** (``configs/deepseek_v41.py`` ``normalize_deepseek_v41_config``: the
``text_config`` flattened, the architecture renamed ``DeepseekV4ForCausalLM``) runs in
the same pool; what differs is data (:class:`Dsv4Layout` ``c1_layers``, ``c2_layers``):

* **Owners** (``collect_sources_by_ratio``): a ratio-1 or ratio-2 layer owns compressed
  storage only when it is in ``kv_source_layer_ids``; the other layers of those ratios
  keep their window rows only (every layer has them, as in V4).
* **Latents** (``_init_compressed_pools``): per ratio ``r`` in (1, 2), ``full // r`` rows
  in pages of ``256 // r`` rows per KV source, the same 584-byte row off SM100
  (``resolve_compressed_kv_layout``: a ``KVLayout.V4`` main cache keeps V4 rows).
* **Indexer keys** (same function, ``force_fp4=True``): on *every* KV source of ratio
  ``r``, index source or not, ``(full + 256) // r`` fp4 keys of ``index_head_dim // 2 +
  index_head_dim // 32`` B (``get_dsv4_indexer_bytes_per_token``) in pages of
  ``DSV41_INDEX_PAGE_SIZE`` = 64 keys (128 only with DeepGEMM's paged sparse MQA logits,
  Blackwell), plus its reserved page.
* **States** (``_init_paged_compress_states``): ratio 1 keeps none; a ratio-2 source a
  float32 pair ring per request slot (``_make_pair_state_pool``: ``slots x 2 + 2 + 1``
  rows padded to 2, ``2 x head_dim`` values a row, ``slots = running + 1``).
* **Server arguments** (``arg_groups/deepseek_v4_hook.py``
  ``validate_deepseek_v41_features``): "DeepSeek-V4.1 does not support speculative
  decoding other than DSpark yet", nor pipeline parallelism; ``--swa-full-tokens-ratio``
  is not defaulted for V4.1 (``model_overrides/deepseek_v4.py``), so left unset SGLang
  sizes the sliding pool from the request cap (``_resolve_swa_cap_tokens``): the plan
  emits 0.1, SGLang's ratio default, and sizes the sliding pool by it as for V4.
* **DSpark** (``--speculative-algorithm DSPARK``; ``arg_groups/speculative_hook.py``
  ``_handle_dspark``): one step of top-k 1 (both forced), ``--speculative-dspark-block-size``
  gamma (``--max-draft-len``) and a verify window of ``gamma + 1`` draft tokens; the draft
  path defaults to the target, whose config bundles the drafter
  (``checkpoint_bundles_dspark_draft``: a ``dspark_*`` key); DP attention needs
  ``--enable-dp-lm-head``. The draft worker loads ``DeepseekV4ForCausalLMDSpark``
  (``configs/model_config.py`` ``_config_draft_model``) of ``len(dspark_target_layer_ids)``
  stages (``models/deepseek_v4_dspark.py``; vLLM counts ``n_mtp_layers`` /
  ``num_nextn_predict_layers``: a config where they differ is refused), each a
  ``DSparkAttention`` of compress ratio 0, whatever ``compress_ratios`` says past the
  target's layers; its ``DeepSeekV4TokenToKVPool`` (``_build_dsv4_kv_pool``, draft
  worker) holds the target's ``swa`` window rows on every stage and nothing else. With
  ``n`` draft tokens the ratio-2 pair ring is ``1 << (n + 1).bit_length()`` rows
  (``get_compress_state_ring_size``), and the estimate inflates the per-token bytes by
  ``(L + 1) / L`` (one draft layer, whatever the stages): it admits fewer tokens than the
  exact pools, so :func:`estimated_full` (which prices V4.1's terms too) pins the plan.
* **Estimate** (``_compressed_bytes_per_full_token``, ``_get_low_ratio_kv_padding_bytes``,
  ``_get_c2_state_fixed_bytes``): the same latents, keys, reserved pages and pair states,
  priced per token; the sliding pool is priced at ``0.1 x full`` rows without its floor
  to the page or its reserved page, never more than it takes, so the estimate admits no
  fewer tokens than these exact bytes and ``--max-total-tokens`` binds (the harness's
  ``family/deepseek-v41-*`` cases).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.engines.common import cdiv
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import CompressedMLALayer, SharedCompressedMLALayer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

PAGE_TOKENS = 256  # arg_groups/model_overrides/deepseek_v4.py: page_size = 256
ROW_BYTES = 584  # DeepSeekV4SingleKVPool.create_buffer's KVLayout.V4 assertion
PAGE_ALIGN_BYTES = 576  # KVLayout.V4.page_bytes: pages rounded up to 576 B
SWA_FULL_TOKENS_RATIO = 0.1  # DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO; emitted
C4_RING, C128_RING = 8, 128  # get_compress_state_ring_size without speculative decoding
SPEC_C4_RING, SPEC_C128_RING = 16, 256  # ... and with draft tokens
MAX_DRAFT_TOKENS = SPEC_C4_RING - 2 * 4 + 2  # get_compress_state_write_pad(4, 16)
INDEXER_ESTIMATE_BYTES = 132  # get_dsv4_indexer_bytes_per_token(128): what the estimate prices
STATE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE float32 (its default)
# the compressors' ring states: PoolPlan kind "state" (per-request state, not KV rows), but
# SGLang keeps them inside its token-to-KV pool (deepseek_v4_memory_pool.py), not beside it
# as a Mamba pool: the harness counts them with the target's pool bytes
COMPRESSOR_STATE_POOLS = ("c4 state", "c128 state", "c2 state")
KV_DTYPES = ("auto", "fp8_e4m3")  # auto resolves to fp8_e4m3; both give the same rows
LOW_RATIO_INDEX_PAGE = 64  # DSV41_INDEX_PAGE_SIZE off Blackwell (dsv41_index_page_size)
LOW_RATIO_PAIR_RING = 2  # get_compress_state_ring_size(2) without speculative decoding


@dataclass(frozen=True, kw_only=True)
class Dsv4Layout:
    """One rank's DeepSeek-V4 layers as SGLang's pool holds them (all replicated)."""

    layers: int
    c4_layers: int
    c128_layers: int
    head_dim: int  # qk_nope + qk_rope: the compressor state's width
    index_head_dim: int
    window: int
    draft_layers: int = 0  # the draft's window-only layers (NextN: 1; DSpark: its stages)
    c1_layers: int = 0  # DeepSeek-V4.1's ratio-1 KV sources
    c2_layers: int = 0  # ... and ratio-2 KV sources
    draft_tokens: int = 0  # --speculative-num-draft-tokens (0: no speculative decoding)

    @property
    def pair_ring(self) -> int:
        """The ratio-2 pair ring (``get_compress_state_ring_size(2, draft_tokens)``): 2,
        or with draft tokens the power of two above ``draft_tokens + 1``."""
        return 1 << (self.draft_tokens + 1).bit_length() if self.draft_tokens else 2

    @property
    def low_index_row_bytes(self) -> int:
        """One fp4 low-ratio indexer key with its scales (``force_fp4``)."""
        return self.index_head_dim // 2 + self.index_head_dim // 32

    @property
    def rings(self) -> tuple[int, int]:
        """The ratio-4 and ratio-128 compressor rings (``get_compress_state_ring_size``)."""
        return (SPEC_C4_RING, SPEC_C128_RING) if self.draft_layers else (C4_RING, C128_RING)

    @property
    def index_row_bytes(self) -> int:
        """One fp8 indexer key with its fp32 scales (``get_dsv4_indexer_bytes_per_token``)."""
        return self.index_head_dim + self.index_head_dim // 128 * 4


@dataclass(frozen=True, kw_only=True)
class Dsv4Pools:
    """Sizes (rows) and bytes of every buffer of the pool at ``full`` tokens."""

    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int
    c128_state: int
    running: int
    swa_bytes: int
    c4_bytes: int
    c128_bytes: int
    indexer_bytes: int
    c4_state_bytes: int
    c128_state_bytes: int
    draft_swa_bytes: int = 0
    c1_bytes: int = 0
    c2_bytes: int = 0
    c1_indexer_bytes: int = 0
    c2_indexer_bytes: int = 0
    c2_state_bytes: int = 0

    @property
    def all_indexer_bytes(self) -> int:
        """Every ``DeepSeekV4IndexerPool``: the ratio-4 keys and V4.1's low-ratio keys."""
        return self.indexer_bytes + self.c1_indexer_bytes + self.c2_indexer_bytes

    @property
    def target_bytes(self) -> int:
        """The target's ``DeepSeekV4TokenToKVPool`` (every buffer but the draft's)."""
        return (
            self.swa_bytes
            + self.c4_bytes
            + self.c128_bytes
            + self.all_indexer_bytes
            + self.c4_state_bytes
            + self.c128_state_bytes
            + self.c1_bytes
            + self.c2_bytes
            + self.c2_state_bytes
        )

    @property
    def total_bytes(self) -> int:
        """Target and draft pools: what the rank's KV budget must hold."""
        return self.target_bytes + self.draft_swa_bytes


def is_dsv4(d: Deployment) -> bool:
    """The target is DeepSeek-V4 or V4.1 (compressed-latent layers)."""
    return any(isinstance(x, CompressedMLALayer) for x in d.target.layers)


def is_v41(d: Deployment) -> bool:
    """The target is DeepSeek-V4.1 (latents shared from KV sources)."""
    return any(isinstance(x, SharedCompressedMLALayer) for x in d.target.layers)


def check(d: Deployment, *, host_bytes: int = 0) -> None:
    """InvalidArgumentError for a DeepSeek-V4 or V4.1 deployment outside the modelled
    path (V4.1: none or DSpark, as SGLang takes no other speculative decoding for it)."""
    cfg = d.target.raw_config
    text = cfg.get("text_config", cfg)
    if not isinstance(text.get("compress_ratios"), list):
        raise InvalidArgumentError(
            f"SGLang 0.5.23 reads DeepSeek-V4's per-layer compress_ratios list, which "
            f"{d.target.name}'s config lacks"
            + ("" if is_v41(d) else " (it has layer_types / compress_rates, the transformers form)")
            + "; SGLang fails on it (configs/model_config.py _derive_model_shapes); pass "
            "a config with compress_ratios, or plan it with --engine vllm"
        )
    if is_v41(d) and d.spec.name not in ("none", "dspark"):
        raise InvalidArgumentError(
            f'SGLang 0.5.23 refuses DeepSeek-V4.1 with --spec {d.spec.name}: "DeepSeek-V4.1 '
            'does not support speculative decoding other than DSpark yet" '
            "(arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features); plan --spec "
            "none or --spec dspark"
        )
    if d.spec.name not in ("none", "mtp", "dspark"):
        raise InvalidArgumentError(
            f"--engine sglang is modelled for DeepSeek-V4 without speculative decoding or "
            f"with its MTP layer (SGLang takes EAGLE top-k 1 or DSPARK for it; a sidecar "
            f"draft's pools are not modelled); got --spec {d.spec.name}; plan --spec none, "
            "--spec mtp or --engine vllm"
        )
    if d.spec.name == "dspark":
        _check_dspark(d)
    limit = _max_draft_tokens(d)
    if d.spec.name in ("mtp", "dspark") and limit and d.lookahead_tokens + 1 > limit:
        ring = SPEC_C4_RING if limit == MAX_DRAFT_TOKENS else SPEC_C128_RING
        raise InvalidArgumentError(
            f"SGLang's DeepSeek-V4 compressor ring ({ring} rows) serves at most {limit} "
            f"draft tokens (_assert_ring_serves_draft_tokens); --max-draft-len "
            f"{d.lookahead_tokens} needs {d.lookahead_tokens + 1}; pick --max-draft-len "
            f"{limit - 1} or less"
        )
    if d.parallel.pp > 1 and is_v41(d):
        raise InvalidArgumentError(
            'SGLang 0.5.23 refuses DeepSeek-V4.1 with pipeline parallelism ("DeepSeek-V4.1 '
            'does not support pipeline parallelism yet": validate_deepseek_v41_features); '
            "drop --pp or plan --engine vllm"
        )
    if d.parallel.pp > 1 or host_bytes:
        raise InvalidArgumentError(
            "--engine sglang is modelled for DeepSeek-V4 and V4.1 on one pipeline stage "
            "without HiCache; drop --pp / --host-budget or plan --engine vllm"
        )
    for x in d.target.layers:
        if not isinstance(x, CompressedMLALayer) or (x.head_dim, x.rope_head_dim) != (512, 64):
            raise InvalidArgumentError(
                f"SGLang's DeepSeek-V4 pool takes 512-wide latents with 64 rotary dims "
                f"(its 584-byte row); {d.target.name} layer {x.index} is {x!r}"
            )


def dspark_settings(d: Deployment) -> dict[str, Any]:
    """SGLang's DSPARK flags (``arg_groups/speculative_hook.py`` ``_handle_dspark``): one
    step of top-k 1 (it forces both), a block of ``gamma`` = ``--max-draft-len`` tokens
    (``--speculative-dspark-block-size`` overrides the checkpoint's ``dspark_block_size``)
    and a verify window of ``gamma + 1``; the draft path defaults to the target, whose
    config bundles the drafter (``checkpoint_bundles_dspark_draft``). DP attention needs
    ``--enable-dp-lm-head``."""
    k = d.lookahead_tokens
    out: dict[str, Any] = {
        "--speculative-algorithm": "DSPARK",
        "--speculative-num-steps": 1,
        "--speculative-eagle-topk": 1,
        "--speculative-dspark-block-size": k,
        "--speculative-num-draft-tokens": k + 1,
    }
    if d.parallel.dp_attention and d.parallel.dp > 1:
        out["--enable-dp-lm-head"] = True
    return out


def layout_of(d: Deployment) -> Dsv4Layout:
    """The pool's layer counts and widths for ``d``'s target."""
    layers = [x for x in d.target.layers if isinstance(x, CompressedMLALayer)]
    first = layers[0]
    index = next((x.index_head_dim for x in layers if x.index_head_dim), 0)
    # collect_sources_by_ratio: V4.1's ratio-1/2 storage lives on its KV sources only
    sources = [x for x in layers if isinstance(x, SharedCompressedMLALayer) and x.kv_source]
    return Dsv4Layout(
        layers=len(layers),
        c4_layers=sum(x.compress_ratio == 4 for x in layers),
        c128_layers=sum(x.compress_ratio == 128 for x in layers),
        head_dim=first.head_dim,
        index_head_dim=index,
        window=first.window,
        draft_layers=_draft_layers(d),
        c1_layers=sum(x.compress_ratio == 1 for x in sources),
        c2_layers=sum(x.compress_ratio == 2 for x in sources),
        draft_tokens=d.lookahead_tokens + 1 if d.spec.name in ("mtp", "dspark") else 0,
    )


def _max_draft_tokens(d: Deployment) -> int:
    """The most draft tokens the speculative compressor rings serve
    (``get_compress_state_write_pad``: ``16 - 8 + 2`` with a ratio-4 layer, else ``256 -
    128 + 2`` with a ratio-128 one); 0 with neither (V4.1's pair ring grows instead).
    The NextN draft is checked against the ratio-4 ring whatever the layers."""
    ratios = {x.compress_ratio for x in d.target.layers if isinstance(x, CompressedMLALayer)}
    if 4 in ratios or d.spec.name == "mtp":
        return MAX_DRAFT_TOKENS
    return SPEC_C128_RING - 128 + 2 if 128 in ratios else 0


def _draft_layers(d: Deployment) -> int:
    """The draft pool's window-only layers: DeepseekV4ForCausalLMNextN's one layer
    whatever the checkpoint ships (``--spec mtp``), or DeepseekV4ForCausalLMDSpark's
    stages (``--spec dspark``: ``len(dspark_target_layer_ids)``, else
    ``num_nextn_predict_layers``, else 1; ``models/deepseek_v4_dspark.py``)."""
    if d.spec.name == "mtp":
        return 1
    if d.spec.name != "dspark":
        return 0
    return dspark_stages(_text_config(d))


def _text_config(d: Deployment) -> Mapping[str, Any]:
    """The target's text config (V4.1 nests it; SGLang flattens it)."""
    cfg = d.target.raw_config
    text = cfg.get("text_config", cfg)
    return text if isinstance(text, Mapping) else cfg


def dspark_stages(text: Mapping[str, Any]) -> int:
    """``DeepseekV4ForCausalLMDSpark.num_stages`` of a (flattened) V4.1 config."""
    ids = text.get("dspark_target_layer_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    return int(text.get("num_nextn_predict_layers") or 1)


def _check_dspark(d: Deployment) -> None:
    """InvalidArgumentError where SGLang's DSpark draft differs from the one kvbudget's
    model counts (vLLM's stages, whose weights the plan holds). ``--max-draft-len 0``,
    which ``_handle_dspark`` refuses (a verify window of at least 2), is refused for
    every engine before this."""
    sglang_stages = dspark_stages(_text_config(d))
    if sglang_stages != len(d.target.mtp_layers):
        raise InvalidArgumentError(
            f"SGLang 0.5.23 builds {sglang_stages} DSpark stage(s) for {d.target.name} "
            "(DeepseekV4ForCausalLMDSpark: one per dspark_target_layer_ids entry), vLLM "
            f"{len(d.target.mtp_layers)} (n_mtp_layers, else num_nextn_predict_layers), "
            "which kvbudget's weights count; not modelled: give the config as many stages "
            "as target layers, or plan --engine vllm"
        )


def page_bytes(rows: int) -> int:
    """Bytes of one page of ``rows`` latent rows (``KVLayout.V4.page_bytes``)."""
    return cdiv(rows * ROW_BYTES, PAGE_ALIGN_BYTES) * PAGE_ALIGN_BYTES


def _pages(size: int, page: int) -> int:
    """``_num_dsv4_physical_kv_pages``: the allocator's reserved 256-token page on top."""
    return cdiv(size + PAGE_TOKENS, page)


def _state_bytes(size: int, ring: int, ratio: int, width: int) -> int:
    """One ``CompressStatePool``: ``size + ring + 1`` rows padded to the ratio."""
    rows = cdiv(size + ring + 1, ratio) * ratio
    return rows * width * STATE_BYTES


def swa_tokens(full: int) -> int:
    """``_get_swa_tokens``: ``int(full x ratio)`` floored to the page."""
    return int(full * SWA_FULL_TOKENS_RATIO) // PAGE_TOKENS * PAGE_TOKENS


def running_per_worker(d: Deployment, full: int) -> int:
    """``resolve_max_num_reqs`` with ``--max-running-requests`` given."""
    dp = d.parallel.dp if d.parallel.dp_attention else 1
    return min(max(1, d.max_batch_size // dp), full // 2)


def pools(lay: Dsv4Layout, full: int, running: int) -> Dsv4Pools:
    """Every buffer of ``DeepSeekV4TokenToKVPool`` at ``full`` tokens (a page multiple)."""
    swa = swa_tokens(full)
    c4, c128 = full // 4, full // 128
    c4_ring, c128_ring = lay.rings
    # ring_sizes.get(4, 0): no ratio-4 owner (V4.1, an all-128 V4), no c4 state rows
    c4_state = swa // PAGE_TOKENS * c4_ring if lay.c4_layers else 0
    c128_state = (running + 1) * c128_ring
    c4_page, c128_page = PAGE_TOKENS // 4, PAGE_TOKENS // 128
    c4_state_bytes = _state_bytes(c4_state, c4_ring, 4, 4 * lay.head_dim) + _state_bytes(
        c4_state, c4_ring, 4, 4 * lay.index_head_dim
    )
    swa_layer_bytes = _pages(swa, PAGE_TOKENS) * page_bytes(PAGE_TOKENS)
    return Dsv4Pools(
        full=full,
        swa=swa,
        c4=c4,
        c128=c128,
        c4_state=c4_state,
        c128_state=c128_state,
        running=running,
        swa_bytes=swa_layer_bytes * lay.layers,
        c4_bytes=_pages(c4, c4_page) * page_bytes(c4_page) * lay.c4_layers,
        c128_bytes=_pages(c128, c128_page) * page_bytes(c128_page) * lay.c128_layers,
        indexer_bytes=_pages(c128 * 32, c4_page) * c4_page * lay.index_row_bytes * lay.c4_layers,
        c4_state_bytes=c4_state_bytes * lay.c4_layers,
        c128_state_bytes=_state_bytes(c128_state, c128_ring, 128, 2 * lay.head_dim)
        * lay.c128_layers,
        draft_swa_bytes=swa_layer_bytes * lay.draft_layers,
        **_low_ratio_bytes(lay, full, running),
    )


def _low_ratio_bytes(lay: Dsv4Layout, full: int, running: int) -> dict[str, int]:
    """DeepSeek-V4.1's buffers on its ratio-1 and ratio-2 KV sources
    (``_init_compressed_pools``, ``_make_pair_state_pool``); zeros for V4."""
    out: dict[str, int] = {}
    for ratio, sources in ((1, lay.c1_layers), (2, lay.c2_layers)):
        page = PAGE_TOKENS // ratio
        out[f"c{ratio}_bytes"] = _pages(full // ratio, page) * page_bytes(page) * sources
        # the indexer's size counts the reserved full page; its own pool reserves one more
        keys = cdiv((full + PAGE_TOKENS) // ratio + LOW_RATIO_INDEX_PAGE, LOW_RATIO_INDEX_PAGE)
        out[f"c{ratio}_indexer_bytes"] = (
            keys * LOW_RATIO_INDEX_PAGE * lay.low_index_row_bytes * sources
        )
    out["c2_state_bytes"] = _pair_state_bytes(lay, running)
    return out


def _pair_state_bytes(lay: Dsv4Layout, running: int) -> int:
    """The ratio-2 sources' pair states (``_make_pair_state_pool``; the estimate's
    ``_get_c2_state_fixed_bytes`` prices the same rows)."""
    ring = lay.pair_ring
    return _state_bytes((running + 1) * ring, ring, 2, 2 * lay.head_dim) * lay.c2_layers


def estimated_full(lay: Dsv4Layout, budget_bytes: int, running: int) -> int:
    """The full tokens SGLang's own byte estimate admits in ``budget_bytes``
    (``DSV4PoolConfigurator.calculate_pool_sizes``, in its float arithmetic): per-token
    bytes of the paged rows (``page_bytes / page``), the c4 states priced per sliding
    row, V4.1's ratio-1/2 latents and fp4 keys (``_compressed_bytes_per_full_token``),
    the ``(L + 1) / L`` draft inflation under speculative decoding (one draft layer,
    whatever the draft's count); the c128 and pair states of ``running + 1`` request
    slots are fixed bytes; the result floored to the page, less the pages V4.1's
    reserved rows take (``_get_low_ratio_kv_padding_bytes``)."""
    c4_ring, c128_ring = lay.rings
    per_swa = (
        page_bytes(PAGE_TOKENS) / PAGE_TOKENS * lay.layers
        + (c4_ring / PAGE_TOKENS)
        * (2 * 2 * lay.head_dim * STATE_BYTES + 2 * 2 * lay.index_head_dim * STATE_BYTES)
        * lay.c4_layers
    )
    c4_page, c128_page = PAGE_TOKENS // 4, PAGE_TOKENS // 128
    c4 = 1 / 4 * (page_bytes(c4_page) / c4_page) + 1 / 4 * INDEXER_ESTIMATE_BYTES
    c128 = 1 / 128 * (page_bytes(c128_page) / c128_page)
    low = {r: (_row_bytes(r) + lay.low_index_row_bytes) / r for r in (1, 2)}
    # _get_bytes_per_full_token's sum over the ratios, in collect_sources_by_ratio's
    # order (4, 128, 1, 2); an absent ratio adds 0.0, which leaves the float unchanged
    terms = (c4 * lay.c4_layers, c128 * lay.c128_layers, low[1] * lay.c1_layers,
             low[2] * lay.c2_layers)  # fmt: skip
    per_full = SWA_FULL_TOKENS_RATIO * per_swa + sum(terms)
    if lay.draft_layers:
        per_full *= (lay.layers + 1) / lay.layers  # one draft layer, as SGLang prices it
    fixed = _state_bytes((running + 1) * c128_ring, c128_ring, 128, 2 * lay.head_dim)
    available = max(budget_bytes - fixed * lay.c128_layers - _pair_state_bytes(lay, running), 0)
    full = int(available / per_full) // PAGE_TOKENS * PAGE_TOKENS
    while full > 0 and full * per_full + _low_ratio_padding(lay, full) > available:
        full -= PAGE_TOKENS  # its loop
    return full


def _row_bytes(ratio: int) -> float:
    """``_get_paged_kv_bytes_per_token(ratio)``: a page's bytes over its rows."""
    page = PAGE_TOKENS // ratio
    return page_bytes(page) / page


def _low_ratio_padding(lay: Dsv4Layout, full: int) -> float:
    """``_get_low_ratio_kv_padding_bytes``: the ratio-1/2 sources' reserved latent page
    and the keys past ``full // r`` their indexer pool holds; 0 for V4."""
    padding = 0.0
    for ratio, sources in ((1, lay.c1_layers), (2, lay.c2_layers)):
        if not sources:
            continue
        main = PAGE_TOKENS * _row_bytes(ratio)
        keys = cdiv((full + PAGE_TOKENS) // ratio + LOW_RATIO_INDEX_PAGE, LOW_RATIO_INDEX_PAGE)
        index = (keys * LOW_RATIO_INDEX_PAGE - full // ratio) * lay.low_index_row_bytes
        padding += (main + index) * sources
    return padding


def largest_pools(d: Deployment, lay: Dsv4Layout, budget_bytes: int) -> Dsv4Pools | None:
    """The pools of the most full tokens (a page multiple) whose bytes fit
    ``budget_bytes`` with a sliding pool SGLang accepts; None when none does."""

    def at(pages: int) -> Dsv4Pools:
        full = pages * PAGE_TOKENS
        return pools(lay, full, running_per_worker(d, full))

    lo, hi = 0, budget_bytes // PAGE_TOKENS + 1  # a token costs at least a byte
    if lay.draft_layers:  # SGLang's inflated estimate admits no more than this
        requested = max(1, d.max_batch_size // (d.parallel.dp if d.parallel.dp_attention else 1))
        hi = min(hi, estimated_full(lay, budget_bytes, requested) // PAGE_TOKENS)
    while lo < hi:  # bytes grow with the pages: the last page count that fits
        mid = (lo + hi + 1) // 2
        if at(mid).total_bytes <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return None
    best = at(lo)
    return best if best.swa > lay.window + PAGE_TOKENS else None


__all__ = [
    "COMPRESSOR_STATE_POOLS",
    "LOW_RATIO_INDEX_PAGE",
    "LOW_RATIO_PAIR_RING",
    "PAGE_TOKENS",
    "Dsv4Layout",
    "Dsv4Pools",
    "check",
    "dspark_settings",
    "dspark_stages",
    "estimated_full",
    "is_dsv4",
    "is_v41",
    "largest_pools",
    "layout_of",
    "page_bytes",
    "pools",
]
