"""TensorRT-LLM's V2 KV cache manager (``KVCacheManagerV2``, PyTorch backend) as its code
sizes it, speculation and several pool groups included: ``trtllm@v2``.

A separate engine version rather than a switch inside :mod:`kvbudget.engines.trtllm`:
the V2 manager is a different sizing path (a byte quota and pool groups of slots, not
``max_tokens`` and blocks per window), and one module per sizing path keeps each exact
against its own code. What both share (the block size, the internal max_seq_len, the
layer split over PP stages, the checks, the YAML) is imported from the V1 module; how the
V2 runtime turns quotas into slots is :mod:`kvbudget.engines.trtllm_v2_storage`.

Facts from ``NVIDIA/TensorRT-LLM`` @ 38198e34 (as transcribed in ``shared/trtllm-src``,
SOURCES.md): ``_torch/pyexecutor/_util.py`` (``KvCacheCreator.build_managers``,
``_split_kv_cache_budget_for_draft``, ``_compute_draft_budget_shares``,
``_bound_unsplit_v2_draft_by_tokens``, ``_get_draft_cache_cost``) and
``_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py`` (``KVCacheManagerV2.__init__``,
``get_cache_size_per_token``, ``get_cache_bytes_per_request``,
``_estimate_cache_size_components``, ``_get_generation_kv_capacity``,
``_extend_swa_windows_for_reuse``).

* **Quota**: ``kv_cache_config.max_gpu_total_bytes`` is the budget; a ``max_tokens``
  only caps a manager's quota (the plan emits none).
* **Managers**: a one-model draft (EAGLE3, MTP, draft-target) gets its own V2 manager,
  except under attention DP, where EAGLE3/MTP layers are the target's last layers. NGram
  is no one-engine mode: no draft manager, no extra KV tokens, ``1 + K`` tokens of
  generation headroom (its ``NGramDecodingConfig`` read, not transcribed).
  Layers split over PP stages as for V1 (:func:`kvbudget.engines.trtllm.pp_layers`); a
  stage without EAGLE3/MTP layers keeps one placeholder draft layer.
* **Windows**: each layer's window is the emitted ``max_attention_window`` pattern (full:
  the engine's max_seq_len); with block reuse an EAGLE3/MTP draft's one-token prompt
  lookahead widens every window by 1. A window costs a request ``ceil((w + h - 2) /
  block) + 1`` blocks, ``h`` the generation headroom: 1 without speculation, else the
  extra KV tokens + the tokens of a generation step (``2K`` for K draft tokens of a
  one-engine mode, ``1 + K`` for ngram).
* **Cost** (``get_cache_size_per_token``): per token the full-length layers' bytes; fixed
  ``max_batch_size`` requests' window blocks + ``max_num_tokens`` tokens of every
  window layer (a draft with one window rounds it up to whole slots / 0.95).
* **GPU split** (a separate draft): after both fixed costs, the rest goes by bytes per
  request where both managers report one (a target with windows: its full layers x the
  full length; a draft: all its layers), else by bytes per token; the draft's part is at
  most ``max_batch_size`` requests'. The draft gets its fixed cost + its part; the target
  the remainder. On a stage without EAGLE3/MTP layers the draft has no cost: nothing is
  split, and the draft is bounded to the target's tokens (``(budget - fixed) //
  bytes per token``) as ``max_tokens``. A budget under the fixed costs is refused, as
  TensorRT-LLM refuses it.
* **Host and disk split** (``_OFFLOAD_TIER_BUDGET_ATTRS``): ``host_cache_size`` and
  ``disk_cache_size`` likewise by bytes per token only, where both have a cost; else each
  manager gets them whole. The disk tier (``DiskCacheTierConfig``, 2 MiB grains) comes
  from ``--disk-budget`` with ``disk_cache_path`` set to :data:`DISK_PATH`, a directory
  the deployer creates (TensorRT-LLM refuses a missing one; the plan warns).
* **Ranks** (world size > 1): each manager turns ``int(quota x 0.95)`` into tokens, the
  ranks take the MIN, and each quota becomes ``min(quota, ceil(bytes(tokens) / 0.95))``.
* **Host tier**: ``host_cache_size`` 0 means none; unset, V2 builds one by itself
  (``_compute_auto_host_tier_quota``: min of the device quota, half the node's free
  memory per local rank, 80% of RLIMIT_MEMLOCK), which the plan never leaves to chance.
* **Hybrids** (``MambaHybridCacheManagerV2``, ``mamba_cache_manager.py``): per recurrent
  layer the SSM and conv states as one more life cycle, floored at the live states
  (``max_batch_size x pp`` + dummy slots) / 0.95; the creator prices those live states as
  the target's fixed cost. With MTP the draft manager is a hybrid manager holding the MTP
  attention layer only, and the target allocates the MTP intermediate state buffers
  (``max_batch_size x (1 + K)`` SSM and conv states per local recurrent layer) with torch,
  outside its pools and on top of ``max_gpu_total_bytes``: the plan emits the budget less
  them, and refuses a budget they exceed.

* **Gemma-4** (:mod:`kvbudget.engines.trtllm_gemma4`): every layer, KV-shared ones too,
  at its own head_dim and KV heads (``_create_kv_cache_manager``'s per-layer lists).

Not covered (typed refusals): EAGLE3, draft-target or ngram on a hybrid; for Gemma-4, what
its TensorRT-LLM model does not run (PP, one-model drafts).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.dtypes import parse_dtype
from kvbudget.engines import trtllm as v1
from kvbudget.engines import trtllm_gemma4 as g4
from kvbudget.engines import trtllm_v2_storage as st
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import (
    GIB,
    auto_note,
    cdiv,
    check_block,
    engine_capacity,
    kv_dtype_name,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import GatedDeltaNetLayer, Layer, Mamba2Layer, MLALayer
from kvbudget.plan_types import (
    Capacity,
    EnginePlan,
    EngineSource,
    PoolKind,
    PoolPlan,
    PoolRole,
)
from kvbudget.split import Tier
from kvbudget.units import count_of, format_bytes

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

VERSION = "v2"
REF = "38198e34582cf777ecc72062f477987284ba9999"
FILES = (
    "tensorrt_llm/_torch/pyexecutor/_util.py",
    "tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py",
    "tensorrt_llm/runtime/kv_cache_manager_v2/_storage_manager.py",
    "tensorrt_llm/runtime/kv_cache_manager_v2/_storage/_core.py",
    "tensorrt_llm/llmapi/llm_args.py",
)
MAX_UTIL_FOR_RESUME = 0.95  # KvCacheConfig.max_util_for_resume default (llm_args.py)
RESUME_F32 = 0.949999988079071  # float(np.float32(0.95)), the draft slot rounding's divisor
SPEC_MODES = ("eagle3", "mtp", "draft-target", "ngram")  # the modes the harness runs
gpu_granularity = st.gpu_granularity


def uncovered(d: Deployment) -> str | None:
    """What of ``d`` this V2 model does not cover, in a few words, or None."""
    try:
        check(d)
    except InvalidArgumentError:
        if d.spec.name not in ("none", *SPEC_MODES):
            return f"--spec {d.spec.name}"
        if hybrid(d):
            return f"recurrent-state layers with --spec {d.spec.name}"
        return "this model"
    return None


def check(d: Deployment) -> None:
    """InvalidArgumentError for what this V2 model does not cover."""
    v1.check(d)
    g4.check(d)
    if d.spec.name not in ("none", *SPEC_MODES):
        raise InvalidArgumentError(
            f"--engine trtllm@v2 models TensorRT-LLM's V2 manager with EAGLE3, MTP, "
            f"draft-target or ngram speculation; --spec {d.spec.name} is not modelled there "
            f"yet: plan it with --engine trtllm@v1 (the V1 manager)"
        )
    if hybrid(d):
        _check_hybrid(d)
    if v1.separate_draft(d):
        v1._draft_window(d)  # refuses drafts of several window sizes


def hybrid(d: Deployment) -> bool:
    """The target has recurrent-state layers (Mamba2, Gated DeltaNet): TensorRT-LLM runs
    it on ``MambaHybridCacheManagerV2``."""
    return any(isinstance(x, (Mamba2Layer, GatedDeltaNetLayer)) for x in d.target.layers)


def _check_hybrid(d: Deployment) -> None:
    """What of a hybrid this model does not cover: speculation other than MTP (EAGLE3 and
    draft-target heads of a hybrid are not modelled), a state dtype other than the
    checkpoint's (``kv_cache_config.mamba_ssm_cache_dtype``, not emitted)."""
    if d.spec.name not in ("none", "mtp"):
        raise InvalidArgumentError(
            f"--engine trtllm@v2 models MambaHybridCacheManagerV2 without speculation or "
            f"with MTP; --spec {d.spec.name} with {d.target.name}'s recurrent-state layers is "
            "not modelled: use --spec mtp or --spec none"
        )
    model = parse_dtype("auto", auto=d.target.dtype or "bf16", what="state_dtype")
    if d.state_dtype_value != model:
        raise InvalidArgumentError(
            f"TensorRT-LLM keeps {d.target.name}'s SSM and conv states in the checkpoint's "
            f"{model.name} (mamba_ssm_cache_dtype auto; the config's mamba_ssm_dtype is a "
            f"compute dtype); --state-dtype {d.state_dtype} is not modelled for --engine "
            "trtllm@v2: leave it auto"
        )


def dummy_slots(d: Deployment) -> int:
    """``_num_reserved_dummy_slots``: one CUDA-graph padding slot (no speculation), one
    more under attention DP."""
    return 1 + int(d.parallel.dp_attention)


def live_states(d: Deployment) -> int:
    """State slots a hybrid manager must hold: ``max_batch_size x pp`` resident
    sequences and the dummy slots."""
    return d.max_batch_size * d.parallel.pp + dummy_slots(d)


def intermediate_state_bytes(d: Deployment, m: Manager) -> int:
    """The MTP intermediate state buffers a hybrid manager allocates with torch, outside
    its V2 pools (``MambaHybridCacheManager._setup_mtp_intermediate_states``,
    ``mamba_cache_manager.py``, shapes as recorded in shared/trtllm-src): per local
    recurrent layer ``max_batch_size x tokens_per_gen_step`` (``1 + K``) SSM and conv
    states. The SSM rows are left out under the replay state update: Mamba2 layers take
    it on SM 9.0 (``_create_kv_cache_manager``'s Nemotron branch: spec and SM >= 80),
    Gated DeltaNet layers only with ``TRTLLM_GDN_REPLAY=1`` (``is_gdn_replay_enabled``,
    off by default), so theirs are kept. 0 without speculation or recurrent layers."""
    if d.spec.name == "none" or not m.state_bytes:
        return 0
    steps = d.max_batch_size * (1 + d.lookahead_tokens)
    per_step = sum(
        conv if isinstance(x, Mamba2Layer) else ssm + conv
        for (x, _), (ssm, conv) in zip(m.layers, m.states, strict=True)
    )
    return steps * per_step


def intermediate_reserve(d: Deployment) -> list[int]:
    """Per PP stage the MTP intermediate state bytes of its managers, which kvbudget
    takes from the stage's KV budget before emitting ``max_gpu_total_bytes``: with that
    key set, TensorRT-LLM's quota is ``min(profiled memory, max_gpu_total_bytes)``
    (``configure_kv_cache_capacity``), and the buffers, torch tensors made when the
    manager is built, come on top of it."""
    return [
        sum(intermediate_state_bytes(d, m) for m in stage_managers(d, s))
        for s in range(d.parallel.pp)
    ]


def _states(d: Deployment, layer: Layer) -> tuple[int, int]:
    """(SSM, conv) state bytes of one recurrent layer on one rank, as
    MambaHybridCacheManagerV2 sizes them: ``nheads / tp x head_dim x d_state`` and
    ``conv_dim / tp x (d_conv - 1)``, both in the checkpoint's dtype, no draft rows."""
    dtype, tp = d.state_dtype_value, d.parallel.attention_tp
    if isinstance(layer, GatedDeltaNetLayer):
        hv, hk = -(-layer.num_v_heads // tp), -(-layer.num_k_heads // tp)
        ssm = hv * layer.v_head_dim * layer.k_head_dim
        conv = (hv * layer.v_head_dim + 2 * hk * layer.k_head_dim) * (layer.conv_kernel - 1)
    elif isinstance(layer, Mamba2Layer):
        h, g = -(-layer.num_heads // tp), -(-layer.n_groups // tp)
        ssm = h * layer.head_dim * layer.ssm_state_size
        conv = (h * layer.head_dim + 2 * g * layer.ssm_state_size) * (layer.conv_kernel - 1)
    else:
        return 0, 0
    return dtype.bytes_for(ssm), dtype.bytes_for(conv)


# ---------------------------------------------------------------- the managers' layers


def headroom(d: Deployment) -> int:
    """``_get_generation_kv_capacity``'s headroom over the history: 1 without
    speculation, else the extra KV tokens (``get_num_extra_kv_tokens``: K - 1 for a
    one-engine mode, 0 for ngram) + a generation step's ``tokens_per_gen_step`` 1 + K."""
    k = d.lookahead_tokens
    if d.spec.name == "none" or not k:
        return 1
    extra = k - 1 if d.spec.name in v1.ONE_ENGINE else 0
    return extra + 1 + k


def backoff(d: Deployment) -> int:
    """``draft_prompt_lookahead``: with block reuse, EAGLE3/MTP widen windows by 1."""
    return 1 if d.enable_prefix_caching and d.spec.name in ("eagle3", "mtp") else 0


def _norm(d: Deployment, w: int | None) -> int | None:
    """A window as V2 holds it: clamped to the engine's max_seq_len (None there), then
    widened by the reuse backoff (None when that reaches the max_seq_len)."""
    seq = v1.engine_max_seq_len(d)
    if w is None or min(w, seq) == seq:
        return None
    w = min(w, seq) + backoff(d)
    return None if w >= seq else w


def _pattern_window(d: Deployment, index: int) -> int | None:
    pattern = v1.attention_windows(d)
    return None if pattern is None else pattern[index % len(pattern)]


@dataclass(frozen=True, kw_only=True)
class Manager:
    """One V2 manager of one PP stage: per layer its bytes per token and window, the
    creator's cost layers (``static``: layer size and window; None when the creator
    prices none), whether it is a one-layer placeholder."""

    role: str
    layers: tuple[tuple[Layer, int | None], ...]
    sizes: tuple[int, ...]
    windows: tuple[int | None, ...]
    static: tuple[tuple[int, int | None], ...] | None
    placeholder: bool = False
    states: tuple[tuple[int, int], ...] = ()  # per layer (SSM, conv) bytes; (0, 0): none

    @property
    def bytes_per_token(self) -> int:
        return sum(self.sizes)

    @property
    def state_bytes(self) -> int:
        """One state slot: every recurrent layer's SSM and conv state."""
        return sum(a + b for a, b in self.states)


def _manager(
    d: Deployment, role: str, layers: list[tuple[Layer, int | None]],
    static: tuple[tuple[int, int | None], ...] | None, placeholder: bool = False,
) -> Manager:  # fmt: skip
    dtype, tp = d.kv_dtype_value, d.parallel.attention_tp
    kept = [(x, w) for x, w in layers if x.bytes_per_token(dtype, tp) or any(_states(d, x))]
    return Manager(
        role=role,
        layers=tuple(kept),
        sizes=tuple(x.bytes_per_token(dtype, tp) for x, _ in kept),
        windows=tuple(_norm(d, w) for _, w in kept),
        static=static,
        placeholder=placeholder,
        states=tuple(_states(d, x) for x, _ in kept),
    )


def stage_managers(d: Deployment, stage: int) -> tuple[Manager, ...]:
    """The V2 managers of PP stage ``stage``: the target's and, with a separate draft,
    the draft's."""
    pp, last, n = d.parallel.pp, stage == d.parallel.pp - 1, len(d.target.layers)
    own = [(d.target.layers[i], _pattern_window(d, i)) for i in v1.pp_layers(n, pp, stage)]
    static = _target_static(d, stage)
    spec = v1._spec_layers(d)
    if not v1.separate_draft(d):
        if last and d.spec.name in ("eagle3", "mtp"):  # attention DP: joined at the end
            own += [(v1._joined(d, x), _pattern_window(d, n + j)) for j, x in enumerate(spec)]
        return (_manager(d, "target", own, static),)
    return (_manager(d, "target", own, static), _draft(d, stage, spec))


def _target_static(d: Deployment, stage: int) -> tuple[tuple[int, int | None], ...]:
    """The creator's cost layers of the target on ``stage``
    (``_get_static_cache_size_layer_components``): the config's layer size, the
    pattern's window, None for a ``layer_types`` full-attention layer."""
    n, types = len(d.target.layers), d.target.config.get("layer_types")
    out = []
    for i in v1.pp_layers(n, d.parallel.pp, stage):
        layer = d.target.layers[i]
        if not layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp):
            continue
        w = _norm(d, _pattern_window(d, i))
        if isinstance(types, list) and types and types[i % len(types)] == "full_attention":
            w = None
        price = g4.static_price(d) if g4.is_gemma4(d) else v1._price(layer, d)
        out.append((price, w))
    return tuple(out)


def _draft(d: Deployment, stage: int, spec: tuple[Layer, ...]) -> Manager:
    """The draft manager of ``stage``: a draft model's share of its layers (priced on
    every stage); EAGLE3/MTP layers on the last stage (priced there only), a placeholder
    of one layer elsewhere."""
    pp, n = d.parallel.pp, len(d.target.layers)
    window = v1._draft_window(d)
    if d.spec.name == "draft-target":
        mine = [spec[i] for i in v1.pp_layers(len(spec), pp, stage)]
        priced = tuple((v1._price(x, d), _norm(d, window)) for x in mine)
        return _manager(d, "draft", [(x, window) for x in mine], priced)
    mine = [spec[i - n] for i in v1.pp_layers(n + len(spec), pp, stage) if i >= n]
    if not mine:
        return _manager(d, "draft", [(spec[0], window)], None, placeholder=True)
    types = (d.draft or d.target).config.get("layer_types")
    static: list[tuple[int, int | None]] = []
    for j, x in enumerate(spec):
        w = _norm(d, window)
        if isinstance(types, list) and types and types[j % len(types)] == "full_attention":
            w = None
        static.append((v1._price(x, d), w))
    return _manager(d, "draft", [(x, window) for x in mine], tuple(static))


# ---------------------------------------------------------------- costs


@dataclass(frozen=True, kw_only=True)
class Components:
    """``_estimate_cache_size_components``: context and generation bytes per token and
    the windows' bytes per request."""

    context: int
    generation: int
    per_request: int


def components(
    d: Deployment, sizes: tuple[int, ...], windows: tuple[int | None, ...]
) -> Components:
    tpb, h = v1.block_tokens(d), headroom(d)
    full = sum(b for b, w in zip(sizes, windows, strict=True) if w is None)
    swa = sum(b for b, w in zip(sizes, windows, strict=True) if w is not None)
    per_request = sum(
        (math.ceil((w + h - 2) / tpb) + 1) * tpb * b
        for b, w in zip(sizes, windows, strict=True)
        if w is not None
    )
    return Components(context=full + swa, generation=full, per_request=per_request)


def _tokens_from_quota(d: Deployment, c: Components, quota: int) -> float:
    """``_get_max_tokens_from_quota`` (its float arithmetic)."""
    mnt, per_batch = d.max_num_batched_tokens, d.max_batch_size * c.per_request
    if quota < per_batch:
        return 0
    context_limit = mnt * c.context + per_batch
    if quota <= context_limit:
        return math.inf if c.context <= 0 else (quota - per_batch) / c.context
    if c.generation <= 0:
        return math.inf
    return mnt + (quota - context_limit) / c.generation


def _quota_from_tokens(d: Deployment, c: Components, tokens: float) -> int:
    """``_get_quota_from_max_tokens``."""
    context = min(tokens, d.max_num_batched_tokens)
    return int(
        context * c.context + (tokens - context) * c.generation + d.max_batch_size * c.per_request
    )


@dataclass(frozen=True, kw_only=True)
class Cost:
    """The creator's cost of a manager: bytes per token, fixed bytes, and the bytes one
    request of the full length spends beyond the fixed ones (None: not reported)."""

    slope: int
    intercept: int
    per_request: int | None


def cost(d: Deployment, m: Manager) -> Cost | None:
    """``get_cache_size_per_token`` and ``get_cache_bytes_per_request`` of ``m``."""
    if m.static is None:
        return None
    sizes = tuple(s for s, _ in m.static)
    windows = tuple(w for _, w in m.static)
    c = components(d, sizes, windows)
    fixed = c.per_request * d.max_batch_size + (c.context - c.generation) * d.max_num_batched_tokens
    tpb, draft = v1.block_tokens(d), m.role == "draft"
    if draft and fixed > 0 and len(set(windows)) == 1 and windows[0] is not None:
        slot = sum(sizes) * tpb  # one SWA pool: whole slots, / max_util_for_resume
        fixed = math.ceil(math.ceil(fixed / slot) / RESUME_F32) * slot
    # a hybrid's live state slots (_estimate_mamba_hybrid_cache_cost: max_batch_size x pp
    # sequences + the dummy slots; no snapshot rules or interval: none is emitted)
    fixed += live_states(d) * m.state_bytes
    return Cost(slope=c.generation, intercept=fixed, per_request=_per_request(d, m, draft))


def _per_request(d: Deployment, m: Manager, draft: bool) -> int | None:
    """``get_cache_bytes_per_request``: a draft mirrors a request at its full length; a
    target spends its full-length layers' blocks (None when it has no window)."""
    assert m.static is not None
    tpb, h, seq = v1.block_tokens(d), headroom(d), v1.engine_max_seq_len(d)
    full = math.ceil((seq + h) / tpb) * tpb

    def held(w: int | None) -> int:
        if w is None or w >= seq:
            return full
        return min((math.ceil((w + h - 2) / tpb) + 1) * tpb, full)

    if not draft and all(w is None for _, w in m.static):
        return None
    out = 0
    for size, w in m.static:
        covered = held(w) if w is not None else 0
        out += size * max((full if draft else held(w)) - covered, 0)
    return out


# ---------------------------------------------------------------- budgets


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What one manager is handed: ``max_gpu_total_bytes``, ``host_cache_size``,
    ``disk_cache_size`` and a ``max_tokens`` bound (None: none)."""

    gpu: int
    host: int
    disk: int = 0
    max_tokens: int | None = None


def budgets(
    d: Deployment, mgrs: tuple[Manager, ...], gpu: int, host: int, disk: int = 0
) -> list[Budget]:
    """The budgets of a stage's managers (``build_managers``' splits: the GPU one after
    the fixed costs; ``_OFFLOAD_TIER_BUDGET_ATTRS``, host then disk, by bytes per token)."""
    if len(mgrs) == 1:
        return [Budget(gpu=gpu, host=host, disk=disk)]
    t, dr = cost(d, mgrs[0]), cost(d, mgrs[1])
    assert t is not None
    if dr is None or any(c.slope < 0 or c.intercept < 0 or not (c.slope or c.intercept)
                         for c in (t, dr)):  # fmt: skip
        tokens = max((gpu - t.intercept) // t.slope, 0) if t.slope > 0 else 0
        return [
            Budget(gpu=gpu, host=host, disk=disk),
            Budget(gpu=gpu, host=host, disk=disk, max_tokens=tokens or None),
        ]
    draft_gpu = _draft_share(d, gpu, t, dr)
    draft_host = host * dr.slope // (t.slope + dr.slope) if host > 0 else 0
    draft_disk = disk * dr.slope // (t.slope + dr.slope) if disk > 0 else 0
    return [
        Budget(gpu=gpu - draft_gpu, host=host - draft_host, disk=disk - draft_disk),
        Budget(gpu=draft_gpu, host=draft_host if host > 0 else host, disk=draft_disk),
    ]


def _draft_share(d: Deployment, gpu: int, t: Cost, dr: Cost) -> int:
    """``_compute_draft_budget_shares``' draft budget; InfeasibleBudgetError where the
    budget does not cover the fixed costs (TensorRT-LLM raises at start-up)."""
    fixed = t.intercept + dr.intercept
    rest = gpu - fixed
    if rest < 0 or (rest == 0 and t.slope + dr.slope > 0):
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's V2 managers refuse to start: the KV cache GPU budget ({gpu} B "
            f"per rank) is insufficient after the combined fixed cost ({fixed} B, windows x "
            f"max_batch_size {d.max_batch_size}) for target+draft: raise --kv-budget or "
            "lower --max-batch-size"
        )
    weighted = t.per_request is not None and dr.per_request is not None
    weighted = weighted and (t.per_request or 0) + (dr.per_request or 0) > 0
    wt, wd = (t.per_request or 0, dr.per_request or 0) if weighted else (t.slope, dr.slope)
    share = rest * wd // (wt + wd) if wt + wd > 0 else 0
    if weighted and d.max_batch_size > 0:
        share = min(share, d.max_batch_size * (dr.per_request or 0))
    return dr.intercept + share


# ---------------------------------------------------------------- quotas and pools


@dataclass(frozen=True, kw_only=True)
class ManagerPools:
    """One manager of one stage: what it was handed, its device quota after the ranks'
    sync, and its pool groups per tier."""

    manager: Manager
    budget: Budget
    quota: int
    storage: st.Storage


def quota_for_tokens(d: Deployment, m: Manager, tokens: float) -> int:
    """``_get_quota_from_max_tokens``; a hybrid manager adds its live state slots."""
    attention = _quota_from_tokens(d, components(d, m.sizes, m.windows), tokens)
    return attention + (live_states(d) * m.state_bytes if m.state_bytes else 0)


def tokens_for_quota(d: Deployment, m: Manager, quota: int) -> float:
    """``_get_max_tokens_from_quota``: the float formula; a hybrid manager's is the
    largest whole count whose quota fits (``MambaHybridCacheManagerV2``'s search; a
    hybrid model's MTP draft manager is one too, with no recurrent layer)."""
    if not hybrid(d):
        return _tokens_from_quota(d, components(d, m.sizes, m.windows), quota)
    if quota_for_tokens(d, m, 0) > quota:
        return 0
    low, high = 0, 1
    while quota_for_tokens(d, m, high) <= quota:
        low, high = high, high * 2
        if high >= 1 << 62:
            return math.inf
    while low + 1 < high:
        mid = (low + high) // 2
        low, high = (mid, high) if quota_for_tokens(d, m, mid) <= quota else (low, mid)
    return low


def _own_quota(d: Deployment, m: Manager, b: Budget) -> int:
    """The quota before the ranks' sync: the GPU budget, capped by ``max_tokens``."""
    if b.max_tokens is None:
        return b.gpu
    return min(b.gpu, math.ceil(quota_for_tokens(d, m, b.max_tokens) / MAX_UTIL_FOR_RESUME))


def allocate(d: Deployment, gpu: int, host: int, disk: int = 0) -> list[list[ManagerPools]]:
    """Every stage's managers' pools for the emitted ``max_gpu_total_bytes``,
    ``host_cache_size`` and ``disk_cache_size``, the ranks' MIN of resumable tokens per
    manager applied."""
    stages = [stage_managers(d, s) for s in range(d.parallel.pp)]
    handed = [budgets(d, mgrs, gpu, host, disk) for mgrs in stages]
    quotas = [
        [_own_quota(d, m, b) for m, b in zip(mgrs, bs, strict=True)]
        for mgrs, bs in zip(stages, handed, strict=True)
    ]
    if d.parallel.tp * d.parallel.pp > 1:
        quotas = _synced(d, stages, quotas)
    tpb = v1.block_tokens(d)
    out = []
    for mgrs, bs, qs in zip(stages, handed, quotas, strict=True):
        row = []
        for m, b, q in zip(mgrs, bs, qs, strict=True):
            _check_live(d, m, q)
            layers = [
                st.Layer(buffer_bytes=state, window=None, ssm=True)
                if any(state)
                else st.Layer(buffer_bytes=_buffers(x, size, tpb), window=w)
                for (x, _), size, w, state in zip(
                    m.layers, m.sizes, m.windows, m.states, strict=True
                )
            ]
            try:
                pools = st.storage(
                    layers, tpb, gpu_quota=q, host_quota=b.host, disk_quota=b.disk,
                    **_typical(d, m),
                )  # fmt: skip
            except ValueError as exc:
                raise InfeasibleBudgetError(
                    f"TensorRT-LLM's V2 {m.role} manager gets a {q} B quota per rank, less "
                    f"than its pool groups' floors ({exc}): raise --kv-budget"
                ) from None
            row.append(ManagerPools(manager=m, budget=b, quota=q, storage=pools))
        out.append(row)
    return out


def _typical(d: Deployment, m: Manager) -> dict[str, Any]:
    """A hybrid manager's initial-ratio batch and state floor (``_build_cache_config``:
    no avg_seq_len, so ``max_seq_len // 2`` tokens per request, ``max_batch_size x pp``
    requests and the dummy slots; the SSM floor is the live states)."""
    if not m.state_bytes:
        return {}
    capacity = max(1, v1.engine_max_seq_len(d) // 2)
    batch = st.Batch(
        requests=d.max_batch_size * d.parallel.pp,
        capacity=capacity,
        history=max(0, capacity - 1),
        idle=dummy_slots(d),
    )
    return {"batch": batch, "ssm_floor": live_states(d)}


def _check_live(d: Deployment, m: Manager, quota: int) -> None:
    """``_minimum_live_gpu_quota``: a hybrid manager refuses a quota under its live
    states and one attention page (or its quota for no token)."""
    if not hybrid(d):
        return
    need = max(
        quota_for_tokens(d, m, 0),
        live_states(d) * m.state_bytes + m.bytes_per_token * v1.block_tokens(d),
    )
    if need > quota:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM refuses to start: the V2 Mamba GPU cache quota is too small for "
            f"live recurrent states and attention pages: got {quota} bytes, need at least "
            f"{need} bytes ({live_states(d)} state slots of {m.state_bytes} B: max_batch_size "
            f"{d.max_batch_size} x pp {d.parallel.pp} + {dummy_slots(d)} dummy): raise "
            "--kv-budget or lower --max-batch-size"
        )


def _buffers(layer: Layer, per_token: int, tpb: int) -> tuple[int, ...]:
    """A layer's buffers per block: the MLA latent alone, else K and V."""
    if isinstance(layer, MLALayer):
        return (per_token * tpb,)
    return (per_token // 2 * tpb, per_token // 2 * tpb)


def _synced(
    d: Deployment, stages: list[tuple[Manager, ...]], quotas: list[list[int]]
) -> list[list[int]]:
    """Each manager's quota after the ranks' MIN of its resumable tokens (the i-th
    manager of every stage syncs with the i-th of the others)."""
    out = [list(q) for q in quotas]
    for i in range(len(stages[0])):
        mgrs = [row[i] for row in stages]
        tokens = min(
            tokens_for_quota(d, m, int(q[i] * MAX_UTIL_FOR_RESUME))
            for m, q in zip(mgrs, quotas, strict=True)
        )
        if math.isinf(tokens):
            continue
        for s, m in enumerate(mgrs):
            synced = math.ceil(quota_for_tokens(d, m, tokens) / MAX_UTIL_FOR_RESUME)
            out[s][i] = min(out[s][i], synced)
    return out


def synced_quotas(d: Deployment, quota: int) -> list[int]:
    """Each PP stage's target device quota after the ranks' sync (no host tier)."""
    return [row[0].quota for row in allocate(d, quota, 0)]


def slots(pool_quota: int, granularity: int, slot_bytes: int) -> tuple[int, int]:
    """(slots, pool bytes) of a one-pool level (``ratio_to_slot_count_list`` with one
    pool group): as many whole slots as the quota rounded up to the granularity holds;
    the pool is their bytes rounded up to it."""
    (n,) = st.slot_counts(pool_quota, [[slot_bytes]], [1.0], granularity, [0])
    return n, st.round_up(n * slot_bytes, granularity)


def _seq_slots(d: Deployment, group: st.PoolGroup, draft: bool) -> int:
    """Slots one sequence of max_seq_len takes from a pool group: its full-length
    blocks and, per window, the window's live blocks."""
    tpb, h = v1.block_tokens(d), headroom(d)
    full = cdiv(v1.per_seq_tokens(d), tpb)
    if group.ssm:
        return 1 + len(group.windows)  # one state slot per sequence
    return sum(
        full if w is None else min(full, math.ceil((w + h - 2) / tpb) + 1) for w in group.windows
    )


def _capacity(d: Deployment, stages: list[list[ManagerPools]]) -> Capacity:
    """What the pools hold: the target's full-length pool group's slots (the fewest any
    stage holds), as many sequences of max_seq_len as every pool group of every
    manager holds."""
    tpb = v1.block_tokens(d)
    growing = [_growing(p.storage.gpu) for row in stages for p in row if p.manager.role == "target"]
    host = [_growing(p.storage.host).slots if p.storage.host else 0 for p in stages[-1][:1]]
    disk = [_growing(p.storage.disk).slots if p.storage.disk else 0 for p in stages[-1][:1]]
    sequences = d.max_batch_size
    for row in stages:
        for p in row:
            for g in p.storage.gpu:
                sequences = min(sequences, g.slots // _seq_slots(d, g, p.manager.role == "draft"))
    return engine_capacity(
        d,
        tokens_per_block=tpb,
        gpu_blocks=min(g.slots for g in growing),
        host_blocks=host[0],
        disk_blocks=disk[0],
        max_concurrency=sequences,
    )


def _growing(groups: tuple[st.PoolGroup, ...]) -> st.PoolGroup:
    """The pool group of the full-length layers (or, with none, the first)."""
    return next((g for g in groups if None in g.windows), groups[0])


# ---------------------------------------------------------------- the plan


def plan(d: Deployment, ledger: Ledger) -> EnginePlan:
    """The V2 managers' pools for the emitted ``max_gpu_total_bytes`` and
    ``host_cache_size`` on the reported (last) stage, and the YAML that makes them."""
    facts = ENGINES["trtllm"]
    check_block(d.tokens_per_block, facts)
    check(d)
    d = g4.engine_view(d)  # a Gemma-4 target's layers as TensorRT-LLM's manager holds them
    dtype = kv_dtype_name(d.kv_dtype, facts)
    gpu_total, host, disk = _gpu_total(d, ledger), ledger.host_bytes, disk_bytes(ledger)
    stages = allocate(d, gpu_total, host, disk)
    for row in stages:
        for p in row:
            if any(g.slots == 0 for g in p.storage.gpu):
                raise InfeasibleBudgetError(
                    f"TensorRT-LLM's V2 {p.manager.role} manager gets a {p.quota} B quota per "
                    "rank, less than one slot of a pool group: raise --kv-budget"
                )
    capacity = _capacity(d, stages)
    last = stages[-1]
    return EnginePlan(
        name="trtllm",
        version=VERSION,
        source=EngineSource(repository="NVIDIA/TensorRT-LLM", ref=REF, files=FILES),
        pools=_pools(d, last),
        capacity=capacity,
        settings=_settings(d, gpu_total, host, disk, dtype),
        log=(
            f"Number of tokens per block: {v1.block_tokens(d)}.",
            *(
                f"KV cache manager v2 device quota set to {p.quota / GIB}GiB ({p.manager.role})"
                for p in last
            ),
        ),
        notes=tuple(_notes(d, stages) + auto_note(d.kv_dtype, facts, dtype)),
        warnings=tuple(
            _warnings(d, capacity)
            + v1.draft_revision_warnings(d)
            + _pinned_warnings(stages, host)
            + _host_warnings(d, ledger, stages, host)
            + _disk_warnings(ledger, disk)
            + g4.shared_layer_warnings(d)
        ),
        detail=_detail(d, stages, auto_host_quotas(d, ledger, stages)),
    )


def _gpu_total(d: Deployment, ledger: Ledger) -> int:
    """``max_gpu_total_bytes``: the smallest stage budget less that stage's MTP
    intermediate state bytes (:func:`intermediate_reserve`); InfeasibleBudgetError where
    those bytes leave nothing."""
    reserve = intermediate_reserve(d)
    budgets = [(s.pp_stage, s.gpu_bytes) for s in ledger.stages] or [
        (d.parallel.pp - 1, ledger.budget.gpu_bytes)
    ]
    stage, gpu = min(budgets, key=lambda sb: sb[1] - reserve[sb[0]])
    if gpu - reserve[stage] <= 0:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's MTP intermediate state buffers of PP stage {stage} take "
            f"{reserve[stage]} B per rank outside the KV pools (max_batch_size "
            f"{d.max_batch_size} x {1 + d.lookahead_tokens} tokens per step x its recurrent "
            f"layers' SSM and conv states), more than its {gpu} B KV budget: raise "
            "--kv-budget, lower --max-batch-size or --num-speculative-tokens"
        )
    return gpu - reserve[stage]


def _pools(d: Deployment, row: list[ManagerPools]) -> tuple[PoolPlan, ...]:
    """The reported stage's pool groups per manager and tier."""
    tpb, out = v1.block_tokens(d), []
    for p in row:
        role: PoolRole = "target" if p.manager.role == "target" else "draft"
        for tier, groups in _tiers(p.storage):
            for i, g in enumerate(groups):
                full = None in g.windows
                kind: PoolKind = "state" if g.ssm and not g.windows else _kind(g)
                out.append(
                    PoolPlan(
                        role=role,
                        kind=kind,
                        tier=tier,
                        tokens_per_block=tpb,
                        blocks=g.slots,
                        bytes=g.bytes,
                        tokens=0 if kind == "state" else g.slots * tpb,
                        window_tokens=None if full or kind == "state" else _window_of(g),
                        padding_bytes=g.bytes - g.slots * sum(g.slot_bytes),
                        name=f"{p.manager.role} V2 pool group {i} ({LEVELS[tier]})",
                    )
                )
    return tuple(out)


LEVELS: dict[Tier, str] = {"gpu": "GPU_MEM", "host": "HOST_MEM", "disk": "DISK"}


def _tiers(storage: st.Storage) -> tuple[tuple[Tier, tuple[st.PoolGroup, ...]], ...]:
    return (("gpu", storage.gpu), ("host", storage.host), ("disk", storage.disk))


def _kind(g: st.PoolGroup) -> PoolKind:
    if g.ssm:
        return "hybrid"  # states and attention blocks in one group (equal slot bytes)
    return "kv" if None in g.windows else "window"


def _window_of(g: st.PoolGroup) -> int:
    return min(w for w in g.windows if w is not None)


def _group_text(g: st.PoolGroup) -> str:
    if g.ssm and not g.windows:
        return "states"
    return "full" if None in g.windows else f"window {_window_of(g)}"


DISK_PATH = "/var/tmp/trtllm-kv-cache"  # emitted disk_cache_path; the deployer creates it


def disk_bytes(ledger: Ledger) -> int:
    """Disk KV bytes per rank, every role together (``--disk-budget``)."""
    return sum(m.disk.bytes for m in ledger.managers)


def _settings(d: Deployment, gpu_total: int, host: int, disk: int, dtype: str) -> dict[str, Any]:
    """The YAML keys (dotted keys nest): the budget, the host tier (0: none), the disk
    tier (``disk_cache_size`` and ``disk_cache_path``, only with a disk budget), the
    manager, the speculation."""
    settings = v1.manager_settings(d, max_tokens=None, gpu_total=gpu_total, host=host, dtype=dtype)
    if disk > 0:
        settings["kv_cache_config.disk_cache_size"] = disk
        settings["kv_cache_config.disk_cache_path"] = DISK_PATH
    return settings | v1.model_settings(d)


def _disk_warnings(ledger: Ledger, disk: int) -> list[str]:
    """The disk tier's directory, which TensorRT-LLM needs to exist at start-up."""
    if disk <= 0:
        return []
    return [
        f"create kv_cache_config.disk_cache_path ({DISK_PATH}) on each node, on a local disk "
        f"with {format_bytes(disk * ledger.budget.gpus_per_node)} free "
        f"({format_bytes(disk)} per rank), or point it "
        "at such a directory: TensorRT-LLM refuses to start when it is not an existing "
        "directory (KvCacheConfig.validate_disk_cache_config)"
    ]


def _notes(d: Deployment, stages: list[list[ManagerPools]]) -> list[str]:
    last = stages[-1]
    notes = [
        f"# use: trtllm-serve {shlex.quote(d.target_source)} "
        "--extra_llm_api_options <this file> (newer releases: --config)",
        "# V2 manager (use_kv_cache_manager_v2 true): max_gpu_total_bytes is each rank's "
        "budget; a slot holds one block of every layer of its pool group",
        "# host_cache_size is the host tier's bytes per rank; 0 builds no host tier (left "
        "unset, V2 pins one by itself)",
    ]
    groups = last[0].storage.gpu
    if len(groups) > 1:
        shares = ", ".join(f"{_group_text(g)}: {g.slots} slots, {g.bytes} B" for g in groups)
        how = (
            f"{live_states(d) - dummy_slots(d)} requests of max_seq_len / 2 tokens (no "
            f"avg_seq_len), the states' group at least {live_states(d)} / 0.95 slots"
            if hybrid(d)
            else "one 2,049-token request's bytes"
        )
        notes.append(
            f"# {len(groups)} pool groups (slots of different sizes); with no pool_ratio or "
            f"avg_seq_len V2 shares the quota by {how}: {shares}"
        )
    if len(last) > 1:
        draft = last[1]
        notes.append(
            f"# the draft has its own V2 manager: TensorRT-LLM gives it {draft.budget.gpu} B of "
            f"max_gpu_total_bytes (after both managers' fixed costs, by bytes per "
            f"{'request' if _weighted(d, last) else 'token'}) and {draft.budget.host} B of "
            "host_cache_size (by bytes per token)"
            + (f", {draft.budget.disk} B of disk_cache_size (so)" if draft.budget.disk else "")
            + "; the target the rest"
        )
    elif d.spec.name in ("eagle3", "mtp"):
        notes.append(
            "# attention DP: no separate draft manager; the draft layers are the target "
            "manager's last layers"
        )
    elif d.spec.name == "ngram":
        notes.append(
            "# ngram: no draft manager (NGram is no one-engine mode, so no separate draft KV "
            f"cache); a generation step holds 1 + {d.lookahead_tokens} tokens of headroom and "
            "no extra KV tokens"
        )
    for s, row in enumerate(stages[:-1]):
        for p in row:
            if p.manager.placeholder:
                notes.append(
                    f"# PP stage {s} holds no draft layer; TensorRT-LLM still builds its draft "
                    f"manager with one placeholder layer, bounded to {p.budget.max_tokens} tokens "
                    f"({p.quota} B quota) and the whole host_cache_size"
                )
    reserve = intermediate_reserve(d)
    if any(reserve):
        notes.append(
            f"# max_gpu_total_bytes is the KV budget less the MTP intermediate state buffers "
            f"({max(reserve)} B per rank: max_batch_size x (1 + draft tokens) SSM and conv "
            "states per recurrent layer), which TensorRT-LLM allocates outside the V2 pools, "
            "on top of max_gpu_total_bytes"
        )
    if d.parallel.pp > 1:
        notes.append(
            "# the ranks take the MIN of their resumable tokens (0.95 of the quota): a PP "
            "stage with fewer layers gets a smaller quota"
        )
    return notes + v1._block_notes(d)


def _weighted(d: Deployment, row: list[ManagerPools]) -> bool:
    t, dr = (cost(d, p.manager) for p in row[:2])
    return bool(t and dr and t.per_request is not None and dr.per_request is not None)


def _warnings(d: Deployment, capacity: Capacity) -> list[str]:
    out = []
    if capacity.max_concurrency < d.max_batch_size:
        out.append(
            f"TensorRT-LLM's V2 pools hold {count_of(capacity.max_concurrency, 'sequence')} "
            f"of {d.max_seq_len} tokens at once (max_batch_size {d.max_batch_size})"
        )
    if capacity.tokens < v1.engine_max_seq_len(d):
        out.append(
            f"TensorRT-LLM cuts max_seq_len to the V2 pool's {capacity.tokens} tokens: raise "
            "--kv-budget or lower --max-seq-len"
        )
    return out


def _pinned_warnings(stages: list[list[ManagerPools]], host: int) -> list[str]:
    """A stage whose managers together hold more host tier than ``host_cache_size``: a
    placeholder draft stage, where TensorRT-LLM splits nothing."""
    out = []
    for s, row in enumerate(stages):
        pinned = sum(p.budget.host for p in row)
        if host and pinned > host:
            out.append(
                f"PP stage {s}'s ranks pin host_cache_size twice: the target manager and the "
                f"placeholder draft manager each get the whole {host} B (TensorRT-LLM prices "
                f"no draft there, so it splits nothing): {pinned} B of host memory per rank"
            )
        disk = row[0].budget.disk
        if len(row) > 1 and disk and row[1].budget.disk == disk:
            out.append(
                f"PP stage {s}'s ranks take disk_cache_size twice: the target manager and the "
                f"placeholder draft manager each get the whole {disk} B: {2 * disk} B of disk "
                "per rank"
            )
    return out


def auto_host_quotas(d: Deployment, ledger: Ledger, stages: list[list[ManagerPools]]) -> list[int]:
    """Per manager (target, draft) the host tier V2 builds by itself per rank when
    ``host_cache_size`` is unset (``_compute_auto_host_tier_quota``: min of the device
    quota, ``0.5 x MemAvailable / local ranks`` and ``0.8 x RLIMIT_MEMLOCK``, the
    device quota where that is not positive; ``_sync_host_tier_quota``: the MIN over
    the ranks). MemAvailable is taken as the node's memory (``--host-memory``; unknown:
    no bound), local ranks as this deployment's ranks on one node, RLIMIT_MEMLOCK as
    unlimited; with no host budget nothing is split, each manager builds its own."""
    node_memory = ledger.budget.host_memory_bytes
    local = max(1, min(d.parallel.tp * d.parallel.pp, ledger.budget.gpus_per_node))
    out = []
    for i in range(len(stages[0])):
        per_stage = []
        for row in stages:
            quota = row[i].quota
            auto = quota if node_memory is None else min(quota, int(node_memory / local * 0.5))
            per_stage.append(auto if auto > 0 else quota)
        out.append(min(per_stage))
    return out


def _host_warnings(
    d: Deployment, ledger: Ledger, stages: list[list[ManagerPools]], host: int
) -> list[str]:
    """What an unset host_cache_size would pin, per rank and per node."""
    if host:
        return []
    quotas = auto_host_quotas(d, ledger, stages)
    per_rank, ranks = sum(quotas), ledger.budget.gpus_per_node
    bound = "the device quota"
    if ledger.budget.host_memory_bytes is not None and per_rank < sum(
        row.quota for row in stages[-1]
    ):
        bound = "half the node's memory per local rank"
    managers = "" if len(quotas) == 1 else " + ".join(str(q) for q in quotas) + " = "
    return [
        f"keep host_cache_size: 0: left unset, TensorRT-LLM's V2 pins an automatic host tier "
        f"per manager of min(device quota, 0.5 x MemAvailable / local ranks, 0.8 x "
        f"RLIMIT_MEMLOCK) per rank: up to {managers}{per_rank} B per rank ({bound}), "
        f"{per_rank * ranks} B per node of {count_of(ranks, 'such rank')} "
        f"({format_bytes(per_rank)} per rank, {format_bytes(per_rank * ranks)} per node)"
    ]


def _detail(
    d: Deployment, stages: list[list[ManagerPools]], auto_host: list[int]
) -> dict[str, Any]:
    """The V2 figures the fidelity comparison reads: per stage and manager its layers,
    bytes per token, what it was handed, its quota and pools (slots, bytes, slot bytes
    per tier and pool group)."""
    return {
        "kv_cache_manager": "V2",
        "manager_class": "MambaHybridCacheManagerV2" if hybrid(d) else "KVCacheManagerV2",
        "tokens_per_block": v1.block_tokens(d),
        "flash_mla": v1.flash_mla(d),
        "engine_max_seq_len": v1.engine_max_seq_len(d),
        "stages": [
            {
                "pp_stage": s,
                "managers": [_manager_detail(d, p) for p in row],
                # the target's, as before the draft had a manager of its own
                "num_layers": len(row[0].manager.sizes),
                "device_quota": row[0].quota,
                "bytes_per_token": row[0].manager.bytes_per_token,
                "pools": _manager_detail(d, row[0])["pools"],
            }
            for s, row in enumerate(stages)
        ],
        "granularity": gpu_granularity(stages[-1][0].quota),
        "auto_host_quotas": auto_host,
        "blocks_per_sequence": _seq_slots(d, _growing(stages[-1][0].storage.gpu), False),
    }


def _manager_detail(d: Deployment, p: ManagerPools) -> dict[str, Any]:
    c = cost(d, p.manager)
    return {
        "role": p.manager.role,
        "manager_class": "MambaHybridCacheManagerV2" if hybrid(d) else "KVCacheManagerV2",
        "placeholder": p.manager.placeholder,
        "num_layers": len(p.manager.sizes),
        "bytes_per_token": p.manager.bytes_per_token,
        "max_gpu_total_bytes": p.budget.gpu,
        "host_cache_size": p.budget.host,
        "disk_cache_size": p.budget.disk,
        "max_tokens": p.budget.max_tokens,
        "cost": None if c is None else _cost_detail(c),
        "device_quota": p.quota,
        **_state_detail(d, p),
        "pools": [
            {
                "tier": tier,
                "pool_group": i,
                "windows": list(g.windows),
                "slots": g.slots,
                "bytes": g.bytes,
                "slot_bytes": list(g.slot_bytes),
            }
            for tier, groups in _tiers(p.storage)
            for i, g in enumerate(groups)
        ],
    }


def _state_detail(d: Deployment, p: ManagerPools) -> dict[str, int]:
    """A hybrid model's manager: its state slots (0 for an MTP draft manager, which holds
    no recurrent layer) and the MTP intermediate state bytes outside its pools."""
    if not hybrid(d):
        return {}
    slots = sum(g.slots for g in p.storage.gpu if g.ssm)
    return {"ssm_slots": slots, "intermediate_state_bytes": intermediate_state_bytes(d, p.manager)}


def _cost_detail(c: Cost) -> dict[str, int | None]:
    return {"slope": c.slope, "intercept": c.intercept, "bytes_per_request": c.per_request}


MODEL = EngineModel(
    name="trtllm",
    version=VERSION,
    default=False,
    source=EngineSource(repository="NVIDIA/TensorRT-LLM", ref=REF, files=FILES),
    summary="TensorRT-LLM's V2 KV cache manager (EAGLE3, MTP, draft-target, ngram; disk tier)",
    plan=plan,
    check=check,
    render=v1.render,
    spec_names=frozenset(ENGINES["trtllm"].spec_names),
    memory_default=("memory_fraction", "0.9"),
)

__all__ = ["MODEL", "allocate", "check", "plan", "slots", "synced_quotas", "uncovered"]
