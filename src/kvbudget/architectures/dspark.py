"""DSpark stages: DeepSeek-V4.1's own drafter, as vLLM 0.33.0 runs it (``--spec dspark``).

A DeepSeek-V4.1 checkpoint ships its drafter under ``mtp.{0,1,2}.*``: DSpark stages, not
classic MTP layers (vLLM refuses ``method="mtp"`` for V4.1, config/speculative.py). vLLM
runs them as ``--speculative-config '{"method": "dspark", ...}'``: the draft config is the
target's (``model_type`` deepseek_v41, ``architectures`` rewritten to
``DSparkV41DraftModel``, config/speculative.py), built as ``DSparkDeepseekV4ForCausalLM``
(``models/deepseek_v41/nvidia/dspark.py``, the PyPI wheel) and run by the parallel
``DSparkSpeculator`` (``v1/worker/gpu/spec_decode/dspark/speculator.py``): one pass of
``num_speculative_tokens`` queries, no trailing-block drop
(``SpeculativeConfig.needs_eagle_block_drop``) and no extra query slots
(``max_num_new_slots_for_drafting``: 0).

Stages (``DSparkDeepseekV4Model.__init__``): ``n_mtp_layers``, else
``num_nextn_predict_layers``, else 3 ``DeepseekV4DecoderLayer`` blocks named
``layers.{num_hidden_layers + j}``. A config without ``dspark_target_layer_ids`` or
``dspark_markov_rank`` (both read unguarded there) has no DSpark drafter: no stages.

Cache, per stage (``models/deepseek_v41/attention.py`` ``DeepseekV4Attention.__init__``):
past ``num_hidden_layers`` a layer is never a KV or index source (``is_backbone``), so it
registers its 32-token window cache (``DeepseekV4SWACache``) alone, in the target's one
block pool (the speculator marks it ``is_draft``); a stage of ``compress_ratios[i] > 0``
reads the target's compressed cache of the last KV source (``_compressed_kv_cache``),
ratio 0 past the list. A :class:`~kvbudget.layers.SharedCompressedMLALayer` with
``kv_source`` False is exactly that.

Weights (``DSparkDeepseekV4ForCausalLM``; checkpoint names ``mtp.{j}.*``,
``_remap_dspark_name``): embedding and lm_head are the target's (``has_own_embed_tokens``
and ``has_own_lm_head`` False); ``main_proj`` (hidden x len(dspark_target_layer_ids) ->
hidden, replicated, through the quant config) and ``main_norm`` on stage 0; each stage a
V4.1 decoder layer without compressor or indexer, its MoE of ``dspark_n_routed_experts``
(else ``n_routed_experts``, nvidia/model.py ``DeepseekV4MoE``); on the last stage the
final ``norm``, the Markov head (``qwen3_dspark.py`` ``DSparkMarkovHead``: ``markov_w1``
an embedding of vocab_size x rank, ``markov_w2`` draft_vocab_size x rank, replicated and
unquantized; ``markov_w2`` a ``ParallelLMHead`` with ``disable_tp``, so its rows are padded
to 64 on every rank) and, unless ``enable_confidence_head`` is false, the confidence head
(``DSparkConfidenceHead``: ``proj``, 1 x (hidden + rank), fp32).
"""

from __future__ import annotations

from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import Inventory, ModelFields
from kvbudget.layers import Layer, SharedCompressedMLALayer

DEFAULT_STAGES = 3  # DSparkDeepseekV4Model: n_mtp_layers or num_nextn_predict_layers or 3
REQUIRED = ("dspark_target_layer_ids", "dspark_markov_rank")


def has_drafter(f: ConfigFields) -> bool:
    """Whether the config carries the fields vLLM's DSpark model reads unguarded."""
    return all(f.has(key) for key in REQUIRED)


def stage_count(f: ConfigFields) -> int:
    """``n_mtp_layers``, else ``num_nextn_predict_layers``, else 3 (a 0 falls through)."""
    for key in ("n_mtp_layers", "num_nextn_predict_layers"):
        count = f.int(key, 0, minimum=0) if f.get(key) is not None else 0
        if count:
            return count
    return DEFAULT_STAGES


def stage_layers(
    f: ConfigFields, start: int, *, head_dim: int, rope_head_dim: int, window: int
) -> tuple[Layer, ...]:
    """The stages' window-only layers, indexed from ``start`` (``num_hidden_layers``),
    with the target's attention geometry."""
    if not has_drafter(f):
        return ()
    ratios = f.get("compress_ratios") or []
    n = stage_count(f)
    out = []
    for j in range(n):
        i = start + j
        ratio = int(ratios[i]) if i < len(ratios) else 0
        if ratio and not (f.get("kv_source_layer_ids") and f.get("index_source_layer_ids")):
            # DeepseekV4Attention.__init__: "DeepSeek V4.1 requires kv_source_layer_ids /
            # index_source_layer_ids in the config for compressed layers"
            raise f.error(
                "kv_source_layer_ids",
                f"DSpark stage {j} (layer {i}) has compress ratio {ratio} but the model has "
                "no KV and index sources (vLLM needs kv_source_layer_ids and "
                "index_source_layer_ids for compressed layers); set its compress_ratios "
                "entry to 0",
            )
        out.append(
            SharedCompressedMLALayer(
                index=i,
                head_dim=head_dim,
                rope_head_dim=rope_head_dim,
                window=window,
                compress_ratio=ratio,
                kv_source=False,
                index_head_dim=0,
            )
        )
    return tuple(out)


def _target_layers(c: ModelFields) -> int:
    ids = c.get("dspark_target_layer_ids")
    if not isinstance(ids, list) or not ids or any(not isinstance(i, int) for i in ids):
        raise c.error("dspark_target_layer_ids", f"expected a list of layer indices, got {ids!r}")
    return len(ids)


def weights(inv: Inventory, c: ModelFields) -> None:
    """The DSpark stages' tensors (module docstring), added as MTP weights."""
    from kvbudget.architectures import deepseek_v41 as v41

    stages = [x for x in c.model.mtp_layers if isinstance(x, SharedCompressedMLALayer)]
    if not stages:
        return
    hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
    rank = c.int("dspark_markov_rank", minimum=1)
    draft_vocab = c.int("draft_vocab_size") if c.get("draft_vocab_size") else vocab
    experts = c.int("dspark_n_routed_experts") if c.get("dspark_n_routed_experts") else None
    draft = Inventory()
    first = draft.at("mtp.0", "mtp", "norms")
    first.linear("main_proj", hidden, hidden * _target_layers(c), shard="replicated")
    first.norm("main_norm", hidden)
    for j, x in enumerate(stages):
        v41.decoder_layer(draft.at(f"mtp.{j}", "mtp", "norms"), c, x, False, experts=experts)
    last = draft.at(f"mtp.{len(stages) - 1}", "mtp", "norms")
    last.norm("norm", hidden)
    last.tensor("markov_head.embed", vocab, rank)
    last.tensor("markov_head.head", draft_vocab, rank, shard="padded_vocab")
    if c.flag("enable_confidence_head", True):
        last.tensor("confidence_head.proj", 1, hidden + rank, fixed="fp32")
    inv.extend_as_mtp(draft)


__all__ = ["DEFAULT_STAGES", "has_drafter", "stage_count", "stage_layers", "weights"]
