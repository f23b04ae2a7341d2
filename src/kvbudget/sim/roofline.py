"""Step time of one engine step on one rank, from a roofline of the GPU preset.

One step runs every decoding request's speculative step (the draft proposes ``K`` tokens
one at a time, the target verifies ``K + 1`` in one pass) and the prefill chunks
scheduled with them. Its time on one rank is::

    memory_s  = (W_t + K x W_d + KV_read) / hbm_bandwidth
    compute_s = (F_t x tokens_t + F_d x tokens_d + attention FLOPs) / peak_flops
    host_s    = host_bytes / host_link
    step_s    = max(memory_s, compute_s, host_s)

* ``W_t``, ``W_d``: weight bytes of the target (MTP layers included with ``spec mtp``,
  DSpark stages with ``spec dspark``) and the draft on the rank
  (:func:`kvbudget.weights.weights_bytes`), read once per
  target pass and once per draft pass;
* ``KV_read``: every decoding request reads its context's KV once per target pass and once
  per draft pass: ``context x (S_t + K x S_d)`` bytes, ``S`` the plan's bytes per token
  per rank; a prefill chunk reads and writes its prefix and its own tokens once;
* ``F = 2 x parameters / (tp x pp)`` FLOPs per token, MoE routed experts counted at
  ``num_experts_per_tok / experts`` of their parameters (the experts a token runs
  through); weights are read whole every step (at serving batch sizes nearly every
  expert is hit); ``tokens_t = decoding x (K + 1) + prefill tokens``,
  ``tokens_d = decoding x K + prefill tokens``; attention ``4 x heads x head_dim`` FLOPs
  per query and context token per attention layer (MLA: ``kv_lora_rank +
  qk_rope_head_dim`` for the head size; sliding windows not capped: an upper bound),
  over ``tp x pp`` ranks;
* ``host_bytes``: blocks offloaded to and onboarded from the host tier (every role's
  bytes of each block), over the host link of ``gpus.csv`` (per direction); copies run
  on the copy engines alongside compute, so the link is a third roof, not an addition
  (the replay applies it over windows of steps, see :mod:`kvbudget.sim.replay`).

Rates are the preset's peaks: ``hbm_bandwidth_tb_s`` and ``host_link_gb_s`` from
``data/gpus.csv`` (first value), BF16 dense tensor FLOPs from ``data/gpu_flops.csv``
(``data/GPU_FLOPS.md`` for sources). **Limits**: peaks are never reached (NVIDIA's own
aiconfigurator scales bandwidth by 0.8), so times are lower bounds and throughputs upper
bounds, good for comparing policies on one GPU, not for predicting one engine's
latency; kernel launch, scheduling and sampling overheads, tensor- and pipeline-parallel
communication, pipeline bubbles, quantized-weight FLOP rates and contention between
host copies and compute are not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvbudget.errors import InvalidArgumentError
from kvbudget.gpus import get_gpu
from kvbudget.layers import AttentionLayer, Layer, MLALayer
from kvbudget.model import ModelSpec, load_model
from kvbudget.plan_types import Plan
from kvbudget.spec_modes import SPEC_MODE_TABLE
from kvbudget.weights import count_params, weights_bytes


@dataclass(frozen=True, kw_only=True)
class GpuRates:
    """The peak rates of one GPU: bytes/s of device memory and of the host link (one
    direction), and dense BF16 tensor FLOP/s; where each came from."""

    name: str
    hbm_bytes_per_s: float
    host_link_bytes_per_s: float | None
    peak_flops_per_s: float | None
    source: str


def gpu_rates(gpu: str, *, peak_tflops: float | None = None) -> GpuRates:
    """The rates of the preset ``gpu`` (a ``kvbudget gpus`` name).

    ``peak_tflops`` overrides (or supplies) the FLOPs figure. Raises
    InvalidArgumentError for an unknown GPU or one without a bandwidth figure.
    """
    spec = get_gpu(gpu)
    bandwidth = spec.hbm_bandwidth_tb_s
    if bandwidth is None:
        raise InvalidArgumentError(
            f"GPU {spec.name!r} has no memory bandwidth in gpus.csv; simulate with another --gpu"
        )
    tflops = peak_tflops if peak_tflops is not None else spec.bf16_dense_tflops
    if peak_tflops is not None and not 0 < peak_tflops < math.inf:
        raise InvalidArgumentError(
            f"--peak-tflops must be a finite number > 0 (dense BF16 TFLOPS), got {peak_tflops!r}"
        )
    link = spec.host_link_gb_s
    return GpuRates(
        name=spec.name,
        hbm_bytes_per_s=bandwidth * 1e12,
        host_link_bytes_per_s=None if link is None else link * 1e9,
        peak_flops_per_s=None if tflops is None else tflops * 1e12,
        source=(
            f"gpus.csv hbm {bandwidth:g} TB/s, host link "
            f"{'n/a' if link is None else f'{link:g} GB/s'}; "
            + (
                f"--peak-tflops {peak_tflops:g}"
                if peak_tflops is not None
                else f"gpu_flops.csv bf16 dense {tflops:g} TFLOPS"
                if tflops is not None
                else "no FLOPs figure"
            )
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Roofline:
    """The per-rank constants of the step-time formula (module docstring).

    ``target_weights_bytes``/``draft_weights_bytes``: ``W_t``/``W_d``;
    ``target_kv_bytes_per_token``/``draft_kv_bytes_per_token``: ``S_t``/``S_d``;
    ``*_flops_per_token``: ``F``; ``*_attention_flops``: per query and context token.
    """

    rates: GpuRates
    draft_len: int
    target_weights_bytes: int
    draft_weights_bytes: int
    target_kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    target_flops_per_token: float
    draft_flops_per_token: float
    target_attention_flops: float
    draft_attention_flops: float

    def step_seconds(
        self,
        *,
        decoding: int,
        decode_context_tokens: int,
        prefill_tokens: int,
        prefill_attention_pairs: int,
        prefill_kv_tokens: int,
        host_bytes: int,
    ) -> float:
        """Seconds of one step on one rank.

        ``decoding`` requests in a speculative step over ``decode_context_tokens`` tokens
        of context in all; ``prefill_tokens`` prompt tokens computed, with
        ``prefill_attention_pairs`` (query, context) token pairs and
        ``prefill_kv_tokens`` tokens of KV read or written; ``host_bytes`` moved over the
        host link. Pure.
        """
        r = self.rates
        seconds = self.stepper()(
            decoding,
            decode_context_tokens,
            prefill_tokens,
            prefill_attention_pairs,
            prefill_kv_tokens,
        )
        host_s = 0.0
        if host_bytes:
            link = r.host_link_bytes_per_s
            if link is None:
                raise InvalidArgumentError(
                    f"{r.name} has no host-link bandwidth in gpus.csv, but the plan moves "
                    "blocks to the host tier; simulate with --host-budget 0 or another --gpu"
                )
            host_s = host_bytes / link
        return max(seconds, host_s)

    def decode_terms(self) -> tuple[int, int, float, float, float, float | None]:
        """``(W, S, B, f_d, f_c, P)``: the seconds of a step with ``d`` decoding requests
        over ``c`` context tokens and no prefill are ``max((W + c x S) / B, (f_d x d +
        f_c x c) / P)`` (``(W + c x S) / B`` when ``P`` is None), bit for bit what
        :meth:`stepper` returns for ``(d, c, 0, 0, 0)`` (its zero terms add exact zeros):
        for a loop that inlines the decode steps. Pure."""
        k = self.draft_len
        decode_kv = self.target_kv_bytes_per_token + k * self.draft_kv_bytes_per_token
        decode_weights = self.target_weights_bytes + k * self.draft_weights_bytes
        ft, fd = self.target_flops_per_token, self.draft_flops_per_token
        at, ad = self.target_attention_flops, self.draft_attention_flops
        return (
            decode_weights,
            decode_kv,
            self.rates.hbm_bytes_per_s,
            ft * (k + 1) + fd * k,
            at * (k + 1) + ad * k,
            self.rates.peak_flops_per_s,
        )

    def stepper(self) -> Callable[[int, int, int, int, int], float]:
        """:meth:`step_seconds` without host traffic, as a function of positional
        ``(decoding, decode_context_tokens, prefill_tokens, prefill_attention_pairs,
        prefill_kv_tokens)`` with this roofline's constants bound once (for the replay's
        hot loop). The one place the formula is written."""
        k = self.draft_len
        decode_kv = self.target_kv_bytes_per_token + k * self.draft_kv_bytes_per_token
        prefill_kv = self.target_kv_bytes_per_token + self.draft_kv_bytes_per_token
        target_weights = self.target_weights_bytes
        decode_weights = target_weights + k * self.draft_weights_bytes
        prefill_weights = target_weights + self.draft_weights_bytes  # the draft prefills too
        bandwidth = self.rates.hbm_bytes_per_s
        peak = self.rates.peak_flops_per_s
        ft, fd = self.target_flops_per_token, self.draft_flops_per_token
        at, ad = self.target_attention_flops, self.draft_attention_flops
        per_decoder = ft * (k + 1) + fd * k  # target verifies K + 1, the draft proposes K
        per_prefill_token = ft + fd
        per_context_token = at * (k + 1) + ad * k
        per_pair = at + ad

        def seconds(decoding: int, context: int, prefill: int, pairs: int, kv_tokens: int) -> float:
            if decoding:
                weights = decode_weights
            elif prefill:
                weights = prefill_weights
            else:
                weights = target_weights
            memory_s = (weights + context * decode_kv + kv_tokens * prefill_kv) / bandwidth
            if peak is None:
                return memory_s
            compute_s = (
                per_decoder * decoding
                + per_prefill_token * prefill
                + per_context_token * context
                + per_pair * pairs
            ) / peak
            return memory_s if memory_s > compute_s else compute_s

        return seconds


def roofline_for(plan: Plan, rates: GpuRates) -> Roofline:
    """The constants of ``plan`` (its models at its ``tp``/``pp``) on ``rates``.

    Raises ConfigError when a model's weights cannot be counted (an unknown family).
    """
    target = load_model(plan.target_source)
    # MTP layers, or DeepSeek-V4.1's DSpark stages (one parallel pass of K queries a
    # request, near the target's K + 1): counted with the target
    mtp = SPEC_MODE_TABLE[plan.spec].draft == "mtp"
    tw = weights_bytes(target, tp=plan.tp, pp=plan.pp, include_mtp=mtp).total_bytes
    params = count_params(target)
    active = _active(target, params.language_model, params.routed_experts)
    # MTP layers' experts are not counted apart: they run at the main layers' active share
    tparams = active + (params.mtp * active // params.language_model if mtp else 0)
    ranks = plan.tp * plan.pp
    draft_model: ModelSpec | None = None
    dw, dparams = 0, 0
    if plan.draft_source is not None:
        draft_model = load_model(plan.draft_source)
        dtp = plan.draft_tp or plan.tp
        dw = weights_bytes(draft_model, tp=dtp).total_bytes
        dcounts = count_params(draft_model)
        dparams = _active(draft_model, dcounts.total, dcounts.routed_experts) // dtp
    t = plan.manager("target")
    d = plan.manager("draft")
    return Roofline(
        rates=rates,
        draft_len=plan.capacity.lookahead_tokens,
        target_weights_bytes=tw,
        draft_weights_bytes=dw,
        target_kv_bytes_per_token=t.slope_bytes_per_token if t else 0,
        draft_kv_bytes_per_token=d.slope_bytes_per_token if d else 0,
        target_flops_per_token=2.0 * tparams / ranks,
        draft_flops_per_token=2.0 * dparams,
        target_attention_flops=_attention_flops(target, target.layers) / ranks,
        draft_attention_flops=(
            0.0
            if draft_model is None
            else _attention_flops(draft_model, draft_model.layers) / (plan.draft_tp or plan.tp)
        ),
    )


_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")
_EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


def _active(model: ModelSpec, params: int, routed: int) -> int:
    """Parameters a token runs through: ``params`` with the routed experts scaled by
    ``top_k / experts`` from the config (all of them when the config names neither)."""
    if not routed:
        return params
    top_k = next((model.config[k] for k in _TOP_K_KEYS if model.config.get(k)), None)
    experts = next((model.config[k] for k in _EXPERT_KEYS if model.config.get(k)), None)
    if not isinstance(top_k, int) or not isinstance(experts, int) or experts < top_k:
        return params
    return params - routed + routed * top_k // experts


def _attention_flops(model: ModelSpec, layers: tuple[Layer, ...]) -> float:
    """FLOPs per (query, context) token pair over ``layers`` (QK^T and AV, all heads)."""
    total = 0
    for layer in layers:
        if isinstance(layer, AttentionLayer):
            total += 4 * model.num_attention_heads * layer.head_dim
        elif isinstance(layer, MLALayer):
            total += 4 * model.num_attention_heads * (layer.kv_lora_rank + layer.qk_rope_head_dim)
    return float(total)
