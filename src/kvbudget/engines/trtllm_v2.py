"""TensorRT-LLM's V2 KV cache manager (``KVCacheManagerV2``, PyTorch backend) for
non-hybrid models without speculation, as its code sizes it: ``trtllm@v2``.

A separate engine version rather than a switch inside :mod:`kvbudget.engines.trtllm`:
the V2 manager is a different sizing path (a byte quota and pool groups of slots, not
``max_tokens`` and blocks per window), and one module per sizing path keeps each exact
against its own code. What both share (the block size, the internal max_seq_len, the
checks, the YAML) is imported from the V1 module.

Facts from ``NVIDIA/TensorRT-LLM`` @ 38198e34 (as transcribed in ``shared/trtllm-src``,
SOURCES.md): ``_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py`` (``KVCacheManagerV2
.__init__``: the device quota, the ranks' sync, the host tier) and the V2 runtime's
storage sizing (``runtime/kv_cache_manager_v2/_storage_manager.py``, ``_storage/_core.py``:
granularity, slots per level).

* **Quota**: ``kv_cache_config.max_gpu_total_bytes`` is the rank's device quota; a
  ``max_tokens`` would only cap it (the plan emits none).
* **Ranks** (world size > 1): each rank turns ``int(quota x max_util_for_resume)`` into
  tokens (bytes per token of its layers; ``max_util_for_resume`` 0.95), the ranks take
  the MIN, and each quota becomes ``min(quota, ceil(bytes(tokens) / 0.95))``. A PP stage
  with fewer layers so gets a smaller quota.
* **Pool group**: the layers of one window (``max_attention_window``, emitted as V1's
  pattern; full length is the engine's max_seq_len) form one life cycle, whose slot holds
  one block of each of them; life cycles whose slots are equal share one pool group
  (gpt-oss, Gemma-2 without PP, Mistral): the capacity's tokens are that group's slots.
  A sequence takes its full-length blocks plus ``ceil((w - 1) / block) + 1`` per window.
* **Sync with windows** (``_estimate_cache_size_components``): context tokens cost every
  layer, generation tokens the full-length layers, and each of ``max_batch_size``
  requests its windows' live blocks.
* **Slots** (``cache_tier_granularity``, ``ratio_to_slot_count_list``): the GPU pool is
  ``round_up(quota, g)`` with ``g = 2 MiB << min(4, max(0, int(log2(quota / 1 GiB))))``,
  and holds ``pool // slot`` slots; the host pool ``round_up(host_cache_size, 4 KiB)``
  likewise. ``host_cache_size`` 0 means no host tier; unset, V2 builds one by itself.

Not covered (typed refusals): speculation, windows whose slots differ in size (several
pool groups: Gemma-3, Gemma-2 under PP), recurrent-state (hybrid) layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.engines import trtllm as v1
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
from kvbudget.plan_types import Capacity, EnginePlan, EngineSource, PoolPlan
from kvbudget.units import count_of

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

VERSION = "v2"
REF = "38198e34582cf777ecc72062f477987284ba9999"
FILES = (
    "tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py",
    "tensorrt_llm/runtime/kv_cache_manager_v2/_storage_manager.py",
    "tensorrt_llm/runtime/kv_cache_manager_v2/_storage/_core.py",
    "tensorrt_llm/llmapi/llm_args.py",
)
MAX_UTIL_FOR_RESUME = 0.95  # KvCacheConfig.max_util_for_resume default (llm_args.py)
GPU_PAGE = 2 << 20  # cache_tier_granularity: 2 MiB physical chunks
HOST_GRANULARITY = 4 << 10  # HostMem::kAlignment (C++ runtime)


def uncovered(d: Deployment) -> str | None:
    """What of ``d`` this V2 model does not cover, in a few words, or None."""
    try:
        check(d)
    except InvalidArgumentError:
        if d.spec.name != "none":
            return f"--spec {d.spec.name}"
        if v1.attention_windows(d) is not None:
            return "windows whose slots differ in size (several pool groups)"
        return "this model"
    return None


def check(d: Deployment) -> None:
    """InvalidArgumentError for what this V2 model does not cover."""
    v1.check(d)
    if d.spec.name != "none":
        raise InvalidArgumentError(
            f"--engine trtllm@v2 models TensorRT-LLM's V2 manager without speculation; "
            f"--spec {d.spec.name} is not modelled there yet: plan it with --engine trtllm@"
            f"{v1.VERSION} (the V1 manager)"
        )
    for layer in d.target.layers:
        if layer.state_bytes(d.state_dtype_value, d.parallel.attention_tp):
            raise InvalidArgumentError(
                f"--engine trtllm@v2 does not model hybrid models' MambaHybridCacheManagerV2; "
                f"{d.target.name} has {layer.kind} layers"
            )
    for stage in range(d.parallel.pp):
        stage_cost(d, stage)  # one pool group per stage


@dataclass(frozen=True, kw_only=True)
class StageCost:
    """One PP stage's V2 manager: bytes per token of all its layers, the slot bytes of
    its one pool group, and ``_estimate_cache_size_components``' context and generation
    bytes per token and SWA bytes per request."""

    per_token: int
    slot_bytes: int
    context: int
    generation: int
    swa_per_request: int


def _stage_windows(d: Deployment, stage: int) -> dict[int | None, int]:
    """Window (None: full) -> bytes per token of the stage's layers with it: the emitted
    ``max_attention_window`` pattern clamped to the engine's max_seq_len, per layer
    (``_resolve_v2_max_attention_window_vec``)."""
    dtype, tp, layers = d.kv_dtype_value, d.parallel.attention_tp, d.target.layers
    pattern, seq = v1.attention_windows(d), v1.engine_max_seq_len(d)
    out: dict[int | None, int] = {}
    for i in v1.pp_layers(len(layers), d.parallel.pp, stage):
        w = None if pattern is None else min(seq, pattern[i % len(pattern)])
        key = None if w is None or w == seq else w
        out[key] = out.get(key, 0) + layers[i].bytes_per_token(dtype, tp)
    return out


def stage_cost(d: Deployment, stage: int) -> StageCost:
    """The stage's :class:`StageCost`; InvalidArgumentError where its windows' slots
    differ in size (several pool groups, not modelled)."""
    tpb, windows = v1.block_tokens(d), _stage_windows(d, stage)
    sizes = {b * tpb for b in windows.values()}
    if len(sizes) > 1:
        raise InvalidArgumentError(
            f"--engine trtllm@v2 models one V2 pool group; {d.target.name}'s windows give "
            f"slots of {len(sizes)} sizes (several pool groups): plan it with --engine "
            "trtllm@v1"
        )
    full = windows.get(None, 0)
    swa = sum(b for w, b in windows.items() if w is not None)
    # live interval of a window: ceil((w + headroom 1 - 2) / block) + 1 blocks
    per_request = sum(
        (math.ceil((w + 1 - 2) / tpb) + 1) * tpb * b for w, b in windows.items() if w is not None
    )
    return StageCost(
        per_token=full + swa,
        slot_bytes=sizes.pop(),
        context=full + swa,  # enable_swa_scratch_reuse is off by default
        generation=full,
        swa_per_request=per_request,
    )


def _tokens_from_quota(quota: int, c: StageCost, mnt: int, batch: int) -> float:
    """``_get_max_tokens_from_quota`` (its float arithmetic)."""
    per_batch = batch * c.swa_per_request
    if quota < per_batch:
        return 0
    context_limit = mnt * c.context + per_batch
    if quota <= context_limit:
        return math.inf if c.context <= 0 else (quota - per_batch) / c.context
    if c.generation <= 0:
        return math.inf
    return mnt + (quota - context_limit) / c.generation


def _quota_from_tokens(tokens: float, c: StageCost, mnt: int, batch: int) -> int:
    """``_get_quota_from_max_tokens``."""
    context = min(tokens, mnt)
    return int(context * c.context + (tokens - context) * c.generation + batch * c.swa_per_request)


def synced_quotas(d: Deployment, quota: int) -> list[int]:
    """Each PP stage's device quota after the ranks' MIN of resumable tokens."""
    costs = [stage_cost(d, s) for s in range(d.parallel.pp)]
    mnt, batch = d.max_num_batched_tokens, d.max_batch_size
    if d.parallel.tp * d.parallel.pp == 1:
        return [quota]
    resumable = int(quota * MAX_UTIL_FOR_RESUME)
    tokens = min(_tokens_from_quota(resumable, c, mnt, batch) for c in costs)
    if math.isinf(tokens):
        return [quota] * len(costs)
    return [
        min(quota, math.ceil(_quota_from_tokens(tokens, c, mnt, batch) / MAX_UTIL_FOR_RESUME))
        for c in costs
    ]


def gpu_granularity(quota: int) -> int:
    """``cache_tier_granularity(GPU_MEM, quota)``: 2 MiB, doubled per doubling of the
    quota past 1 GiB, at most 32 MiB."""
    return GPU_PAGE << min(4, max(0, int(math.log(quota / (GPU_PAGE * 512), 2))))


def slots(pool_quota: int, granularity: int, slot_bytes: int) -> tuple[int, int]:
    """(slots, pool bytes) of a one-pool level: as many whole slots as the quota rounded
    up to the granularity holds; the pool is their bytes rounded up to it
    (``SizedLevelStorage.pool_bytes``)."""
    n = cdiv(pool_quota, granularity) * granularity // slot_bytes
    return n, cdiv(n * slot_bytes, granularity) * granularity


def _pools(d: Deployment, quota: int, host: int, slot: int) -> tuple[PoolPlan, ...]:
    """A stage's pool group on the GPU and, with a host tier, on the host."""
    tpb = v1.block_tokens(d)
    n, pool = slots(quota, gpu_granularity(quota), slot)
    if n == 0:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's V2 pool gets a {quota} B quota per rank, less than one {slot} B "
            "slot: raise --kv-budget"
        )
    out = [_pool(tpb, "gpu", n, pool, slot)]
    if host > 0:
        hn, hpool = slots(host, HOST_GRANULARITY, slot)
        out.append(_pool(tpb, "host", hn, hpool, slot))
    return tuple(out)


def _pool(tpb: int, tier: str, n: int, pool: int, slot: int) -> PoolPlan:
    return PoolPlan(
        role="target",
        kind="kv",
        tier="gpu" if tier == "gpu" else "host",
        tokens_per_block=tpb,
        blocks=n,
        bytes=pool,
        tokens=n * tpb,
        padding_bytes=pool - n * slot,
        name=f"V2 pool group 0 ({'GPU_MEM' if tier == 'gpu' else 'HOST_MEM'})",
    )


def _capacity(d: Deployment, pools: tuple[PoolPlan, ...], gpu: int) -> Capacity:
    """What the pools hold: ``gpu`` slots (the fewest any stage holds), as many sequences
    of max_seq_len as fit."""
    tpb = v1.block_tokens(d)
    host = sum(p.blocks for p in pools if p.tier == "host")
    per_seq = _seq_slots(d)
    return engine_capacity(
        d,
        tokens_per_block=tpb,
        gpu_blocks=gpu,
        host_blocks=host,
        max_concurrency=min(gpu // per_seq, d.max_batch_size),
    )


def plan(d: Deployment, ledger: Ledger) -> EnginePlan:
    """The V2 manager's pools for the emitted ``max_gpu_total_bytes`` and
    ``host_cache_size`` on the reported (last) stage, and the YAML that makes them."""
    facts = ENGINES["trtllm"]
    check_block(d.tokens_per_block, facts)
    check(d)
    dtype = kv_dtype_name(d.kv_dtype, facts)
    gpu_total, host = ledger.min_stage_gpu_bytes, ledger.host_bytes
    quotas = synced_quotas(d, gpu_total)
    costs = [stage_cost(d, s) for s in range(d.parallel.pp)]
    stage_pools = [_pools(d, q, host, c.slot_bytes) for q, c in zip(quotas, costs, strict=True)]
    pools = stage_pools[-1]
    capacity = _capacity(d, pools, min(sp[0].blocks for sp in stage_pools))
    settings = _settings(d, gpu_total, host, dtype)
    return EnginePlan(
        name="trtllm",
        version=VERSION,
        source=EngineSource(repository="NVIDIA/TensorRT-LLM", ref=REF, files=FILES),
        pools=pools,
        capacity=capacity,
        settings=settings,
        log=(
            f"Number of tokens per block: {v1.block_tokens(d)}.",
            f"KV cache manager v2 device quota set to {quotas[-1] / GIB}GiB",
        ),
        notes=tuple(_notes(d) + auto_note(d.kv_dtype, facts, dtype)),
        warnings=tuple(_warnings(d, capacity) + _host_warnings(ledger, quotas[-1], host)),
        detail=_detail(d, quotas, costs, stage_pools),
    )


def _settings(d: Deployment, gpu_total: int, host: int, dtype: str) -> dict[str, Any]:
    """The YAML keys (dotted keys nest): the quota, the host tier (0: none), the manager."""
    facts = ENGINES["trtllm"]
    layout = d.parallel
    settings: dict[str, Any] = {
        "tensor_parallel_size": layout.tp,
        "pipeline_parallel_size": layout.pp,
        "max_batch_size": d.max_batch_size,
        "max_seq_len": d.max_seq_len,
        "max_num_tokens": d.max_num_batched_tokens,
        facts.gpu_knob: gpu_total,
        facts.host_knob: host,
        facts.block_knob: v1.block_tokens(d),
        facts.kv_dtype_knob: dtype,
        "kv_cache_config.enable_block_reuse": d.enable_prefix_caching,
        "kv_cache_config.use_kv_cache_manager_v2": True,
    }
    if layout.dp_attention:
        settings["enable_attention_dp"] = True
    if layout.ep > 1:
        settings["moe_expert_parallel_size"] = layout.ep
    windows = v1.attention_windows(d)
    if windows is not None:
        settings["kv_cache_config.max_attention_window"] = windows
    return settings


def _notes(d: Deployment) -> list[str]:
    notes = [
        "# V2 manager (use_kv_cache_manager_v2 true): max_gpu_total_bytes is each rank's "
        "device quota; its slots hold one block of every layer of the rank",
        "# host_cache_size is the host tier's bytes per rank; 0 builds no host tier (left "
        "unset, V2 pins one by itself)",
    ]
    if d.parallel.pp > 1:
        notes.append(
            "# the ranks take the MIN of their resumable tokens (0.95 of the quota): a PP "
            "stage with fewer layers gets a smaller quota"
        )
    return notes + v1._block_notes(d)


def _warnings(d: Deployment, capacity: Capacity) -> list[str]:
    out = []
    if capacity.max_concurrency < d.max_batch_size:
        out.append(
            f"TensorRT-LLM's V2 pool holds {count_of(capacity.max_concurrency, 'sequence')} "
            f"of {d.max_seq_len} tokens at once (max_batch_size {d.max_batch_size})"
        )
    if capacity.tokens < v1.engine_max_seq_len(d):
        out.append(
            f"TensorRT-LLM cuts max_seq_len to the V2 pool's {capacity.tokens} tokens: raise "
            "--kv-budget or lower --max-seq-len"
        )
    return out


def _host_warnings(ledger: Ledger, quota: int, host: int) -> list[str]:
    """What an unset host_cache_size would pin (``_compute_auto_host_tier_quota``: min of
    the device quota, 0.5 x MemAvailable / local ranks, 0.8 x RLIMIT_MEMLOCK)."""
    if host:
        return []
    ranks = max(1, ledger.budget.gpus_per_node)
    per_rank, bound = quota, "the device quota"
    node_memory = ledger.budget.host_memory_bytes
    if node_memory is not None and node_memory // 2 // ranks < quota:
        per_rank, bound = node_memory // 2 // ranks, "half the node's memory per rank"
    return [
        f"keep host_cache_size: 0: left unset, TensorRT-LLM's V2 pins an automatic host tier "
        f"of min(device quota {quota} B, 0.5 x MemAvailable / {ranks} local ranks, 0.8 x "
        f"RLIMIT_MEMLOCK) per rank: up to {per_rank} B per rank ({bound}), "
        f"{per_rank * ranks} B per node"
    ]


def _detail(
    d: Deployment,
    quotas: list[int],
    costs: list[StageCost],
    stage_pools: list[tuple[PoolPlan, ...]],
) -> dict[str, Any]:
    """The V2 figures the fidelity comparison reads: per stage its quota, bytes per token,
    layers and pools (slots, bytes, slot bytes per tier)."""
    tpb, layers = v1.block_tokens(d), len(d.target.layers)
    return {
        "kv_cache_manager": "V2",
        "manager_class": "KVCacheManagerV2",
        "tokens_per_block": tpb,
        "flash_mla": v1.flash_mla(d),
        "engine_max_seq_len": v1.engine_max_seq_len(d),
        "stages": [
            {
                "pp_stage": s,
                "num_layers": len(v1.pp_layers(layers, d.parallel.pp, s)),
                "device_quota": q,
                "bytes_per_token": c.per_token,
                "pools": [
                    {
                        "tier": p.tier,
                        "slots": p.blocks,
                        "bytes": p.bytes,
                        "slot_bytes": c.slot_bytes,
                    }
                    for p in pools
                ],
            }
            for s, (q, c, pools) in enumerate(zip(quotas, costs, stage_pools, strict=True))
        ],
        "granularity": gpu_granularity(quotas[-1]),
        "blocks_per_sequence": _seq_slots(d),
    }


def _seq_slots(d: Deployment) -> int:
    """Slots one sequence of max_seq_len takes from the reported stage's pool group: its
    full-length blocks and, per window, the window's live blocks."""
    tpb, windows = v1.block_tokens(d), _stage_windows(d, d.parallel.pp - 1)
    full = cdiv(v1.per_seq_tokens(d), tpb) if None in windows else 0
    return full + sum(math.ceil((w - 1) / tpb) + 1 for w in windows if w is not None)


MODEL = EngineModel(
    name="trtllm",
    version=VERSION,
    default=False,
    source=EngineSource(repository="NVIDIA/TensorRT-LLM", ref=REF, files=FILES),
    summary="TensorRT-LLM's V2 KV cache manager (non-hybrid, no speculation)",
    plan=plan,
    check=check,
    render=v1.render,
    spec_names=frozenset(ENGINES["trtllm"].spec_names),  # check() refuses all but none
    memory_default=("memory_fraction", "0.9"),
)

__all__ = ["MODEL", "check", "plan", "slots", "synced_quotas", "uncovered"]
