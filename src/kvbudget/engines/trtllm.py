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
from typing import Any

from kvbudget.cost import pp_stage_layers
from kvbudget.engines.common import (
    GIB,
    auto_note,
    cdiv,
    check_block,
    comment_lines,
    kv_dtype_name,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.engines.inputs import EngineInputs
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer
from kvbudget.plan_types import EnginePlan, Plan
from kvbudget.units import count_of

VERSION = "main@00043967"
FULL = 0  # window key of full-attention layers


@dataclass(frozen=True, kw_only=True)
class Manager:
    """One V1 KV cache manager: bytes per token, in all and per window (0 = full length)."""

    role: str
    bytes_per_token: int
    windows: dict[int, int]  # window (0: full) -> bytes per token of its layers


def managers(inputs: EngineInputs, stage: int | None = None) -> list[Manager]:
    """The target manager and, for EAGLE3, MTP and draft models, the draft manager, on
    PP stage ``stage`` (default: the last, where the draft lives; the target's layers
    split as ``mapping.pp_layers`` splits them)."""
    target = inputs.target
    last = inputs.pp - 1
    stage = last if stage is None else stage
    own = [target.layers[i] for i in pp_stage_layers(target.num_layers, inputs.pp)[stage]]
    for layer in target.layers:
        if layer.state_bytes(inputs.state_dtype, inputs.tp):
            raise InvalidArgumentError(
                f"--engine trtllm models the V1 KV cache manager; {target.name} has "
                f"{layer.kind} layers, which TensorRT-LLM runs on its V2 manager: plan it with "
                "--engine kvbudget or vllm"
            )
    out = [_manager("target", tuple(own), inputs)]
    if stage != last:
        return out
    if inputs.spec == "mtp":
        out.append(_manager("draft", target.mtp_layers[:1], inputs))  # MTP one-model: 1 layer
    elif inputs.draft is not None:
        out.append(_manager("draft", inputs.draft.layers, inputs))
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


def _manager(role: str, layers: tuple[Layer, ...], inputs: EngineInputs) -> Manager:
    windows: dict[int, int] = {}
    for layer in layers:
        per_token = layer.bytes_per_token(inputs.kv_dtype, inputs.tp)
        if not per_token:
            continue
        window = _window(layer) or FULL
        if window >= inputs.max_seq_len:
            window = FULL
        windows[window] = windows.get(window, 0) + per_token
    return Manager(role=role, bytes_per_token=sum(windows.values()), windows=windows)


def attention_windows(inputs: EngineInputs) -> list[int] | None:
    """``max_attention_window``: the shortest repeating per-layer pattern, or None.

    Full-attention layers get ``max_seq_len + 1024``, which TensorRT-LLM clamps to its
    internal max_seq_len (the model length plus draft tokens).
    """
    big = inputs.max_seq_len + 1024
    per_layer = []
    for layer in inputs.target.layers:
        if not layer.bytes_per_token(inputs.kv_dtype, inputs.tp):
            continue
        w = _window(layer)
        per_layer.append(w if w is not None and w < inputs.max_seq_len else big)
    if all(w == big for w in per_layer):
        return None
    for period in range(1, len(per_layer) + 1):
        if all(per_layer[i] == per_layer[i % period] for i in range(len(per_layer))):
            return per_layer[:period]
    return per_layer


def _per_seq_tokens(inputs: EngineInputs) -> int:
    """KV tokens one sequence of max_seq_len holds: draft tokens plus the extra K - 1."""
    k = inputs.lookahead_tokens
    extra = k - 1 if inputs.spec in ("eagle3", "mtp") and k else 0
    return inputs.max_seq_len + k + extra


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
    inputs: EngineInputs,
    mgrs: list[Manager],
    *,
    max_tokens: int,
    max_gpu_total_bytes: int,
    host_cache_size: int,
    shares_text: str | None,
) -> TrtllmPools:
    """Forward: the blocks V1 creates from the emitted settings (budget not binding)."""
    tpb = inputs.tokens_per_block
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


def _full_window_tokens(inputs: EngineInputs, target: Manager, part: int) -> int:
    """Full-length tokens of the target when its sliding pools hold what sequences need.

    Each sequence of max_seq_len takes ``ceil(per_seq / block)`` full-length blocks and,
    per sliding window ``w``, ``ceil((w + draft tokens) / block) + 1`` blocks (a window can
    straddle one more block than it fills); the sliding pools are sized for as many
    sequences as the full pool then holds, at most ``max_batch_size``.
    """
    tpb = inputs.tokens_per_block
    lookahead = _per_seq_tokens(inputs) - inputs.max_seq_len
    window_bytes = sum(
        (cdiv(w + lookahead, tpb) + 1) * tpb * b for w, b in target.windows.items() if w != FULL
    )
    full_seq_bytes = cdiv(_per_seq_tokens(inputs), tpb) * tpb * target.windows[FULL]
    sequences = min(inputs.max_batch_size, part // (full_seq_bytes + window_bytes))
    if sequences == 0:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's target manager gets {part} B per rank; one sequence of "
            f"{inputs.max_seq_len} tokens needs {full_seq_bytes + window_bytes} B over its "
            "windows: raise --kv-budget or lower --max-seq-len"
        )
    return (part - sequences * window_bytes) // target.windows[FULL] // tpb * tpb


def build(plan: Plan, inputs: EngineInputs) -> EnginePlan:
    """TensorRT-LLM's plan: the V1 managers' blocks and the YAML that makes them."""
    facts = ENGINES["trtllm"]
    check_block(plan, facts)
    dtype = kv_dtype_name(plan, facts)
    tpb = inputs.tokens_per_block
    mgrs = managers(inputs)
    slope = sum(m.bytes_per_token for m in mgrs)
    target = mgrs[0]
    budget = inputs.gpu_kv_bytes
    # every PP rank sizes its managers from its own layers and the ranks agree on the
    # smallest count: max_tokens is the binding stage's
    stage_slopes = [sum(m.bytes_per_token for m in managers(inputs, s)) for s in range(inputs.pp)]
    tokens = min(budget // b // tpb * tpb for b in stage_slopes if b)
    if tokens < tpb:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's managers need {slope} B per token; {budget} B per rank holds "
            "no block: raise --kv-budget"
        )
    shares_text = None
    full_tokens = tokens
    if len(target.windows) > 1:
        # the target's share of the budget (split by bytes per token) between its windows:
        # the full-length window gets what the draft manager's tokens need (or, with no
        # draft, all but what the sliding windows need); sliding windows the rest
        # the target's share of max_gpu_total_bytes = slope x tokens after the draft's
        # (split by bytes per token): exactly tokens x the target's bytes per token
        part = tokens * target.bytes_per_token
        sliding = {w: b for w, b in target.windows.items() if w != FULL}
        if len(mgrs) == 1:
            full_tokens = _full_window_tokens(inputs, target, part)
        full_bytes = full_tokens * target.windows[FULL]
        rest = part - full_bytes
        total_sliding = sum(sliding.values())
        ordered = sorted(target.windows, key=lambda w: (w == FULL, w))
        values = [
            (rest * sliding[w] / total_sliding) / part if w != FULL else full_bytes / part
            for w in ordered
        ]
        shares_text = _shares_text(values)
    host_bytes = inputs.host_bytes
    pools = allocate(
        inputs,
        mgrs,
        max_tokens=tokens,
        max_gpu_total_bytes=slope * tokens,
        host_cache_size=host_bytes,
        shares_text=shares_text,
    )
    # capacity is the full-length pool of every manager (or its only window's)
    growing = [pools.blocks[m.role][FULL if FULL in m.windows else min(m.windows)] for m in mgrs]
    gpu_tokens = min(primary for primary, _ in growing) * tpb
    host_tokens = min(secondary for _, secondary in growing) * tpb
    per_seq_blocks = cdiv(_per_seq_tokens(inputs), tpb)
    sequences = min(gpu_tokens // tpb // per_seq_blocks, inputs.max_batch_size)
    windows = attention_windows(inputs)
    settings: dict[str, Any] = {
        "tensor_parallel_size": inputs.launch_tp or inputs.tp,
        "pipeline_parallel_size": inputs.pp,
        "max_batch_size": inputs.max_batch_size,
        "max_seq_len": inputs.max_seq_len,
        "max_num_tokens": inputs.max_num_batched_tokens,
        facts.token_knob: tokens,
        facts.gpu_knob: pools.max_gpu_total_bytes,
        facts.host_knob: host_bytes,
        facts.block_knob: tpb,
        facts.kv_dtype_knob: dtype,
        "kv_cache_config.enable_block_reuse": inputs.enable_prefix_caching,
        "kv_cache_config.use_kv_cache_manager_v2": False,
    }
    if inputs.dp_attention:
        settings["enable_attention_dp"] = True
    if inputs.ep > 1:
        settings["moe_expert_parallel_size"] = inputs.ep
    if windows is not None:
        settings["kv_cache_config.max_attention_window"] = windows
    if shares_text is not None:
        settings["env.TRTLLM_WINDOW_SIZE_SHARES"] = shares_text
    if plan.spec in facts.spec_names:
        settings[facts.spec_knob] = facts.spec_names[plan.spec]
        settings[f"speculative_config.{facts.draft_len_knob}"] = inputs.max_draft_len
        if plan.draft_source:
            settings[f"speculative_config.{facts.draft_model_knob}"] = plan.draft_source
    predicted: dict[str, Any] = {
        "kv_cache_manager": "V1",
        "max_tokens": pools.max_tokens,
        "managers": [
            {
                "role": m.role,
                "bytes_per_token": m.bytes_per_token,
                "windows": [
                    {
                        "window": w if w != FULL else None,
                        "bytes_per_token": m.windows[w],
                        "primary_blocks": pools.blocks[m.role][w][0],
                        "secondary_blocks": pools.blocks[m.role][w][1],
                        "share": None
                        if pools.shares is None or m.role != "target"
                        else pools.shares[w],
                    }
                    for w in sorted(m.windows, key=lambda w: (w == FULL, w))
                ],
            }
            for m in mgrs
        ],
        "gpu_tokens": gpu_tokens,
        "host_tokens": host_tokens,
        "blocks_per_sequence": per_seq_blocks,
    }
    log = [f"Number of tokens per block: {tpb}."]
    for m in mgrs:
        per_window = {
            (w if w != FULL else inputs.max_seq_len): pools.blocks[m.role][w]
            for w in sorted(m.windows, key=lambda w: (w == FULL, w))
        }
        log.append(f"[KVCacheManager] blocks_per_window: {per_window}  ({m.role})")
        primary = sum(b[0] * tpb * m.windows[w] for w, b in pools.blocks[m.role].items())
        log.append(
            f"[MemUsageChange] Allocated {primary / GIB:.2f} GiB for max tokens in paged KV "
            f"cache ({sum(b[0] for b in pools.blocks[m.role].values()) * tpb}).  ({m.role})"
        )
    notes = [
        f"# use: trtllm-serve {shlex.quote(plan.target_source)} "
        "--extra_llm_api_options <this file> (newer releases: --config)",
        "# V1 manager (use_kv_cache_manager_v2 auto picks V1 for this model): max_tokens sizes "
        "every manager alike, each at its own bytes per token",
    ]
    if len(mgrs) > 1:
        notes.append(
            "# the draft has its own manager with the same max_tokens; host_cache_size is one "
            "per-rank budget split between them by bytes per token"
        )
    if windows is not None and len(target.windows) > 1:
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
    warnings = []
    if sequences < inputs.max_batch_size:
        warnings.append(
            f"TensorRT-LLM's managers hold {count_of(sequences, 'sequence')} of "
            f"{inputs.max_seq_len} "
            f"tokens at once (max_batch_size {inputs.max_batch_size})"
        )
    return EnginePlan(
        name="trtllm",
        version=VERSION,
        settings=settings,
        predicted=predicted,
        gpu_tokens=gpu_tokens,
        max_concurrency=sequences,
        log=tuple(log),
        notes=tuple(notes + auto_note(plan, facts, dtype)),
        warnings=tuple(warnings),
    )


def render(plan: Plan, engine: EnginePlan) -> str:
    """The YAML of ``engine.settings`` (dotted keys nested), with comments."""
    lines = comment_lines(plan, engine, "TensorRT-LLM")
    sections: dict[str, list[str]] = {}
    for key, value in engine.settings.items():
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
