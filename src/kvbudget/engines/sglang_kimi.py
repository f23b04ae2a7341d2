"""Kimi-Linear (``kimi_linear``) and Kimi K3 (``kimi_k3``) under SGLang 0.5.23.

Facts from the SGLang 0.5.23 PyPI wheel (``python/sglang/srt/``; it records no commit),
run by the fidelity harness (``benchmarks/fidelity/sglang``, ``--match kimi``):

* **Config**: SGLang reads ``kimi_linear`` with its own ``KimiLinearConfig``
  (``configs/kimi_linear.py``) and ``kimi_k3`` with ``KimiK3Config``
  (``configs/kimi_k3.py``), whose ``text_config`` is a ``KimiLinearConfig``; the models
  are ``KimiLinearForCausalLM`` (``models/kimi_linear.py``) and
  ``KimiK3ForConditionalGeneration`` (``models/kimi_k3.py``).
* **Pools**: ``configs/hybrid_arch.py`` ``kimi_linear_config`` finds the text config, so
  ``mem_cache/kv_cache_builder.py`` ``uses_ssm_state`` holds and the request pool is a
  ``HybridReqToTokenPool`` whose ``MambaPool`` keeps each KDA layer's conv and recurrent
  state (:mod:`kvbudget.engines.sglang_state`: ``KimiLinearStateShape``, float32
  recurrent state, dense speculative conv windows), the slots sized as for the other
  hybrids (``_handle_max_mamba_cache``). ``ModelConfig._derive_model_shapes``
  (``configs/model_config.py``) makes both architectures MLA
  (``AttentionArch.MLA``): the full-attention layers
  (``KimiLinearConfig.full_attention_layer_ids``) hold ``kv_lora_rank +
  qk_rope_head_dim`` latents in an ``MLATokenToKVPool``, the path
  :mod:`kvbudget.engines.sglang` plans for DeepSeek's MLA. With HiCache the state host
  pool and the MLA host pool split ``--hicache-size`` (``build_hybrid_mamba_stack``).

Refused (:func:`check`), in what SGLang 0.5.23 does:

* a ``linear_attn_config`` without ``full_attn_layers`` (or with it null):
  ``KimiLinearConfig.__init__`` asserts ``linear_attn_config["full_attn_layers"] is not
  None`` (a KeyError at start-up when it is absent); its value is not read for sizing
  (``full_attention_layer_ids`` follows ``kda_layers``);
* a draft pool (``--spec mtp``, EAGLE heads, draft models): SGLang has no Kimi MTP
  draft model (no Kimi NextN/MTP class under ``models/``; ``ModelConfig
  ._config_draft_model`` renames no Kimi architecture, so ``--speculative-algorithm
  NEXTN`` would load ``KimiK3ForConditionalGeneration`` itself as the draft), and the
  Kimi models capture hidden states for a DSPARK draft only
  (``set_dspark_layers_to_capture``; no ``set_eagle3_layers_to_capture``), which
  kvbudget does not model. NGRAM (no draft pool) and no speculation are planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvbudget.errors import InvalidArgumentError

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

MODEL_TYPES = frozenset({"kimi_linear", "kimi_k3"})
# --spec values that give SGLang no draft KV pool
NO_DRAFT_SPECS = frozenset({"none", "ngram"})


def is_kimi(d: Deployment) -> bool:
    """Whether the target is Kimi-Linear or Kimi K3."""
    return d.target.model_type in MODEL_TYPES


def check(d: Deployment) -> None:
    """InvalidArgumentError for a Kimi config SGLang does not start on, or a Kimi
    deployment with a draft pool (the module docstring says why)."""
    if not is_kimi(d):
        return
    linear = d.target.config.get("linear_attn_config")
    if isinstance(linear, Mapping) and linear.get("full_attn_layers") is None:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {d.target.name}: its linear_attn_config "
            "has no full_attn_layers, which SGLang 0.5.23's KimiLinearConfig.__init__ "
            "requires (configs/kimi_linear.py: assert ... is not None; a KeyError when "
            "absent); give it the full-attention layer numbers, or plan it with --engine vllm"
        )
    if d.spec.name in NO_DRAFT_SPECS:
        return
    raise InvalidArgumentError(
        f"--engine sglang is not modelled for {d.target.name} with --spec {d.spec.name}: "
        "SGLang 0.5.23 has no Kimi MTP draft model (no Kimi NextN class; "
        "ModelConfig._config_draft_model renames no Kimi architecture) and its Kimi "
        "models capture hidden states for a DSPARK draft only "
        "(set_dspark_layers_to_capture), which kvbudget does not model; plan --spec "
        "none or ngram, or --engine vllm"
    )


__all__ = ["MODEL_TYPES", "NO_DRAFT_SPECS", "check", "is_kimi"]
