"""Step-3.5 (``step3p5``) under SGLang 0.5.23: the target's full and sliding pools.

Facts from the SGLang 0.5.23 PyPI wheel (``python/sglang/srt/``; it records no commit),
run by the fidelity harness (``benchmarks/fidelity/sglang``, ``--match step3p5``):

* **Config**: SGLang reads ``step3p5`` with its own ``Step3p5Config``
  (``configs/step3p5.py``): ``num_attention_groups`` (default 8), ``layer_types``
  (default None), ``sliding_window``; other fields pass through as attributes.
* **Hybrid pools**: ``Step3p5ForCausalLM`` is on ``is_hybrid_swa_model``'s allow-list
  (``configs/model_config.py``), whatever its layers; ``get_hybrid_layer_ids`` takes the
  ``sliding_attention`` / ``full_attention`` entries of ``layer_types`` below
  ``num_hidden_layers`` (a list padded with the MTP layers' entries is cut there). So the
  sliding layers go to the SWA pool (``HybridSWAPoolConfigurator``, the window
  ``sliding_window``: ``ModelConfig._get_sliding_window_size``), the full ones to the full
  pool -- the split :mod:`kvbudget.engines.sglang` already plans for gpt-oss.
* **KV heads**: full layers ``get_total_num_kv_heads`` (``num_key_value_heads``, else
  ``num_attention_groups``); sliding layers ``get_swa_num_kv_heads``, which for a config
  with ``attention_other_setting`` reads its ``num_attention_groups``
  (:mod:`kvbudget.architectures.step3p5` refuses one that differs from the global count).

* **HiCache** (``arg_groups/overrides.py`` ``_step3p_overrides``): with
  ``--enable-hierarchical-cache`` SGLang sets ``disable_hybrid_swa_memory`` (and
  ``swa_full_tokens_ratio`` 1.0) for ``Step3p5ForCausalLM``, so every layer, sliding ones
  too, is in the one full pool at full length, and the host pool mirrors it
  (:func:`sliding_pool`). A host budget that leaves HiCache off (under a whole GB after
  the pools' pages) would have been planned with the wrong pools: refused
  (:func:`check_hicache`).

Refused (:func:`check`), each in what SGLang would do:

* no ``layer_types``: ``get_hybrid_layer_ids`` enumerates ``None`` (TypeError at start);
  no ``sliding_attention`` entry below ``num_hidden_layers``:
  ``HybridSWAPoolConfigurator`` asserts "Hybrid SWA model must have at least one SWA
  layer" (``--disable-hybrid-swa-memory`` would keep one pool; not modelled);
* layers of different query-head counts (sliding heads from ``attention_other_setting``
  or ``num_sliding_attention_heads``, ``per_layer_config``): SGLang 0.5.23 pins
  transformers 5.19.0, whose ``AutoConfig`` reads ``step3p5`` as ``Step3p7TextConfig``
  (``models/step3p7/configuration_step3p7.py``), heterogeneous then; SGLang's HF parser
  (``utils/hf_transformers/config.py`` ``parse``) asks ``hasattr(config,
  "num_attention_heads")``, which raises ``AmbiguousGlobalPerLayerAttributeError``;
* ``attention_other_setting`` without ``num_attention_groups``: ``get_swa_num_kv_heads``
  divides ``None`` (TypeError);
* a draft pool (``--spec mtp``, EAGLE heads, draft models): SGLang's MTP draft is
  ``Step3p5MTP`` (``ModelConfig.__init__`` renames the draft's architecture), whose
  layers ``get_hybrid_layer_ids`` makes one sliding layer ``[0]``, and the target's
  configurator prices ``eagle_draft_swa_num_layers`` of the draft in the SWA share
  (``spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``,
  ``pool_configurator.py`` ``HybridSWAPoolConfigurator.__init__``: ``min(sliding
  layers, num_nextn_predict_layers)`` of them) while the draft worker's pool holds that
  one layer over the target's sliding rows; kvbudget's hybrid model prices draft layers
  as full ones in a pool of the full rows, so those plans are not made. NGRAM (no draft
  pool) and no speculation are planned;
* another SGLang release than 0.5.23 (checked against that wheel only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvbudget.architectures.step3p5 import plan_layers
from kvbudget.config_fields import ConfigFields
from kvbudget.engines.common import GB
from kvbudget.errors import InvalidArgumentError

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

MODEL_TYPE = "step3p5"
CHECKED_VERSION = "0.5.23"
# --spec values that give SGLang no draft KV pool
NO_DRAFT_SPECS = frozenset({"none", "ngram"})


def is_step3p5(d: Deployment) -> bool:
    """Whether the target is Step-3.5."""
    return d.target.model_type == MODEL_TYPE


def sliding_pool(d: Deployment) -> bool:
    """Whether SGLang gives the sliding layers their own pool: not with HiCache, which a
    host budget of a whole GB or more turns on (``_step3p_overrides``)."""
    return d.host_bytes < GB


def check_hicache(d: Deployment, hicache_gb: int) -> None:
    """InvalidArgumentError when the pools were laid out for HiCache (:func:`sliding_pool`)
    but the host budget leaves ``--hicache-size`` 0, or the other way round."""
    if is_step3p5(d) and (hicache_gb > 0) == sliding_pool(d):
        raise InvalidArgumentError(
            f"--host-budget {d.host_bytes} B leaves --hicache-size {hicache_gb} for "
            f"{d.target.name}, and SGLang 0.5.23 lays out Step-3.5's pools by HiCache "
            "(_step3p_overrides: one full pool with it, a sliding pool without); give "
            "--host-budget 0 or a few GB more"
        )


def _config_refusal(d: Deployment) -> str | None:
    """Why SGLang 0.5.23 would not start on the target's config, or None."""
    cfg = d.target.config
    n = cfg.get("num_hidden_layers")
    types = cfg.get("layer_types")
    if not isinstance(types, list):
        return (
            "its config has no layer_types, which SGLang 0.5.23's get_hybrid_layer_ids "
            "(configs/model_config.py) enumerates for Step3p5ForCausalLM (TypeError at "
            "start-up); give layer_types"
        )
    below = types[:n] if isinstance(n, int) else types
    if "sliding_attention" not in below:
        return (
            "its layer_types has no sliding_attention layer below num_hidden_layers, and "
            "SGLang 0.5.23's HybridSWAPoolConfigurator asserts one for Step3p5ForCausalLM "
            "(--disable-hybrid-swa-memory is not modelled)"
        )
    heads = sorted({p.num_heads for p in plan_layers(ConfigFields(cfg, d.target.source))[0]})
    if len(heads) > 1:
        return (
            f"its layers have {' and '.join(map(str, heads))} query heads, and SGLang "
            "0.5.23's pinned transformers 5.19.0 reads such a step3p5 config as a "
            "heterogeneous Step3p7TextConfig, whose global num_attention_heads "
            "utils/hf_transformers/config.py parse reads (AmbiguousGlobalPerLayerAttributeError "
            "at start-up)"
        )
    other = cfg.get("attention_other_setting")
    if isinstance(other, Mapping) and other.get("num_attention_groups") is None:
        return (
            "its attention_other_setting has no num_attention_groups, which SGLang 0.5.23's "
            "ModelConfig.get_swa_num_kv_heads divides (TypeError); give it"
        )
    return None


def check(d: Deployment, version: str) -> None:
    """InvalidArgumentError for a Step-3.5 deployment this model of SGLang does not plan
    (the module docstring says why each is refused)."""
    if not is_step3p5(d):
        return
    name = d.target.name
    if version != CHECKED_VERSION:
        raise InvalidArgumentError(
            f"--engine sglang@{version} is not modelled for {name} (Step-3.5; checked "
            f"against SGLang {CHECKED_VERSION} only); plan it with --engine "
            f"sglang@{CHECKED_VERSION} or --engine vllm"
        )
    reason = _config_refusal(d)
    if reason is not None:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name}: {reason}; or plan it with --engine vllm"
        )
    if d.spec.name not in NO_DRAFT_SPECS:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name} with --spec {d.spec.name}: SGLang "
            "0.5.23 prices a Step-3.5 draft's layers in its sliding pool (Step3p5MTP's one "
            "sliding layer; eagle_draft_swa_num_layers in HybridSWAPoolConfigurator), which "
            "kvbudget does not model; plan --spec none or ngram, or --engine vllm"
        )


__all__ = ["CHECKED_VERSION", "MODEL_TYPE", "check", "check_hicache", "is_step3p5", "sliding_pool"]
