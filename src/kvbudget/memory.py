"""GPU memory that is not KV cache, per rank: an estimate with a formula per part.

An engine sizes its KV cache from what is left of the GPU once these are paid; each part
can be given instead of estimated (``plan(activation_bytes=..., ...)``). Activations are
bf16/fp16 (2 bytes a value), logits fp32 (4 bytes). ``T`` is the prefill chunk
(``max_num_batched_tokens``), ``S = min(max_batch_size, T)`` the sequences sampled in
one step, ``H`` the hidden size, ``I`` the dense MLP width, ``V`` the vocabulary.

* ``activation_bytes``, the peak of one forward pass of ``T`` tokens plus the sampler
  (what vLLM's ``profile_run`` measures as "peak activation", and for recurrent layers
  what it misses)::

      T x (4 H + (q + 2 kv heads) / tp x head_dim + 3 I / tp) x 2     dense MLP layers
      T x (4 H + ... + topk x (3 I_moe / tp + H)) x 2                  MoE layers (fused
                                                                       MoE caches)
      + S x V x 4                                                      fp32 logits

  (``4 H``: the residual, the normed input, the attention and MLP outputs; ``3 I``: the
  fused gate/up output and the activated product; the larger of the dense and MoE
  layers counts.) A model with recurrent layers adds the prefill scratch of one of them
  (:func:`recurrent_scratch_bytes`), for ``N = S`` prefill sequences in the chunk: the
  intermediates of vLLM's chunked scan, which its start-up profile does not run at the
  chunk's size (vllm#52872, vllm#54775), so a KV size pinned to that profile runs out::

      Gated DeltaNet (FLA chunk_gated_delta_rule, chunk 64; h = ceil(v heads / tp)):
        T x h x (4 + 2 x 64 + 2 k + 3 x 2 v)      g (fp32), A, w, u, v_new, o (bf16)
        + C x h x k x v x 2                          h, one state per chunk (bf16)
        + N x h x k x v x (s + 4)                    initial states gathered (SSM dtype,
                                                     s bytes), final states (fp32)
      Mamba2 (mamba_chunk_scan_combined, chunk L; h heads, g groups of one rank):
        2 x C x L x h x 4                            dA_cumsum, dt (fp32)
        + C x h x p x n x 2 + N x h x p x n x s      passed chunk states (bf16), initial
                                                     states gathered
        + max(C x h x p x n x 4,                     chunk states (fp32), or later
              C x g x L x L x 4 + N x h x p x n x s) C^T B (fp32) and the final states

  with ``C = ceil(T / chunk) + N - 1`` chunks (every sequence can end in a part chunk).
* ``draft_activation_bytes``: an EAGLE3 head keeps the target's three hidden states of
  every token while it runs: ``T x 3 H x 2``. A draft model or MTP layers run after the
  target's activations are freed, and add nothing to the peak.
* ``cuda_graph_bytes``: the graph pool, ``graphs x (layers x 256 KiB + recurrent layers x
  256 KiB)``, ``graphs`` being the batch sizes an engine captures (vLLM: 1, 2, 4, then
  every 8 to 256, then every 16, up to ``min(2 x max_batch_size, 512)``; 0 without CUDA
  graphs). The pool does not grow with ``max_num_batched_tokens``; vLLM's logged
  estimate does for hybrid models, a profiling transient it charges as graph memory
  (vllm#50780) that a pinned ``--kv-cache-memory-bytes`` never profiles.
* ``runtime_bytes``: memory outside PyTorch's allocator (NCCL and all-reduce buffers,
  cuBLAS and attention workspaces): ``256 MiB x tp``.

The constants are fitted to engine start-up logs quoted in public issues (the
calibration table in the README and ``benchmarks/calibrate_memory.py``, with each
figure's source and error). Multimodal encoders are not counted (vLLM
profiles them too; Gemma-3 and Llama-3.2-Vision measured 10 and 37 GiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvbudget.dtypes import DType, parse_dtype
from kvbudget.layers import GatedDeltaNetLayer, Layer, Mamba2Layer, per_rank
from kvbudget.model import ModelSpec

GIB = 1024**3
MIB = 1024**2
ACT_BYTES = 2  # bf16 / fp16 activations
LOGIT_BYTES = 4  # fp32 logits
GRAPH_BYTES_PER_LAYER = 256 * 1024  # one captured batch size, one decoder layer
# a Gated DeltaNet / Mamba2 layer's further share of one captured size: fitted to the
# graph estimates vLLM logs for Qwen3.6-27B (benchmarks/calibrate_memory.py, rows G*)
GRAPH_BYTES_PER_RECURRENT_LAYER = 256 * 1024
FLA_CHUNK = 64  # the chunk (BT) of vLLM's FLA gated-delta-rule kernels
MAMBA_CHUNK_DEFAULT = 256  # transformers' Mamba2Config chunk_size, for a config without one
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


def _gdn_scratch(layer: GatedDeltaNetLayer, tp: int, tokens: int, seqs: int, st: DType) -> int:
    """One Gated DeltaNet layer's chunked-scan live set (module docstring)."""
    h, k, v = per_rank(layer.num_v_heads, tp), layer.k_head_dim, layer.v_head_dim
    chunks = -(-tokens // FLA_CHUNK) + seqs - 1
    per_token = h * (4 + 2 * FLA_CHUNK + 2 * k + 3 * 2 * v)
    states = seqs * h * k * v
    return tokens * per_token + chunks * h * k * v * 2 + st.bytes_for(states) + states * 4


def _mamba2_scratch(
    layer: Mamba2Layer, tp: int, tokens: int, seqs: int, st: DType, chunk: int
) -> int:
    """One Mamba2 layer's chunked-scan live set (module docstring)."""
    h, g = per_rank(layer.num_heads, tp), per_rank(layer.n_groups, tp)
    state = h * layer.head_dim * layer.ssm_state_size
    chunks = -(-tokens // chunk) + seqs - 1
    gathered = st.bytes_for(seqs * state)
    common = 2 * chunks * chunk * h * 4 + chunks * state * 2 + gathered
    return common + max(chunks * state * 4, chunks * g * chunk * chunk * 4 + gathered)


def recurrent_scratch_bytes(
    model: ModelSpec,
    layers: Sequence[Layer],
    *,
    tp: int,
    tokens: int,
    seqs: int,
    state_dtype: DType | None = None,
) -> int:
    """The prefill scratch of the costliest recurrent layer among ``layers`` (one runs at
    a time): ``tokens`` in ``seqs`` prefill sequences on one of ``tp`` ranks, the SSM
    state in ``state_dtype`` (default: the model's SSM dtype, else its dtype); 0 without
    recurrent layers. Formulas: module docstring."""
    st = state_dtype or parse_dtype(model.ssm_state_dtype or model.dtype or "bf16")
    chunk = _num(model.config, "chunk_size", "mamba_chunk_size") or MAMBA_CHUNK_DEFAULT
    best = 0
    for layer in layers:
        if isinstance(layer, GatedDeltaNetLayer):
            best = max(best, _gdn_scratch(layer, tp, tokens, seqs, st))
        elif isinstance(layer, Mamba2Layer):
            best = max(best, _mamba2_scratch(layer, tp, tokens, seqs, st, chunk))
    return best


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
    layers: Sequence[Layer] | None = None,
    state_dtype: DType | None = None,
) -> NonKvMemory:
    """The estimate of :class:`NonKvMemory` for one rank (formulas: module docstring).

    ``num_layers`` are the decoder layers on the rank (its PP stage), ``layers`` those
    layers themselves (default: all of ``target``'s), which say how many are recurrent;
    ``state_dtype`` is the SSM state's (:func:`recurrent_scratch_bytes`). Pure.
    """
    tokens = max_num_batched_tokens
    sampled = min(max_batch_size, tokens)
    stage = target.layers if layers is None else layers
    scratch = recurrent_scratch_bytes(
        target, stage, tp=tp, tokens=tokens, seqs=sampled, state_dtype=state_dtype
    )
    activation = (
        tokens * _per_token_bytes(target, tp) + sampled * target.vocab_size * LOGIT_BYTES + scratch
    )
    draft_activation = tokens * 3 * target.hidden_size * ACT_BYTES if eagle3 and draft else 0
    graphs = capture_sizes(max_batch_size) if cuda_graphs else 0
    recurrent = sum(isinstance(x, GatedDeltaNetLayer | Mamba2Layer) for x in stage)
    per_graph = num_layers * GRAPH_BYTES_PER_LAYER + recurrent * GRAPH_BYTES_PER_RECURRENT_LAYER
    return NonKvMemory(
        activation_bytes=activation,
        draft_activation_bytes=draft_activation,
        cuda_graph_bytes=graphs * per_graph,
        runtime_bytes=RUNTIME_BYTES_PER_RANK * tp,
    )
