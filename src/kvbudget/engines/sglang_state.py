"""SGLang's Mamba / Gated DeltaNet state pool (``MambaPool``), as 0.5.23 sizes it.

Facts from the SGLang 0.5.23 wheel (``python/sglang/srt/``), each run by the fidelity
harness (``benchmarks/fidelity/sglang/sglang_fidelity.py``):

* **State per request** (``configs/mamba_utils.py`` ``Mamba2StateShape.create``,
  ``BaseLinearStateParams.mamba_cache_per_req``): per state layer a conv state of
  ``conv_dim / tp x (conv_kernel - 1)`` in bfloat16 (``SGLANG_MAMBA_CONV_DTYPE``'s
  default) and a temporal (SSM) state of ``heads / tp x head_dim x state_size`` in
  float32 unless the config names ``mamba_ssm_dtype`` (``mamba2_state_dtype``). Gated
  DeltaNet: ``conv_dim = 2 x k_heads x k_dim + v_heads x v_dim``, temporal ``v_heads x
  v_dim x k_dim``; Mamba2: ``conv_dim = heads x head_dim + 2 x n_groups x state_size``.
* **Slots** (``mem_cache/kv_cache_configurator.py`` ``_calculate_mamba_ratio``): a
  running request takes ``3 + get_mamba_tracking_slots(...)`` state slots
  (``mem_cache/allocation_sizing.py``): ``extra_buffer`` 5 with the overlap scheduler
  (4 without), ``extra_buffer_lazy`` 4, ``no_buffer`` 3, 1 with ``--disable-radix-cache``;
  ``resolve_max_num_reqs`` caps running requests at ``max_mamba_cache_size // slots``.
* **Explicit size** (``_handle_max_mamba_cache``, its ``max_mamba_cache_size is not
  None`` branch): ``--max-mamba-cache-size`` is divided by the attention-DP size; the
  pool has ``size + 1`` slots (one padding slot, ``MambaPool.__init__``), taken out of
  the profiled budget before the KV pool is sized.
* **Speculative buffers** (``MambaPool.__init__``, ``speculative_num_draft_tokens`` set):
  ``intermediate_ssm`` of ``(running + 1) x D`` temporal states and, per conv state, one
  shared window of ``D + conv_kernel - 2`` columns per slot (the deduplicated layout of
  ``conv_window_dedup_enabled`` for a linear chain on CUDA); ``_handle_max_mamba_cache``
  reserves ``mamba_cache_per_req x (running + 1) x D`` for them, more than is allocated
  (the reservation prices ``D x (conv_kernel - 1)`` conv columns).
* **Kimi Delta Attention** (Kimi-Linear, Kimi K3: ``configs/kimi_linear.py``
  ``KimiLinearConfig.mamba2_cache_params``, ``configs/mamba_utils.py``
  ``KimiLinearStateShape.create``): per KDA layer a conv state of ``(conv_kernel - 1) x
  3 x heads x head_dim / tp`` (q, k and v packed; ``divide(heads x head_dim, tp)``) in
  bfloat16 and a temporal state of ``heads / tp x head_dim x head_dim`` (``divide(heads,
  tp)``) in float32: ``KimiLinearCacheParams`` is built without a dtype, so its
  ``mamba2_state_dtype(None)`` never reads the config's ``mamba_ssm_dtype``. Its shape
  sets ``disable_conv_window_dedup`` (and ``conv_window_dedup_enabled`` is false for
  KDA), so the speculative conv buffer is dense: ``D x (conv_kernel - 1)`` columns per
  slot, what ``_handle_max_mamba_cache`` reserves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import GatedDeltaNetLayer, KimiDeltaLayer, Layer, Mamba2Layer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

STRATEGIES = ("extra_buffer", "extra_buffer_lazy", "no_buffer")
# what --mamba-radix-cache-strategy auto resolves to on Hopper with the overlap
# scheduler (arg_groups/overrides.py, supports_mamba_cache_extra_buffer); emitted
DEFAULT_STRATEGY = "extra_buffer"
CONV_BYTES = 2  # bfloat16: SGLANG_MAMBA_CONV_DTYPE's default
SSM_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
DEFAULT_SSM_DTYPE = "float32"


def slots_per_request(strategy: str, *, radix_cache: bool = True, overlap: bool = True) -> int:
    """State slots one running request takes (``_calculate_mamba_ratio``)."""
    if not radix_cache:
        return 1
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"unknown --mamba-radix-cache-strategy {strategy!r}; one of {', '.join(STRATEGIES)}"
        )
    base = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
    if strategy == "extra_buffer_lazy":
        return base + 1
    if strategy == "extra_buffer":
        return base + (2 if overlap else 1)
    return base


@dataclass(frozen=True, kw_only=True)
class StateLayout:
    """One rank's state layers as SGLang's ``MambaPool`` holds them.

    ``conv_dim``: conv channels per layer on this rank; ``ssm_elems``: temporal-state
    elements per layer; ``conv_kernel``: the conv's kernel width (``conv_kernel - 1``
    columns kept); ``ssm_bytes``: bytes per temporal element; ``dedup_conv_window``:
    the speculative conv buffer is one shared window per slot (``D + conv_kernel - 2``
    columns), else dense (``D x (conv_kernel - 1)``: KDA).
    """

    layers: int
    conv_dim: int
    ssm_elems: int
    conv_kernel: int
    ssm_bytes: int
    ssm_dtype: str
    dedup_conv_window: bool = True

    @property
    def per_request_bytes(self) -> int:
        """``mamba_cache_per_req``: conv + temporal state of every layer, one slot."""
        conv = self.conv_dim * (self.conv_kernel - 1) * CONV_BYTES
        return (conv + self.ssm_elems * self.ssm_bytes) * self.layers

    def slot_pool_bytes(self, slots: int) -> int:
        """Conv + temporal buffers of ``slots`` slots plus the padding slot."""
        return (slots + 1) * self.per_request_bytes

    def spec_reserved_bytes(self, running: int, draft_tokens: int) -> int:
        """What ``_handle_max_mamba_cache`` reserves for the speculative buffers."""
        return self.per_request_bytes * (running + 1) * draft_tokens

    def spec_pool_bytes(self, running: int, draft_tokens: int) -> int:
        """What ``MambaPool`` allocates for them: ``intermediate_ssm`` and the conv
        windows (shared, or dense: ``dedup_conv_window``), ``running + 1`` slots each."""
        ssm = draft_tokens * self.ssm_elems * self.ssm_bytes
        columns = (
            draft_tokens + self.conv_kernel - 2
            if self.dedup_conv_window
            else draft_tokens * (self.conv_kernel - 1)
        )
        conv = self.conv_dim * columns * CONV_BYTES
        return (running + 1) * self.layers * (ssm + conv)


def _divide(n: int, tp: int, what: str, name: str, where: str = "Mamba2StateShape") -> int:
    if n % tp:
        raise InvalidArgumentError(
            f"SGLang shards {name}'s {what} ({n}) evenly over the attention TP size {tp} "
            f"(configs/mamba_utils.py {where}.create); plan a --tp that divides it"
        )
    return n // tp


def _shape(layer: Layer, tp: int, name: str) -> tuple[int, int, int]:
    """(conv_dim, temporal elements, conv kernel) of one state layer on one rank."""
    if isinstance(layer, GatedDeltaNetLayer):
        hk = _divide(layer.num_k_heads, tp, "key heads", name)
        hv = _divide(layer.num_v_heads, tp, "value heads", name)
        conv = 2 * hk * layer.k_head_dim + hv * layer.v_head_dim
        return conv, hv * layer.v_head_dim * layer.k_head_dim, layer.conv_kernel
    if isinstance(layer, Mamba2Layer):
        h = _divide(layer.num_heads, tp, "heads", name)
        g = _divide(layer.n_groups, tp, "groups", name)
        conv = h * layer.head_dim + 2 * g * layer.ssm_state_size
        return conv, h * layer.head_dim * layer.ssm_state_size, layer.conv_kernel
    if isinstance(layer, KimiDeltaLayer):
        # KimiLinearStateShape.create: q, k and v convs of heads x head_dim each, the
        # recurrent state head_dim x head_dim per head (k heads and dims are v's)
        kda = "KimiLinearStateShape"
        proj = _divide(layer.num_heads * layer.head_dim, tp, "KDA projection", name, kda)
        h = _divide(layer.num_heads, tp, "KDA heads", name, kda)
        return 3 * proj, h * layer.head_dim * layer.head_dim, layer.conv_kernel
    raise InvalidArgumentError(
        f"--engine sglang does not model {layer.kind} state layers; plan {name} with "
        "--engine kvbudget or vllm"
    )


def state_layout(d: Deployment, layers: list[Layer]) -> StateLayout | None:
    """The state layers among ``layers`` (one rank's), None when there are none.

    SGLang's temporal dtype is the config's ``mamba_ssm_dtype`` or float32 (KDA: float32
    always); the conv state is bfloat16 (``mamba2_state_dtype``), whatever kvbudget's
    ``--state-dtype``.
    """
    tp = d.parallel.attention_tp
    name = d.target.name
    state = [x for x in layers if isinstance(x, (GatedDeltaNetLayer, Mamba2Layer, KimiDeltaLayer))]
    others = [x for x in layers if x.state_bytes(d.state_dtype_value, tp) and x not in state]
    if others:
        _shape(others[0], tp, name)  # raises for the unmodelled kind
    if not state:
        return None
    if d.state_dtype.strip().lower() != "auto":
        raise InvalidArgumentError(
            "--engine sglang keeps the SSM state in the config's mamba_ssm_dtype (else "
            "float32; KDA's always float32) and the conv state in bfloat16; plan with "
            "--state-dtype auto"
        )
    shapes = {_shape(x, tp, name) for x in state}
    if len(shapes) != 1:
        raise InvalidArgumentError(f"{name}'s state layers differ in shape; SGLang's pool is one")
    conv_dim, ssm_elems, kernel = shapes.pop()
    kda = isinstance(state[0], KimiDeltaLayer)
    # KimiLinearCacheParams' dtype is mamba2_state_dtype(None): no config field read
    ssm_dtype = DEFAULT_SSM_DTYPE if kda else (d.target.ssm_state_dtype or DEFAULT_SSM_DTYPE)
    ssm_dtype = ssm_dtype.lower()
    if ssm_dtype not in SSM_DTYPE_BYTES:
        raise InvalidArgumentError(f"SGLang has no mamba_ssm_dtype {ssm_dtype!r}")
    return StateLayout(
        layers=len(state),
        conv_dim=conv_dim,
        ssm_elems=ssm_elems,
        conv_kernel=kernel,
        ssm_bytes=SSM_DTYPE_BYTES[ssm_dtype],
        ssm_dtype=ssm_dtype,
        dedup_conv_window=not kda,
    )


__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "StateLayout",
    "slots_per_request",
    "state_layout",
]
