"""GPU memory that is not KV cache, per rank: an estimate with a formula per part.

An engine sizes its KV cache from what is left of the GPU once these are paid; each part
can be given instead of estimated (``plan(activation_bytes=..., ...)``). Activations are
bf16/fp16 (2 bytes a value), logits fp32 (4 bytes). ``T`` is the prefill chunk
(``max_num_batched_tokens``), ``S = min(max_batch_size, T)`` the sequences sampled in
one step, ``H`` the hidden size, ``I`` the dense MLP width, ``V`` the vocabulary.

* ``activation_bytes``, the peak of one forward pass of ``T`` tokens plus the sampler
  (what vLLM's ``profile_run`` measures as "peak activation")::

      T x (4 H + (q + 2 kv heads) / tp x head_dim + 3 I / tp) x 2     dense MLP layers
      T x (4 H + ... + topk x (3 I_moe / tp + H)) x 2                  MoE layers (fused
                                                                       MoE caches)
      + S x V x 4                                                      fp32 logits

  (``4 H``: the residual, the normed input, the attention and MLP outputs; ``3 I``: the
  fused gate/up output and the activated product; the larger of the dense and MoE
  layers counts.)
* ``draft_activation_bytes``: an EAGLE3 head keeps the target's three hidden states of
  every token while it runs: ``T x 3 H x 2``. A draft model or MTP layers run after the
  target's activations are freed, and add nothing to the peak.
* ``cuda_graph_bytes``: the graph pool, ``graphs x layers x 256 KiB``, ``graphs`` being
  the batch sizes an engine captures (vLLM: 1, 2, 4, then every 8 to 256, then every 16,
  up to ``min(2 x max_batch_size, 512)``; 0 without CUDA graphs).
* ``runtime_bytes``: memory outside PyTorch's allocator (NCCL and all-reduce buffers,
  cuBLAS and attention workspaces): ``256 MiB x tp``.

The constants are fitted to engine start-up logs quoted in public issues (the
calibration table in the README and ``benchmarks/calibrate_memory.py``, with each
figure's source and error). Multimodal encoders are not counted (vLLM
profiles them too; Gemma-3 and Llama-3.2-Vision measured 10 and 37 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.model import ModelSpec

GIB = 1024**3
MIB = 1024**2
ACT_BYTES = 2  # bf16 / fp16 activations
LOGIT_BYTES = 4  # fp32 logits
GRAPH_BYTES_PER_LAYER = 256 * 1024  # one captured batch size, one decoder layer
RUNTIME_BYTES_PER_RANK = 256 * MIB  # NCCL, workspaces: x tp


@dataclass(frozen=True, kw_only=True)
class NonKvMemory:
    """The parts of a rank's GPU memory that are not weights or KV cache, in bytes.

    ``source`` says for each part whether it was estimated or given.
    """

    activation_bytes: int
    draft_activation_bytes: int
    cuda_graph_bytes: int
    runtime_bytes: int
    source: str = "estimate"

    @property
    def total_bytes(self) -> int:
        """All parts together."""
        return (
            self.activation_bytes
            + self.draft_activation_bytes
            + self.cuda_graph_bytes
            + self.runtime_bytes
        )


def _num(cfg: Any, *keys: str) -> int:
    """The first positive int among ``keys`` of a config mapping, else 0."""
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _per_token_bytes(model: ModelSpec, tp: int) -> int:
    """Peak activation bytes per token of one decoder layer of ``model`` on one rank."""
    cfg = model.config
    hidden = model.hidden_size
    heads = model.num_attention_heads
    kv_heads = _num(cfg, "num_key_value_heads") or heads
    head_dim = _num(cfg, "head_dim") or (hidden // heads if heads else 0)
    attention = -(-(heads + 2 * kv_heads) // tp) * head_dim
    dense = 3 * -(-_num(cfg, "intermediate_size") // tp)
    experts = _num(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    topk = _num(cfg, "num_experts_per_tok", "moe_topk")
    moe_width = _num(cfg, "moe_intermediate_size") or _num(cfg, "intermediate_size")
    moe = topk * (3 * -(-moe_width // tp) + hidden) if experts and topk else 0
    return (4 * hidden + attention + max(dense, moe)) * ACT_BYTES


def capture_sizes(max_batch_size: int) -> int:
    """How many batch sizes vLLM captures CUDA graphs for (see the module docstring)."""
    top = min(2 * max_batch_size, 512)
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += [s for s in range(8, 256, 8) if s <= top]
    sizes += [s for s in range(256, 513, 16) if s <= top]
    return len(sizes)


def estimate_non_kv(
    target: ModelSpec,
    draft: ModelSpec | None,
    *,
    eagle3: bool,
    tp: int,
    max_num_batched_tokens: int,
    max_batch_size: int,
    num_layers: int,
    cuda_graphs: bool = True,
) -> NonKvMemory:
    """The estimate of :class:`NonKvMemory` for one rank (formulas: module docstring).

    ``num_layers`` are the decoder layers on the rank (its PP stage). Pure.
    """
    tokens = max_num_batched_tokens
    sampled = min(max_batch_size, tokens)
    activation = tokens * _per_token_bytes(target, tp) + sampled * target.vocab_size * LOGIT_BYTES
    draft_activation = tokens * 3 * target.hidden_size * ACT_BYTES if eagle3 and draft else 0
    graphs = capture_sizes(max_batch_size) if cuda_graphs else 0
    return NonKvMemory(
        activation_bytes=activation,
        draft_activation_bytes=draft_activation,
        cuda_graph_bytes=graphs * num_layers * GRAPH_BYTES_PER_LAYER,
        runtime_bytes=RUNTIME_BYTES_PER_RANK * tp,
    )
