"""vLLM 0.29.0: the newest 0.2x release, whose KV sizing differs from 0.33.0's.

Everything :mod:`kvbudget.engines.vllm` describes holds for 0.29.0 (groups, page
unification, the sliding and chunked charges, the null block held back before the fit
check, the refusal text, the capacity log), except nine things, read in the 0.29.0 wheel
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
* **Its longest --max-model-len differs** (``_get_and_verify_max_len``,
  ``vllm/config/model.py``): only su / longrope / llama3 ropes keep their length, a yarn
  rope restarts from its ``original_max_position_embeddings`` before the factor, and its
  own ``Step3p5Config`` (``vllm/transformers_utils/configs/step3p5.py``) defaults
  ``max_seq_len`` to 4096, so a Step-3.5 config without one takes at most 4,096 tokens
  unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (:mod:`kvbudget.engines.vllm_context`).
* **Step-3.5 is read by its own ``Step3p5Config``** (0.33.0 reads transformers'
  ``Step3p7TextConfig``, which moves trailing MTP entries to ``mtp_layer_types``):
  ``Step3p5Attention.__init__`` (``model_executor/models/step3p5.py:155-175``) indexes
  ``layer_types`` by the MTP layer's own index, so ``--spec mtp`` needs ``layer_types``
  padded with the MTP layers' entries (else vLLM fails with IndexError building the
  draft); without ``layer_types`` every even layer slides. Configs on which the two
  releases' layers would differ are refused (:func:`check_step3p5`); an
  ``attention_other_setting`` with KV groups or a head size of its own, which
  ``Step3p5DecoderLayer.__init__`` (``:404-460``) would give its layers, is refused for
  every release when the config is read (:mod:`kvbudget.architectures.step3p5`).
* **Kimi K3's KDA recurrent state is float32** whatever ``--mamba-ssm-cache-dtype``
  says (``KimiK3DeltaAttention.get_state_dtype``, ``vllm/models/kimi_k3/nvidia/kda.py:363-375``):
  a ``--state-dtype`` that would keep it in bf16 is refused (``kda_ssm_cache_dtype``).
* **No DeepSeek-V4.1** (``deepseek_v41``: no ``models/deepseek_v41``, nothing in
  ``transformers_utils/config.py`` ``_CONFIG_REGISTRY``): refused
  (``absent_model_types``).
* **No 64-token alignment of a GDN model's block size**:
  ``Platform._align_hybrid_block_size`` (``vllm/platforms/interface.py:911``) aligns the
  attention block only to the kernel's 16 (Qwen3-Next MTP at TP 1: 560 tokens, against
  576 in 0.33.0).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from kvbudget.engines.vllm import VllmRelease, engine_model
from kvbudget.engines.vllm_context import LengthRule
from kvbudget.errors import InvalidArgumentError

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment


def check_step3p5(d: Deployment) -> None:
    """InvalidArgumentError for a Step-3.5 config vLLM 0.29.0 builds otherwise than
    0.33.0 (see the module docstring), naming what to change."""
    if d.target.model_type != "step3p5":
        return
    config = d.target.config
    layers, mtp = len(d.target.layers), len(d.target.mtp_layers)
    types = config.get("layer_types") or []
    why = None
    if d.spec.name == "mtp" and len(types) < layers + mtp:
        why = (
            f"its layer_types has {len(types)} entries and vLLM 0.29.0 reads the "
            f"{mtp} MTP layers' types there (entries {layers} to {layers + mtp - 1}): "
            "pad layer_types with them"
        )
    elif not types and config.get("sliding_window") is not None:
        why = "without layer_types vLLM 0.29.0 slides every even layer: add layer_types"
    if why is not None:
        raise InvalidArgumentError(
            f"--engine vllm@0.29.0 does not plan {d.target.name} as configured: {why}; "
            "or plan with --engine vllm (0.33.0)"
        )


RELEASE = VllmRelease(
    version="0.29.0",
    ref="v0.29.0 (the PyPI wheel)",
    checkpoint_state_kinds=frozenset(),
    gdn_checkpoint_alignment=None,
    async_with_ngram=False,
    speculation_with_pp=False,
    v1_runner_specs=frozenset({"ngram", "draft-target"}),
    length_rule=LengthRule(
        unscaled_rope_types=frozenset({"su", "longrope", "llama3"}),
        yarn_from_original=True,
        config_defaults=MappingProxyType({"step3p5": MappingProxyType({"max_seq_len": 4096})}),
    ),
    check=check_step3p5,
    # no DeepSeek-V4.1 (vllm/models/ has deepseek_v4 and deepseek_v32 only; no
    # deepseek_v41 in transformers_utils/config.py _CONFIG_REGISTRY)
    absent_model_types=frozenset({"deepseek_v41"}),
)

MODEL = engine_model(RELEASE, default=False)

__all__ = ["MODEL", "RELEASE", "check_step3p5"]
