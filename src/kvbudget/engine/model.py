"""Llama-family decoder and EAGLE3 head (torch modules with Hugging Face tensor names).

:class:`Decoder`: RMSNorm, RoPE (default or llama3), grouped-query attention, SwiGLU MLP,
tied or untied embeddings, optional sliding-window layers; parameter names are those of
``transformers``' ``LlamaForCausalLM`` (``model.layers.0.self_attn.q_proj.weight`` ...), so
a Hugging Face safetensors checkpoint loads as is.

:class:`Eagle3Head`: one decoder layer whose attention reads ``[norm(embed(token)),
norm(feature)]`` (``2 x hidden`` wide), where the feature is ``fc`` of three target
hidden states concatenated (the target's residual stream entering layers
:func:`eagle3_aux_layers`) or, for tokens the head drafted itself, its own pre-norm
output; names follow the EAGLE3 checkpoints (``midlayer.*``, ``fc``, ``norm``,
``lm_head``, vLLM ``llama_eagle3.py``).

Every attention goes through :func:`kvbudget.engine.paged_attention.attend`; a pass
without cache tables (``caches=None``) is the dense reference used by the tests.
Modules hold weights only; the per-pass layout travels as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from kvbudget.engine.config import DecoderConfig
from kvbudget.engine.paged_attention import AttentionBatch, LayerCache, attend
from kvbudget.engine.rope import apply_rope, cos_sin, inverse_frequencies

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class RMSNorm(nn.Module):
    """``weight * x / rms(x)``, computed in float32 as ``LlamaRMSNorm``."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out: torch.Tensor = self.weight * h.to(dtype)
        return out


class Attention(nn.Module):
    """GQA self-attention with RoPE over the paged cache; input ``in_features`` wide."""

    def __init__(self, config: DecoderConfig, in_features: int) -> None:
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = nn.Linear(in_features, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(in_features, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(in_features, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: AttentionBatch,
        kind: int,
        cache: LayerCache | None,
    ) -> torch.Tensor:
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = attend(q, k, v, batch, kind, cache)
        result: torch.Tensor = self.o_proj(out.reshape(n, -1))
        return result


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config, config.hidden_size)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: AttentionBatch,
        kind: int,
        cache: LayerCache | None,
    ) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), rope, batch, kind, cache)
        out: torch.Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


class _Body(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Decoder(nn.Module):
    """A Llama-family causal LM; see the module docstring."""

    inv_freq: torch.Tensor

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = _Body(config)
        self.lm_head: nn.Linear | None = (
            None
            if config.tie_word_embeddings
            else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )
        self.register_buffer("inv_freq", inverse_frequencies(config), persistent=False)

    def forward(
        self,
        token_ids: torch.Tensor,
        batch: AttentionBatch,
        layer_kinds: Sequence[int],
        caches: Sequence[LayerCache] | None = None,
        capture: Sequence[int] = (),
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Final-normed hidden states ``[T, hidden]`` of ``token_ids`` ``[T]`` laid out
        as ``batch``, and the residual streams entering the layers in ``capture`` (in that
        order). Writes every layer's new K/V into ``caches`` when given."""
        x = self.model.embed_tokens(token_ids)
        rope = cos_sin(self.inv_freq, batch.positions, x.dtype)
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            if i in capture:
                captured[i] = x
            x = layer(x, rope, batch, layer_kinds[i], None if caches is None else caches[i])
        return self.model.norm(x), [captured[i] for i in capture]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, vocab]`` float32 logits of final-normed ``hidden`` ``[N, hidden]``."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return (hidden @ weight.T).float()


def eagle3_aux_layers(num_target_layers: int) -> tuple[int, int, int]:
    """The target layers whose incoming residual stream an EAGLE3 head fuses: ``(2, L // 2,
    L - 3)`` as vLLM's Llama ``get_eagle3_aux_hidden_state_layers``, clamped to the layers
    a tiny model has."""
    last = num_target_layers - 1
    picks = (2, num_target_layers // 2, num_target_layers - 3)
    a, b, c = (min(max(p, 0), last) for p in picks)
    return a, b, c


class Eagle3Layer(nn.Module):
    """The EAGLE3 head's decoder layer: attention over ``[norm(embeds), norm(feature)]``."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config, 2 * config.hidden_size)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Eagle3Head(nn.Module):
    """An EAGLE3 draft head; see the module docstring. Its vocabulary is the target's."""

    inv_freq: torch.Tensor

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h)
        self.fc = nn.Linear(3 * config.target_hidden_size, h, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.vocab_size, bias=False)
        self.register_buffer("inv_freq", inverse_frequencies(config), persistent=False)

    def fuse(self, target_hidden: Sequence[torch.Tensor]) -> torch.Tensor:
        """The feature of tokens the target computed: ``fc`` of its three streams."""
        out: torch.Tensor = self.fc(torch.cat(tuple(target_hidden), dim=-1))
        return out

    def forward(
        self,
        token_ids: torch.Tensor,
        features: torch.Tensor,
        batch: AttentionBatch,
        layer_kinds: Sequence[int],
        caches: Sequence[LayerCache] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(normed, prenorm)`` ``[T, hidden]`` for ``token_ids`` ``[T]`` at the
        positions of ``batch``, each with the ``features`` ``[T, hidden]`` of the position
        before its token; ``prenorm`` is the feature of the next drafted position."""
        layer = self.midlayer
        embeds = layer.input_layernorm(self.embed_tokens(token_ids))
        x = torch.cat((embeds, layer.hidden_norm(features)), dim=-1)
        rope = cos_sin(self.inv_freq, batch.positions, x.dtype)
        cache = None if caches is None else caches[0]
        h = features + layer.self_attn(x, rope, batch, layer_kinds[0], cache)
        prenorm = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(prenorm), prenorm

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[N, vocab]`` float32 logits of final-normed ``hidden``."""
        out: torch.Tensor = self.lm_head(hidden).float()
        return out
