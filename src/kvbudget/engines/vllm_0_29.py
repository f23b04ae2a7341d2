"""vLLM 0.29.0: the newest 0.2x release, whose KV sizing differs from 0.33.0's.

Everything :mod:`kvbudget.engines.vllm` describes holds for 0.29.0 (groups, page
unification, the sliding and chunked charges, the null block held back before the fit
check, the refusal text, the capacity log), except five things, read in the 0.29.0 wheel
from PyPI (``vllm-project/vllm`` v0.29.0) and checked on CPU by
``benchmarks/fidelity/vllm_fidelity.py`` run in a 0.29.0 venv:

* **ngram runs without async scheduling.** ``VllmConfig.__post_init__``
  (``vllm/config/vllm.py:1262-1285``) turns ``async_scheduling`` off for ngram ("Async
  scheduling not supported with ngram-based speculative decoding") and refuses it when
  given (``:1231-1251``), so ``max_in_flight_tokens`` is ``pp x max_num_batched_tokens``,
  not ``(pp + 1) x``: a sliding group charges 8,192 fewer tokens per request at PP 1
  (gpt-oss-120b ngram at 40 GiB: 521 blocks per request, 28.34x, against 1,033 and
  23.63x in 0.33.0).
* **draft-target (and ngram) run on the V1 model runner** (Model Runner V2 takes only
  eagle, eagle3 and mtp drafters, ``vllm/config/vllm.py:2562-2574``), which keeps ``pp``
  batches in flight under async scheduling with PP > 1, not ``pp + 1``
  (``max_concurrent_batches``, ``:559-569``): a sliding group is charged one prefill
  chunk fewer per request there.
* **An EAGLE/EAGLE3/MTP drafter under PP > 1 is refused** at configuration: the draft's
  parallel config takes the target's ``pipeline_parallel_size``
  (``vllm/config/speculative.py:1690``; 0.30.0 and later give it 1) and the draft classes
  lack ``SupportsPP`` (``vllm/config/model.py:1424-1430``).
* **No prefill-checkpoint state for Mamba2 or Gated DeltaNet layers**: no layer sets
  ``num_prefill_checkpoint_blocks`` (``MambaSpec.max_memory_usage_bytes``,
  ``vllm/v1/kv_cache_interface.py:889-892``), so a request holds ``2 + K`` states in
  align mode, not ``2 + K + 1`` (Nemotron-H-8B at 40 GiB: 20 blocks per request,
  126.00x, against 26 and 96.92x).
* **No 64-token alignment of a GDN model's block size**:
  ``Platform._align_hybrid_block_size`` (``vllm/platforms/interface.py:911``) aligns the
  attention block only to the kernel's 16 (Qwen3-Next MTP at TP 1: 560 tokens, against
  576 in 0.33.0).
"""

from __future__ import annotations

from kvbudget.engines.vllm import VllmRelease, engine_model

RELEASE = VllmRelease(
    version="0.29.0",
    ref="v0.29.0 (the PyPI wheel)",
    checkpoint_state_kinds=frozenset(),
    gdn_checkpoint_alignment=None,
    async_with_ngram=False,
    speculation_with_pp=False,
    v1_runner_specs=frozenset({"ngram", "draft-target"}),
    # no DeepSeek-V4.1 (vllm/models/ has deepseek_v4 and deepseek_v32 only; no
    # deepseek_v41 in transformers_utils/config.py _CONFIG_REGISTRY)
    absent_model_types=frozenset({"deepseek_v41"}),
)

MODEL = engine_model(RELEASE, default=False)

__all__ = ["MODEL", "RELEASE"]
