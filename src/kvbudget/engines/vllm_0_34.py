"""vLLM 0.34.0: the release after 0.33.0, whose KV sizing for kvbudget's plans is 0.33.0's.

Two things differ from 0.33.0 in what a plan says (each a field of :data:`RELEASE`):

* **An MTP drafter's embedding under PP > 1** (``pp_embedding.mtp_shares``,
  :class:`kvbudget.engines.vllm_pp_draft.PpEmbedding`): DeepSeek-V4's MTP class declares
  ``has_own_embed_tokens = False`` (``models/deepseek_v4/nvidia/mtp.py:300-302``) and
  ``spec_decode_needs_target_embed`` now asks the drafter's class rather than the
  method (``model_executor/models/utils.py:934-947``, ``ModelInfo.may_use_target_embed``,
  models/registry.py:1023), so ``DeepseekV4Model`` builds ``embed_tokens`` on the last PP
  rank (model.py:866) and the MTP layers share it (``shared``) where 0.33.0's kept their
  own (``kept``). MiniMax-M3's MTP shares the target's as in 0.33.0 (the class attribute
  is new, ``models/minimax_m3/nvidia/mtp.py:143-154``; the target builds its embedding
  for it, model.py:1430). The last stage holds one embedding either way; the plan warns
  with its bytes.
* **The default ``--gpu-memory-utilization``** (``gpu_memory_utilization``): 1.0 where
  the extensible KV cache is on, the default on CUDA (below).

MiniMax-M3's text config is now transformers' ``MiniMaxM3VLTextConfig`` (5.20.2,
``configuration_minimax_m3_vl.py``), which folds ``sparse_attention_config`` into
``layer_types`` and flat ``index_*`` fields; for a config that carries
``sparse_attention_config`` (every one kvbudget reads its sparse layers from) the layers
and index keys are the same, and 0.34.0 accepts an ``nvfp4`` ``indexer_kv_dtype``
(``models/minimax_m3/common/indexer.py:118-127``) that kvbudget's plan does not set.

Everything :mod:`kvbudget.engines.vllm` describes holds for 0.34.0, read in the 0.34.0
wheel from PyPI (``vllm-project/vllm`` v0.34.0) against the 0.33.0 wheel (``diff`` of
``v1/core/``, ``v1/kv_cache_interface.py``, ``config/``, ``platforms/interface.py``, the
attention, MLA, GDN and Mamba layers and backends, the speculators' configs) and checked
on CPU by ``benchmarks/fidelity/vllm_fidelity.py`` run in a 0.34.0 venv. What else
changed, and why none of it moves a figure of a plan kvbudget emits:

* **Model Runner V1 is gone** (``Platform.validate_environ``,
  ``vllm/platforms/interface.py:1481-1490``: "Model Runner V1 has been removed"):
  ``VllmConfig.max_concurrent_batches`` (``vllm/config/vllm.py:560-566``) is ``pp + 1``
  under async scheduling, ``pp`` without, for every speculation mode; 0.33.0 ran every
  mode kvbudget plans on Model Runner V2 already (``v1_runner_specs`` empty in both).
* **``--block-size`` defaults to 64** (``CacheConfig.DEFAULT_BLOCK_SIZE``,
  ``vllm/config/cache.py:185``; 16 in 0.33.0): kvbudget always emits ``--block-size``
  (:func:`kvbudget.engines.vllm.block_flag`), so ``user_specified_block_size`` holds and
  the backend's preferred size is not asked (``platforms/interface.py:781-785``).
* **The extensible KV cache** (``CacheConfig.enable_extensible_kv_cache``,
  ``vllm/config/cache.py:395-405``) sizes the cache after CUDA-graph capture from the
  memory then free, and is on by default on CUDA, where an unset
  ``--gpu-memory-utilization`` then means 1.0, not 0.92
  (``resolved_gpu_memory_utilization``, ``:494-501``). kvbudget's plan emits
  ``--kv-cache-memory-bytes``, which turns it off
  (``VllmConfig._resolve_extensible_kv_cache``, ``vllm/config/vllm.py:3203-3207``), so
  the pool is that many bytes, as in 0.33.0. The budget kvbudget derives when none is
  given follows 0.34.0's default: ``gpu_memory_utilization`` 1.0 (``memory_default``).
* **Speculators own their lookahead** (``SpeculatorConfig.num_lookahead_tokens``,
  ``vllm/v1/worker/gpu/spec_decode/*/config.py``): EAGLE/EAGLE3/MTP and draft models
  ``K``, DFlash ``K + 1``, anchor-sampling DSpark ``K``, ngram 0, as 0.33.0's
  ``VllmConfig.num_lookahead_tokens`` branches gave them.
* **The full-allocation fallback** for an MLA model beside sliding windows whose pages
  do not unify also takes sliding-window MLA specs
  (``_try_get_full_allocation_fallback_groups``, ``v1/core/kv_cache_planning.py:859-880``);
  kvbudget's MLA layers never slide, so no plan reaches it.
* **A sliding-window layer's block** prefers one dividing the primary block
  (``_largest_kernel_block_within(divisor_of=...)``,
  ``model_executor/layers/attention/attention.py:101-145, 683-692``): FlashAttention's
  ``MultipleOf(16)`` gives the primary block itself for every multiple of 16, as before.
* **Mamba states may be 16-byte aligned** (``MambaSpec.state_alignment``,
  ``v1/kv_cache_interface.py:1124-1150``), only with ``use_replayssm`` on the FlashInfer
  Mamba backend (``mamba_state_alignment``, ``model_executor/layers/mamba/mamba_utils.py:31-33``),
  which kvbudget's plan does not turn on.
* The start-up refusal's hint is reworded (``_more_kv_cache_memory_hint``,
  ``v1/core/kv_cache_planning.py:64-96``); with ``--kv-cache-memory-bytes`` it still asks
  for a larger ``gpu_memory_utilization`` or a shorter ``max_model_len``.
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.engines.vllm import RELEASE as RELEASE_0_33
from kvbudget.engines.vllm import engine_model
from kvbudget.engines.vllm_pp_draft import MTP_SHARES as MTP_SHARES_0_33

# the target model types whose MTP drafter shares the target's embedding under PP > 1 in
# 0.34.0: 0.33.0's (MiniMax-M3: its 0.34.0 MiniMaxM3MTP, models/minimax_m3/nvidia/mtp.py:
# 143-154, 306-311, still sets has_own_embed_tokens True under PP when the checkpoint
# loads model.embed_tokens.weight, and maybe_share_target_embed's torch.equal finds it the
# target's, which MiniMaxM3Model builds on the last rank for it, model.py:1430) and
# DeepSeek-V4 (DeepSeekV4MTP, models/deepseek_v4/nvidia/mtp.py:300-302: "The checkpoint
# has no MTP embedding, so always reuse the target's")
MTP_SHARES = MTP_SHARES_0_33 | {"deepseek_v4"}

# every other field is 0.33.0's (see the module docstring for what was read)
RELEASE = replace(
    RELEASE_0_33,
    version="0.34.0",
    ref="v0.34.0 (the PyPI wheel)",
    # CacheConfig.resolved_gpu_memory_utilization (vllm/config/cache.py:494-501): 1.0
    # with the extensible KV cache, the default on CUDA (_resolve_extensible_kv_cache,
    # vllm/config/vllm.py:3180-3263)
    gpu_memory_utilization="1.0",
    pp_embedding=replace(RELEASE_0_33.pp_embedding, mtp_shares=MTP_SHARES),
)

MODEL = engine_model(RELEASE, default=False)

__all__ = ["MODEL", "MTP_SHARES", "RELEASE"]
