"""EAGLE3 draft heads: Llama-style decoder layers over the target's fused hidden states.

A head is marked by an ``Eagle3`` architecture name, ``draft_vocab_size`` or an
``eagle_config``; its cache layers are read as its family's (one attention layer per
decoder layer), its weights here, with its family's attention style.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvbudget.architectures.decoder import AttentionStyle, attention_weights, gated_mlp
from kvbudget.inventory import Inventory, ModelFields


def weights(inv: Inventory, c: ModelFields, style: AttentionStyle) -> None:
    """An EAGLE3 head (one decoder layer or more), everything on the last PP stage.

    The tensors the published heads ship (SafeAILab/EAGLE issue #265 lists them:
    ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``, ``t2d``): one Llama decoder
    layer whose q/k/v read ``2 x hidden`` (the token embedding concatenated with the
    fused hidden state) with an extra ``hidden_norm``, an ``fc`` of
    ``3 x target_hidden -> hidden``, a final norm, and an lm_head of
    ``draft_vocab_size`` rows. Plus the int64 ``draft_id_to_target_id`` map vLLM always
    allocates (``vllm/model_executor/models/llama_eagle3.py``); ``t2d`` is not loaded.

    Shared with the target, so not counted here: the embeddings (the heads ship none;
    vLLM's ``load_eagle_model`` "Share[s] target embeddings when the draft checkpoint
    does not include its own vocab embedding table", SGLang sets the target's), and the
    lm_head when ``draft_vocab_size`` is null or absent (SGLang then sets
    ``load_lm_head_from_target``; vLLM PR #28549 shows nvidia/gpt-oss-120b-Eagle3 taking
    lm_head and embed_tokens from the verifier).
    """
    hidden = c.int("hidden_size")
    count = c.int("num_hidden_layers", 1)
    for i in range(count):
        # vLLM builds num_hidden_layers decoder layers; the first reads 2 x hidden, the
        # others hidden, and each has a hidden_norm (llama_eagle3.py @00bd1493; a
        # one-layer head's ``midlayer.*`` is loaded as ``layers.0.*``)
        layer = inv.at("midlayer" if count == 1 else f"layers.{i}", "last", "norms")
        attention_weights(
            layer.sub("self_attn", "attention"),
            c,
            style,
            in_features=hidden * (2 if i == 0 else 1),
        )
        mlp = layer.sub("mlp", "dense_mlp")
        gated_mlp(mlp, hidden, c.int("intermediate_size"), bias=c.flag("mlp_bias", False))
        for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            layer.norm(norm, hidden)
    top = inv.at("", "last", "norms")
    eagle = c.cfg.get("eagle_config")
    if not isinstance(eagle, Mapping) or eagle.get("use_aux_hidden_state", True):
        fc_in = 3 * c.int("target_hidden_size", hidden)
        top.sub("", "eagle3_fc").linear("fc", hidden, fc_in, shard="replicated")
    top.norm("norm", hidden)
    head = top.sub("", "lm_head")
    if c.cfg.get("draft_vocab_size") is not None:
        rows = c.int("draft_vocab_size")
        head.vocab("lm_head", rows, hidden)
    else:
        rows = c.int("vocab_size")
    head.tensor("d2t", rows, fixed="int64", is_param=False)
