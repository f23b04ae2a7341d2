"""TensorRT-LLM's KV cache managers (PyTorch backend), as its code sizes them, and the
``--extra_llm_api_options`` YAML that realises a plan.

Facts from ``NVIDIA/TensorRT-LLM`` @ 0004396720054fd8e205cbf616f21f0b57c6b412 unless said
otherwise:

* **Manager version** (``tensorrt_llm/llmapi/llm_args.py`` ``KvCacheConfig``,
  ``use_kv_cache_manager_v2="auto"``; ``tensorrt_llm/llmapi/llm_utils.py`` @ 0066b2a5
  ``_resolve_kv_cache_manager_v2_auto``): V2 only where the model class prefers it (hybrid
  Mamba and linear-attention models, DeepSeek-V4, ...); Llama, DeepSeek-V3 and gpt-oss get
  the V1 ``KVCacheManager``. This model covers V1.
* **Budget** (``tensorrt_llm/_torch/pyexecutor/_util.py`` ``KvCacheCreator``): V1 turns the
  profiled budget ``B`` into ``max_tokens = B // (target + draft bytes per token)`` (after
  ``B = min(B, slope x max_tokens)`` for a user ``max_tokens``); ``max_gpu_total_bytes``
  is read only where windows differ (VSWA) and caps ``B`` there. Both V1 managers get the
  same ``max_tokens``; each holds ``max_tokens // tokens_per_block`` blocks of its own
  bytes per token (``resource_manager.py`` ``calculate_max_num_blocks``). V1 stores every
  layer at full length unless ``max_attention_window`` (a per-layer list, repeated
  cyclically) says otherwise.
* **Windows** (``resource_manager.py`` ``calculate_max_num_blocks_for_vswa``): with two or
  more window sizes the target manager's bytes ``P`` (its share of
  ``max_gpu_total_bytes``, split from the draft's by bytes per token,
  ``_split_kv_cache_budget_for_draft``) go to the windows in equal shares unless the
  environment variable ``TRTLLM_WINDOW_SIZE_SHARES`` (ascending windows, summing to exactly
  1.0) says otherwise: ``blocks_w = int(P x share_w / bytes_per_token_w // tokens_per_block)``;
  ``max_tokens`` is ignored there, and a non-VSWA draft manager still sizes from the
  creator's ``max_tokens = B // (target + draft bytes per token)``.
* **Speculation** (``tensorrt_llm/_torch/speculative/utils.py``): one-engine EAGLE3 and MTP
  get a separate draft manager (MTP: one layer); every sequence holds
  ``max_draft_len - 1`` extra KV tokens (``get_num_extra_kv_tokens``) besides its
  ``max_draft_len`` draft tokens.
* **Host** (``resource_manager.py``): ``host_cache_size`` is bytes per rank, split between
  target and draft by bytes per token; per manager ``(host // bytes_per_token) //
  tokens_per_block`` secondary blocks, per window by the same shares.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.cost import pp_stage_layers
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import (
    GIB,
    auto_note,
    cdiv,
    check_block,
    comment_lines,
    kv_dtype_name,
    refuse_unmodelled,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer
from kvbudget.plan_types import Capacity, EnginePlan, EngineSource, Plan, PoolPlan, PoolRole

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger
from kvbudget.units import count_of

VERSION = "main@00043967"
FULL = 0  # window key of full-attention layers


@dataclass(frozen=True, kw_only=True)
class Manager:
    """One V1 KV cache manager: bytes per token, in all and per window (0 = full length)."""

    role: str
    bytes_per_token: int
    windows: dict[int, int]  # window (0: full) -> bytes per token of its layers


def managers(d: Deployment, stage: int | None = None) -> list[Manager]:
    """The target manager and, for EAGLE3, MTP and draft models, the draft manager, on
    PP stage ``stage`` (default: the last, where the draft lives; the target's layers
    split as ``mapping.pp_layers`` splits them)."""
    target = d.target
    last = d.parallel.pp - 1
    stage = last if stage is None else stage
    own = [target.layers[i] for i in pp_stage_layers(target.num_layers, d.parallel.pp)[stage]]
    for layer in target.layers:
        if layer.state_bytes(d.state_dtype_value, d.parallel.attention_tp):
            raise InvalidArgumentError(
                f"--engine trtllm models the V1 KV cache manager; {target.name} has "
                f"{layer.kind} layers, which TensorRT-LLM runs on its V2 manager: plan it with "
                "--engine kvbudget or vllm"
            )
    out = [_manager("target", tuple(own), d)]
    if stage != last:
        return out
    if d.spec.name == "mtp":
        out.append(_manager("draft", target.mtp_layers[:1], d))  # MTP one-model: 1 layer
    elif d.draft is not None:
        out.append(_manager("draft", d.draft.layers, d))
    return out


def _window(layer: Layer) -> int | None:
    """The layer's attention window in TensorRT-LLM's KV cache, or None (full).

    Chunked local attention (Llama-4) is a kernel mask there (``attention_chunk_size``
    for the TRTLLM backend, context phase only: ``docs/source/features/long-sequence.md``
    @ 1ec63b44); its KV is sized by ``max_attention_window``, which nothing derives from
    the chunk, so those layers are allocated at full length.
    """
    if isinstance(layer, AttentionLayer) and not layer.chunked:
        return layer.sliding_window
    return None


def _manager(role: str, layers: tuple[Layer, ...], d: Deployment) -> Manager:
    windows: dict[int, int] = {}
    for layer in layers:
        per_token = layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp)
        if not per_token:
            continue
        window = _window(layer) or FULL
        if window >= d.max_seq_len:
            window = FULL
        windows[window] = windows.get(window, 0) + per_token
    return Manager(role=role, bytes_per_token=sum(windows.values()), windows=windows)


def attention_windows(d: Deployment) -> list[int] | None:
    """``max_attention_window``: the shortest repeating per-layer pattern, or None.

    Full-attention layers get ``max_seq_len + 1024``, which TensorRT-LLM clamps to its
    internal max_seq_len (the model length plus draft tokens).
    """
    big = d.max_seq_len + 1024
    per_layer = []
    for layer in d.target.layers:
        if not layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp):
            continue
        w = _window(layer)
        per_layer.append(w if w is not None and w < d.max_seq_len else big)
    if all(w == big for w in per_layer):
        return None
    for period in range(1, len(per_layer) + 1):
        if all(per_layer[i] == per_layer[i % period] for i in range(len(per_layer))):
            return per_layer[:period]
    return per_layer


def _per_seq_tokens(d: Deployment) -> int:
    """KV tokens one sequence of max_seq_len holds: draft tokens plus the extra K - 1."""
    k = d.lookahead_tokens
    extra = k - 1 if d.spec.name in ("eagle3", "mtp") and k else 0
    return d.max_seq_len + k + extra


def _shares_text(shares: list[float]) -> str:
    """Shares with 6 decimals whose float sum is exactly 1.0, the last taking the rest."""
    head = [round(s, 6) for s in shares[:-1]]
    last = round(1.0 - sum(head), 6)
    for _ in range(20):
        if sum([*head, last]) == 1.0:
            break
        last = round(last + 1e-6, 6) if sum([*head, last]) < 1.0 else round(last - 1e-6, 6)
    return ",".join(f"{s:.6f}" for s in [*head, last])


@dataclass(frozen=True, kw_only=True)
class TrtllmPools:
    """Primary and secondary blocks per manager and window, as V1 allocates them."""

    max_tokens: int
    max_gpu_total_bytes: int
    shares: dict[int, float] | None
    blocks: dict[str, dict[int, tuple[int, int]]]  # role -> window -> (primary, secondary)


def allocate(
    d: Deployment,
    mgrs: list[Manager],
    *,
    max_tokens: int,
    max_gpu_total_bytes: int,
    host_cache_size: int,
    shares_text: str | None,
) -> TrtllmPools:
    """Forward: the blocks V1 creates from the emitted settings (budget not binding)."""
    tpb = d.tokens_per_block
    slope = sum(m.bytes_per_token for m in mgrs)
    vswa = len(mgrs[0].windows) > 1
    budget = min(max_gpu_total_bytes, slope * max_tokens) if vswa else slope * max_tokens
    tokens = budget // slope
    draft_gpu = budget * mgrs[1].bytes_per_token // slope if len(mgrs) > 1 else 0
    draft_host = host_cache_size * mgrs[1].bytes_per_token // slope if len(mgrs) > 1 else 0
    blocks: dict[str, dict[int, tuple[int, int]]] = {}
    shares: dict[int, float] | None = None
    for m in mgrs:
        host = draft_host if m.role == "draft" else host_cache_size - draft_host
        if len(m.windows) > 1:
            gpu = draft_gpu if m.role == "draft" else budget - draft_gpu
            ordered = sorted(m.windows, key=lambda w: (w == FULL, w))
            if shares_text is None:
                values = [1 / len(ordered)] * len(ordered)
            else:
                values = [float(x) for x in shares_text.split(",")]
            shares = dict(zip(ordered, values, strict=True))
            blocks[m.role] = {
                w: (
                    int(gpu * shares[w] / m.windows[w] // tpb),
                    int(host * shares[w] / m.windows[w] // tpb),
                )
                for w in ordered
            }
        else:
            (w,) = m.windows
            blocks[m.role] = {w: (tokens // tpb, (host // m.bytes_per_token) // tpb)}
    return TrtllmPools(max_tokens=tokens, max_gpu_total_bytes=budget, shares=shares, blocks=blocks)


def _full_window_tokens(d: Deployment, target: Manager, part: int) -> int:
    """Full-length tokens of the target when its sliding pools hold what sequences need.

    Each sequence of max_seq_len takes ``ceil(per_seq / block)`` full-length blocks and,
    per sliding window ``w``, ``ceil((w + draft tokens) / block) + 1`` blocks (a window can
    straddle one more block than it fills); the sliding pools are sized for as many
    sequences as the full pool then holds, at most ``max_batch_size``.
    """
    tpb = d.tokens_per_block
    lookahead = _per_seq_tokens(d) - d.max_seq_len
    window_bytes = sum(
        (cdiv(w + lookahead, tpb) + 1) * tpb * b for w, b in target.windows.items() if w != FULL
    )
    full_seq_bytes = cdiv(_per_seq_tokens(d), tpb) * tpb * target.windows[FULL]
    sequences = min(d.max_batch_size, part // (full_seq_bytes + window_bytes))
    if sequences == 0:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's target manager gets {part} B per rank; one sequence of "
            f"{d.max_seq_len} tokens needs {full_seq_bytes + window_bytes} B over its "
            "windows: raise --kv-budget or lower --max-seq-len"
        )
    return (part - sequences * window_bytes) // target.windows[FULL] // tpb * tpb


def plan(d: Deployment, ledger: Ledger) -> EnginePlan:
    """TensorRT-LLM's plan: the V1 managers' blocks and the YAML that makes them."""
    facts = ENGINES["trtllm"]
    check_block(d.tokens_per_block, facts)
    dtype = kv_dtype_name(d.kv_dtype, facts)
    tpb = d.tokens_per_block
    mgrs = managers(d)
    slope = sum(m.bytes_per_token for m in mgrs)
    budget = ledger.min_stage_gpu_bytes
    # every PP rank sizes its managers from its own layers and the ranks agree on the
    # smallest count: max_tokens is the binding stage's
    stage_slopes = [sum(m.bytes_per_token for m in managers(d, s)) for s in range(d.parallel.pp)]
    tokens = min(budget // b // tpb * tpb for b in stage_slopes if b)
    if tokens < tpb:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's managers need {slope} B per token; {budget} B per rank holds "
            "no block: raise --kv-budget"
        )
    shares_text = _window_shares(d, mgrs, tokens)
    pools = allocate(
        d,
        mgrs,
        max_tokens=tokens,
        max_gpu_total_bytes=slope * tokens,
        host_cache_size=ledger.host_bytes,
        shares_text=shares_text,
    )
    # capacity is the full-length pool of every manager (or its only window's)
    growing = [pools.blocks[m.role][FULL if FULL in m.windows else min(m.windows)] for m in mgrs]
    gpu_tokens = min(primary for primary, _ in growing) * tpb
    host_tokens = min(secondary for _, secondary in growing) * tpb
    per_seq_blocks = cdiv(_per_seq_tokens(d), tpb)
    sequences = min(gpu_tokens // tpb // per_seq_blocks, d.max_batch_size)
    capacity = Capacity(
        tokens=gpu_tokens,
        tokens_per_block=tpb,
        gpu_blocks=gpu_tokens // tpb,
        host_blocks=host_tokens // tpb,
        disk_blocks=0,
        host_tokens=host_tokens,
        disk_tokens=0,
        max_seq_len=d.max_seq_len,
        lookahead_tokens=d.lookahead_tokens,
        max_batch_size=d.max_batch_size,
        max_concurrency=sequences,
        kv_groups=d.parallel.kv_groups,
    )
    warnings = []
    if sequences < d.max_batch_size:
        warnings.append(
            f"TensorRT-LLM's managers hold {count_of(sequences, 'sequence')} of "
            f"{d.max_seq_len} "
            f"tokens at once (max_batch_size {d.max_batch_size})"
        )
    return EnginePlan(
        name=MODEL.name,
        version=MODEL.version,
        source=MODEL.source,
        pools=_pools(d, mgrs, pools),
        capacity=capacity,
        settings=_settings(d, ledger, dtype, pools, shares_text),
        log=_log(d, mgrs, pools),
        notes=tuple(_notes(d, mgrs, shares_text) + auto_note(d.kv_dtype, facts, dtype)),
        warnings=tuple(warnings),
        detail={
            "kv_cache_manager": "V1",
            "max_tokens": pools.max_tokens,
            "managers": [_manager_detail(m, pools) for m in mgrs],
            "gpu_tokens": gpu_tokens,
            "host_tokens": host_tokens,
            "blocks_per_sequence": per_seq_blocks,
        },
    )


def _window_shares(d: Deployment, mgrs: list[Manager], tokens: int) -> str | None:
    """``TRTLLM_WINDOW_SIZE_SHARES`` for a target with several windows, else None.

    The target's share of the budget (split by bytes per token) between its windows:
    the full-length window gets what the draft manager's tokens need (or, with no draft,
    all but what the sliding windows need); sliding windows the rest. The target's share
    of ``max_gpu_total_bytes = slope x tokens`` is exactly tokens x its bytes per token.
    """
    target = mgrs[0]
    if len(target.windows) <= 1:
        return None
    part = tokens * target.bytes_per_token
    sliding = {w: b for w, b in target.windows.items() if w != FULL}
    full_tokens = _full_window_tokens(d, target, part) if len(mgrs) == 1 else tokens
    full_bytes = full_tokens * target.windows[FULL]
    rest = part - full_bytes
    total_sliding = sum(sliding.values())
    ordered = sorted(target.windows, key=lambda w: (w == FULL, w))
    values = [
        (rest * sliding[w] / total_sliding) / part if w != FULL else full_bytes / part
        for w in ordered
    ]
    return _shares_text(values)


def _ordered(m: Manager) -> list[int]:
    """A manager's windows, sliding ones first, full length last."""
    return sorted(m.windows, key=lambda w: (w == FULL, w))


def _pools(d: Deployment, mgrs: list[Manager], pools: TrtllmPools) -> tuple[PoolPlan, ...]:
    """Every manager's pool per window, primary (GPU) and secondary (host) blocks."""
    tpb = d.tokens_per_block
    out = []
    for m in mgrs:
        role: PoolRole = "target" if m.role == "target" else "draft"
        for w in _ordered(m):
            for tier, blocks in zip(("gpu", "host"), pools.blocks[m.role][w], strict=True):
                if tier == "host" and not blocks:
                    continue
                out.append(
                    PoolPlan(
                        role=role,
                        kind="kv" if w == FULL else "window",
                        tier="gpu" if tier == "gpu" else "host",
                        tokens_per_block=tpb,
                        blocks=blocks,
                        bytes=blocks * tpb * m.windows[w],
                        tokens=blocks * tpb,
                        window_tokens=None if w == FULL else w,
                        name=f"{m.role} manager, window {w or d.max_seq_len}",
                    )
                )
    return tuple(out)


def _manager_detail(m: Manager, pools: TrtllmPools) -> dict[str, Any]:
    """One manager's windows as the fidelity comparison reads them."""
    return {
        "role": m.role,
        "bytes_per_token": m.bytes_per_token,
        "windows": [
            {
                "window": w if w != FULL else None,
                "bytes_per_token": m.windows[w],
                "primary_blocks": pools.blocks[m.role][w][0],
                "secondary_blocks": pools.blocks[m.role][w][1],
                "share": None if pools.shares is None or m.role != "target" else pools.shares[w],
            }
            for w in _ordered(m)
        ],
    }


def _settings(
    d: Deployment, ledger: Ledger, dtype: str, pools: TrtllmPools, shares_text: str | None
) -> dict[str, Any]:
    """The YAML keys of the plan (dotted keys nest)."""
    facts = ENGINES["trtllm"]
    layout = d.parallel
    settings: dict[str, Any] = {
        "tensor_parallel_size": layout.tp,
        "pipeline_parallel_size": layout.pp,
        "max_batch_size": d.max_batch_size,
        "max_seq_len": d.max_seq_len,
        "max_num_tokens": d.max_num_batched_tokens,
        facts.token_knob: pools.max_tokens,
        facts.gpu_knob: pools.max_gpu_total_bytes,
        facts.host_knob: ledger.host_bytes,
        facts.block_knob: d.tokens_per_block,
        facts.kv_dtype_knob: dtype,
        "kv_cache_config.enable_block_reuse": d.enable_prefix_caching,
        "kv_cache_config.use_kv_cache_manager_v2": False,
    }
    if layout.dp_attention:
        settings["enable_attention_dp"] = True
    if layout.ep > 1:
        settings["moe_expert_parallel_size"] = layout.ep
    windows = attention_windows(d)
    if windows is not None:
        settings["kv_cache_config.max_attention_window"] = windows
    if shares_text is not None:
        settings["env.TRTLLM_WINDOW_SIZE_SHARES"] = shares_text
    spec = d.spec.name
    if spec in facts.spec_names:
        settings[facts.spec_knob] = facts.spec_names[spec]
        settings[f"speculative_config.{facts.draft_len_knob}"] = d.lookahead_tokens
        if d.draft_source:
            settings[f"speculative_config.{facts.draft_model_knob}"] = d.draft_source
    return settings


def _log(d: Deployment, mgrs: list[Manager], pools: TrtllmPools) -> tuple[str, ...]:
    """TensorRT-LLM's start-up lines about its managers."""
    tpb = d.tokens_per_block
    log = [f"Number of tokens per block: {tpb}."]
    for m in mgrs:
        per_window = {
            (w if w != FULL else d.max_seq_len): pools.blocks[m.role][w] for w in _ordered(m)
        }
        log.append(f"[KVCacheManager] blocks_per_window: {per_window}  ({m.role})")
        primary = sum(b[0] * tpb * m.windows[w] for w, b in pools.blocks[m.role].items())
        log.append(
            f"[MemUsageChange] Allocated {primary / GIB:.2f} GiB for max tokens in paged KV "
            f"cache ({sum(b[0] for b in pools.blocks[m.role].values()) * tpb}).  ({m.role})"
        )
    return tuple(log)


def _notes(d: Deployment, mgrs: list[Manager], shares_text: str | None) -> list[str]:
    """What each setting does in TensorRT-LLM, for the emitted comments."""
    notes = [
        f"# use: trtllm-serve {shlex.quote(d.target_source)} "
        "--extra_llm_api_options <this file> (newer releases: --config)",
        "# V1 manager (use_kv_cache_manager_v2 auto picks V1 for this model): max_tokens sizes "
        "every manager alike, each at its own bytes per token",
    ]
    if len(mgrs) > 1:
        notes.append(
            "# the draft has its own manager with the same max_tokens; host_cache_size is one "
            "per-rank budget split between them by bytes per token"
        )
    if attention_windows(d) is not None and len(mgrs[0].windows) > 1:
        notes.append(
            "# max_attention_window stores sliding layers in their own pools; the target's "
            "bytes go to the windows by TRTLLM_WINDOW_SIZE_SHARES (set it in the server's "
            "environment: export TRTLLM_WINDOW_SIZE_SHARES=" + str(shares_text) + ")"
        )
        if len(mgrs) > 1:
            notes.append(
                "# with windows the draft manager still gets max_tokens = budget / (target + "
                "draft bytes per token at full length): the draft binds capacity"
            )
    return notes


def render(plan: Plan) -> str:
    """The YAML of ``plan.engine.settings`` (dotted keys nested), with comments."""
    lines = comment_lines(plan, "TensorRT-LLM")
    sections: dict[str, list[str]] = {}
    for key, value in plan.engine.settings.items():
        if key.startswith("env."):
            continue
        text = _yaml(value)
        if "." in key:
            section, name = key.split(".", 1)
            sections.setdefault(section, []).append(f"  {name}: {text}")
        else:
            lines.append(f"{key}: {text}")
    for section, entries in sections.items():
        lines.append(f"{section}:")
        lines += entries
    return "\n".join(lines) + "\n"


def _yaml(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def check(d: Deployment) -> None:
    """InvalidArgumentError for what this model of TensorRT-LLM does not cover."""
    refuse_unmodelled(d, "trtllm")


MODEL = EngineModel(
    name="trtllm",
    version=VERSION,
    default=True,
    source=EngineSource(
        repository="NVIDIA/TensorRT-LLM",
        ref="0004396720054fd8e205cbf616f21f0b57c6b412",
        files=(
            "tensorrt_llm/_torch/pyexecutor/_util.py",
            "tensorrt_llm/_torch/pyexecutor/resource_manager.py",
            "tensorrt_llm/llmapi/llm_args.py",
        ),
    ),
    summary=f"TensorRT-LLM {VERSION}",
    plan=plan,
    check=check,
    render=render,
    spec_names=frozenset(ENGINES["trtllm"].spec_names),
    # KvCacheConfig.free_gpu_memory_fraction: 0.9 (tensorrt_llm/llmapi/llm_args.py)
    memory_default=("memory_fraction", "0.9"),
)
