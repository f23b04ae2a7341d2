"""Rotary position embeddings (default and ``llama3`` scaling), as Llama applies them.

The inverse frequencies are computed in float32 and the cos/sin tables cast to the
activations' dtype, as ``transformers``' ``LlamaRotaryEmbedding`` does; the rotation is
``x * cos + rotate_half(x) * sin`` over the two halves of ``head_dim``.
"""

from __future__ import annotations

import math

import torch

from kvbudget.engine.config import DecoderConfig


def inverse_frequencies(config: DecoderConfig) -> torch.Tensor:
    """``[head_dim / 2]`` float32 inverse frequencies, llama3-rescaled when configured. Pure."""
    dim = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = config.rope_scaling
    if s is None:
        return inv
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def cos_sin(
    inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` tables ``[tokens, head_dim]`` for integer ``positions`` ``[tokens]``."""
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[tokens, heads, head_dim]`` by the tables of :func:`cos_sin`."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
