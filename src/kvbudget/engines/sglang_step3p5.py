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

* **MTP draft** (``--spec mtp``; benchmarks/fidelity/sglang runs it): emitted as
  ``--speculative-algorithm EAGLE``, for which ``_step3p_overrides`` sets
  ``enable_multi_layer_eagle`` (it compares the flag before NEXTN is aliased to EAGLE,
  so NEXTN leaves it off, and a single draft runner then has ``draft_model_idx`` None,
  which ``Step3p5MTP.load_weights`` adds to ``num_hidden_layers``: TypeError).
  ``MultiLayerEagleDraftWorker`` builds one draft ``ModelRunner`` per step,
  ``--speculative-num-steps`` = K of them (``TpModelWorker._init_multi_layer_eagle_model_runners``),
  each a ``Step3p5MTP`` (``ModelConfig.__init__`` renames the draft's architecture) that
  loads MTP layer ``num_hidden_layers + i`` (``_filter_mtp_weights``) and allocates its
  own pool from the target's ``MemoryPoolConfig`` (``KVCacheConfigurator`` with
  ``is_draft_worker=True``). ``_compute_model_num_layers`` gives ``Step3p5MTP`` one
  layer and ``get_hybrid_layer_ids`` makes it sliding (``[0]``), so each runner's pool
  is one sliding layer of the target's sliding rows (``SWAKVPool``, no full layer):
  ``(swa + page) x`` one sliding layer's bytes; with HiCache (no sliding pool) one layer of
  the full rows (``MHATokenToKVPool``), and the K pools are packed into the target's
  host pool (``_can_pack_hicache_mtp``). The target's configurator prices the draft
  from the target's own config (path-less: ``_resolve_eagle_aux_hidden_state``):
  ``eagle_draft_num_layers = num_nextn_predict_layers`` (N), of which
  ``eagle_draft_swa_num_layers = min(sliding layers, N)`` in the sliding share
  (``HybridSWAPoolConfigurator.__init__``: ``cell = F x (full + N - those) + ratio x S
  x (sliding + those)``), or ``int(cell x N / layers)`` more without a sliding pool
  (``DefaultPoolConfigurator``): :func:`mtp_layout`. Each runner also keeps its own
  ``embed_tokens`` (``Step3p5AMultiTokenPredictor``; ``Step3p5MTP.set_embed_and_head``
  does nothing), K copies of the target's embedding that the ledger's weights do not
  hold: added to the weights ``--mem-fraction-static`` covers, with a warning
  (:func:`draft_embedding_bytes`).

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
* ``--spec mtp`` with K above the checkpoint's N MTP layers: runner ``i >= N`` loads no
  MTP block, and ``Step3p5MTP.load_weights`` raises "Some parameters ... are not in the
  checkpoint" (RuntimeError); with MTP layers counted from another key than
  ``num_nextn_predict_layers`` (SGLang's ``Step3p5Config`` reads only that one, so it
  would price and pack no draft); at ``--pp`` > 1 (the runners under pipeline
  parallelism are not checked);
* another draft (EAGLE heads, draft models): the target's configurator prices
  ``eagle_draft_swa_num_layers`` of the draft's own config in the sliding share, and
  the draft's pools follow its own layers; not checked. NGRAM (no draft pool) and no
  speculation are planned;
* another SGLang release than 0.5.23 (checked against that wheel only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.architectures.step3p5 import plan_layers
from kvbudget.config_fields import ConfigFields
from kvbudget.engines.common import GB, refuse_unchecked_sglang
from kvbudget.errors import InvalidArgumentError
from kvbudget.units import format_bytes
from kvbudget.weights import weights_bytes

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.engines.sglang import Layout

MODEL_TYPE = "step3p5"
CHECKED_VERSION = "0.5.23"
# --spec values that give SGLang no draft KV pool
NO_DRAFT_SPECS = frozenset({"none", "ngram"})
# --spec values planned: the MTP draft as multi-layer EAGLE (module docstring)
PLANNED_SPECS = NO_DRAFT_SPECS | {"mtp"}
# the algorithm emitted for --spec mtp: _step3p_overrides turns multi-layer EAGLE on for it
MTP_ALGORITHM = "EAGLE"


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
    refuse_unchecked_sglang(version, CHECKED_VERSION, name, "Step-3.5")
    reason = _config_refusal(d)
    if reason is not None:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name}: {reason}; or plan it with --engine vllm"
        )
    if d.spec.name not in PLANNED_SPECS:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name} with --spec {d.spec.name}: SGLang "
            "0.5.23 prices such a draft from its own config in Step-3.5's sliding share "
            "(eagle_draft_swa_num_layers in HybridSWAPoolConfigurator), which kvbudget has "
            "not checked; plan --spec mtp, none or ngram, or --engine vllm"
        )
    if d.spec.name == "mtp":
        reason = _mtp_refusal(d)
        if reason is not None:
            raise InvalidArgumentError(
                f"--engine sglang is not modelled for {name} with --spec mtp: {reason}"
            )


def _mtp_refusal(d: Deployment) -> str | None:
    """Why SGLang 0.5.23's multi-layer EAGLE draft of ``d`` is not planned, or None."""
    n = len(d.target.mtp_layers)
    if n and d.target.config.get("num_nextn_predict_layers") != n:
        return (
            f"its config gives its {n} MTP layers by another key than "
            "num_nextn_predict_layers, the only one SGLang 0.5.23's Step3p5Config reads "
            "(it would price and pack no draft layer); give num_nextn_predict_layers"
        )
    if n and d.lookahead_tokens > n:
        return (
            f"--max-draft-len {d.lookahead_tokens} runs {d.lookahead_tokens} Step3p5MTP "
            f"draft runners, one per step, each loading MTP layer num_hidden_layers + step, "
            f"and the checkpoint has {n}: SGLang 0.5.23 raises at start-up "
            "(Step3p5MTP.load_weights: RuntimeError: Some parameters ... are not in the "
            f"checkpoint); pass --max-draft-len {n} or less"
        )
    if d.parallel.pp > 1:
        return (
            f"the multi-layer EAGLE draft runners at --pp {d.parallel.pp} are not checked "
            "against SGLang 0.5.23; plan --pp 1"
        )
    return None


def spec_algorithm(d: Deployment, name: str) -> str:
    """``--speculative-algorithm`` for ``d``: EAGLE for Step-3.5's MTP draft (NEXTN would
    leave multi-layer EAGLE off: module docstring), else ``name``."""
    return MTP_ALGORITHM if is_step3p5(d) and d.spec.name == "mtp" else name


def mtp_layout(d: Deployment, lay: Layout) -> Layout:
    """``lay`` with Step-3.5's MTP draft as SGLang 0.5.23 builds it (module docstring):
    K runners of one layer each, over the sliding rows when there is a sliding pool,
    priced by the target as ``num_nextn_predict_layers`` draft layers. Any other
    deployment (or a stage without the draft) gets ``lay`` back. Every Step-3.5 layer
    has the same KV bytes (:mod:`kvbudget.architectures.step3p5` refuses sliding KV
    heads or head sizes other than the global ones), so one layer's bytes are a pool's
    over its layers."""
    if not (is_step3p5(d) and d.spec.name == "mtp" and lay.draft_layers):
        return lay
    runners, nextn = d.lookahead_tokens, len(d.target.mtp_layers)
    if lay.swa_layers:
        per_layer = lay.swa // lay.swa_layers
        priced_swa = min(lay.swa_layers, nextn)
        return replace(
            lay,
            draft=runners * per_layer,
            draft_layers=runners,
            draft_in_swa=True,
            cell_draft_layers=nextn - priced_swa,
            cell_draft_swa=priced_swa * per_layer,
        )
    per_layer = lay.full // lay.full_layers
    return replace(lay, draft=runners * per_layer, draft_layers=runners, cell_draft_layers=nextn)


def draft_embedding_bytes(d: Deployment) -> int:
    """Bytes per rank of the embeddings Step-3.5's K MTP runners load beside the
    target's (module docstring): K x the target's ``embed_tokens`` on one rank (the
    runners' ``VocabParallelEmbedding`` is split over the whole TP group); 0 for any
    other deployment, and with ``--weights-bytes`` (the user's figure)."""
    if not (is_step3p5(d) and d.spec.name == "mtp") or d.weights_override is not None:
        return 0
    layout = d.parallel
    one = weights_bytes(
        d.target, tp=layout.tp, pp=1, pp_stage=0, ep=layout.ep, attention_tp=layout.attention_tp
    ).embeddings_bytes
    return d.lookahead_tokens * one


def loaded_weights_bytes(d: Deployment, ledger_bytes: int | None) -> int | None:
    """The weights on a rank as SGLang loads them: the ledger's plus
    :func:`draft_embedding_bytes`; None when the ledger's are unknown."""
    return None if ledger_bytes is None else ledger_bytes + draft_embedding_bytes(d)


def warnings(d: Deployment) -> list[str]:
    """A warning with the bytes of the MTP runners' own embeddings, which the plan's
    weights (but not its ``--mem-fraction-static``) leave out."""
    extra = draft_embedding_bytes(d)
    if not extra:
        return []
    where = (
        "the KV budget derived from the GPU's memory leaves them room: SGLang's pools get "
        "that much less than the KV budget shown"
        if d.gpu_rule.derived
        else "--mem-fraction-static covers them, so leave that much GPU memory free beyond "
        "--kv-budget"
    )
    return [
        f"SGLang's {d.lookahead_tokens} Step3p5MTP draft runners each load their own copy "
        "of the target's embed_tokens (Step3p5MTP.set_embed_and_head does not share it): "
        f"{format_bytes(extra)} ({extra:,} B) more weights per rank than the plan counts; "
        f"{where}"
    ]


def mtp_notes(d: Deployment, lay: Layout, swa_tokens: int) -> list[str]:
    """What the emitted command's MTP draft is, in SGLang's terms."""
    if not (is_step3p5(d) and d.spec.name == "mtp" and lay.draft_layers):
        return []
    rows = f"the sliding pool's {swa_tokens} tokens" if lay.draft_in_swa else "the full pool's"
    return [
        f"# --speculative-algorithm {MTP_ALGORITHM}: SGLang runs Step-3.5's MTP layers as "
        f"multi-layer EAGLE (_step3p_overrides), {lay.draft_layers} Step3p5MTP runners, "
        f"each one layer of its own pool over {rows}"
    ]


__all__ = [
    "CHECKED_VERSION",
    "MODEL_TYPE",
    "MTP_ALGORITHM",
    "check",
    "check_hicache",
    "draft_embedding_bytes",
    "is_step3p5",
    "loaded_weights_bytes",
    "mtp_layout",
    "mtp_notes",
    "sliding_pool",
    "spec_algorithm",
    "warnings",
]
