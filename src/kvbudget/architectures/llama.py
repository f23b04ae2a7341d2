"""Llama and Mistral: softmax attention (MHA/GQA/MQA), optional sliding window.

Cache: one attention layer per decoder layer; a ``layer_types`` list where present, else
Mistral's rule: every layer slides when ``sliding_window`` is set unless
``use_sliding_window`` is false. Weights: ``model.layers.{i}`` with q/k/v/o (biases when
``attention_bias``), a SwiGLU MLP (``mlp_bias``), two RMSNorms; embeddings and lm_head
(``tie_word_embeddings``). vLLM ``model_executor/models/llama.py``.
"""

from __future__ import annotations

from functools import partial

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    attention_layers,
    decoder_weights,
    uniform_window,
)

STYLE = AttentionStyle()

LLAMA = Architecture(
    family="llama",
    model_types=frozenset({"llama", "mistral"}),
    layers=partial(attention_layers, sliding_default=uniform_window),
    weights=partial(decoder_weights, style=STYLE),
    attention=STYLE,
    draft_heads=True,
)

ARCHITECTURES = (LLAMA,)
