"""TensorRT-LLM's V1 KV cache managers (PyTorch backend), as its code sizes them, and the
``--extra_llm_api_options`` YAML that realises a plan.

Facts from ``NVIDIA/TensorRT-LLM``: ``tensorrt_llm/_torch/pyexecutor/_util.py`` @ 38198e34
(``KvCacheCreator``), ``_torch/pyexecutor/resource_manager.py`` @ 1fe0b08f (the V1
``KVCacheManager``, ``get_pp_layers``), ``llmapi/llm_args.py`` @ 00043967, and where named
``_torch/pyexecutor/py_executor_creator.py`` @ 000429d5 and ``_torch/model_config.py``
(stored id 54702305068). ``benchmarks/fidelity/trtllm`` runs that code (as transcribed in
``shared/trtllm-src``, SOURCES.md) against these plans.

* **Manager version** (``KvCacheConfig.use_kv_cache_manager_v2``): this module's plan
  sets it false: the V1 ``KVCacheManager`` (hybrid Mamba models need V2). The default
  ``trtllm`` (:func:`plan_auto`) plans the manager "auto" picks for the model class
  (:func:`auto_manager`), through :mod:`kvbudget.engines.trtllm_v2` where that is V2 and
  kvbudget models it; ``trtllm@v1`` is V1 whatever the model, except Gemma-4, which
  TensorRT-LLM runs on V2 whatever the setting (:mod:`kvbudget.engines.trtllm_gemma4`):
  ``trtllm@v1`` refuses it.
* **Block size** (``create_py_executor``; ``ModelConfig.enable_flash_mla``): an MLA model
  whose latent is 576 values wide (``kv_lora_rank + qk_rope_head_dim``: DeepSeek-V3,
  Kimi-K2) runs FlashMLA on an SM 9.0 GPU under the TRTLLM attention backend (the
  default), and ``tokens_per_block`` becomes 64 whatever the config says ("Change
  tokens_per_block to: 64 for using FlashMLA").
* **Managers** (``KvCacheCreator._should_create_separate_draft_kv_cache``,
  ``get_pp_layers``): one-engine EAGLE3, MTP and draft-target each get a separate draft
  manager (MTP: its layers), except under attention DP ("separate draft KV cache is not
  supported"): then EAGLE3/MTP layers join the target manager as its last layers, each
  with the window the ``max_attention_window`` pattern gives its layer index. The
  target's layers are split over PP stages by ``mapping.pp_layers``
  (``torch.tensor_split``: the first ``layers % pp`` stages hold one more); a draft
  model's layers likewise. EAGLE3/MTP layers are the last of the target + draft layers,
  so they sit on the last stage, and every other stage's draft manager keeps one
  placeholder layer ("Don't support empty KV cache for now, provide at least 1 layer").
* **Price** (``get_cache_size_per_token``): the creator prices a manager at its stage's
  ``num_hidden_layers`` share x ``2 x head_dim x kv_heads // tp`` values per layer (the
  latent for MLA): the joined EAGLE3/MTP layers and the placeholder are not priced
  (``_get_draft_cache_cost`` is None off the last stage).
* **Budget** (``configure_kv_cache_capacity``, ``calculate_max_num_blocks``): a user
  ``max_tokens`` T comes back as T; every single-window manager holds ``T // block``
  blocks (``allreduce(MIN)`` over the ranks). ``max_gpu_total_bytes`` becomes
  ``P = min(price x T, max_gpu_total_bytes)`` and sizes only managers with several window
  sizes (VSWA).
* **Windows** (``calculate_max_num_blocks_for_vswa``): with a separate draft, P is split
  by price (``_split_kv_cache_budget_for_draft``); the target's part goes to the windows
  in equal shares unless ``TRTLLM_WINDOW_SIZE_SHARES`` (ascending windows, summing to
  exactly 1.0) says otherwise: ``blocks_w = int(P x share_w / bytes_per_token_w //
  block)``, the smallest over the ranks. V1 stores every layer at full length unless
  ``max_attention_window`` (a per-layer list, repeated cyclically) says otherwise; a
  window longer than its pool's ``blocks x block`` tokens is cut to them, and max_seq_len
  with it (``_validate_and_adjust_attention_windows``). Full windows are the engine's own
  max_seq_len: the model length + 1 (overlap scheduler) + 3K - 1 with a one-engine draft
  of K tokens (``create_py_executor``).
* **Host** (``host_cache_size``, bytes per rank): split between priced managers by price;
  a placeholder stage splits nothing (both managers get it whole); per manager
  ``(host // bytes_per_token) // block`` secondary blocks, per window by the shares.
* **Speculation** (``_torch/speculative/utils.py`` ``get_num_extra_kv_tokens``): every
  one-engine mode (EAGLE3, MTP, draft-target: ``use_one_engine``) holds
  ``max_draft_len - 1`` extra KV tokens per sequence besides its ``max_draft_len`` draft
  tokens.
* **Disk** (``disk_cache_size``): V1 has no disk tier (the ``KVCacheManager`` reads no
  disk budget; only ``KVCacheManagerV2`` builds a ``DiskCacheTierConfig``): a
  ``--disk-budget`` is warned about and emits nothing (:func:`disk_warnings`).
* **KV dtype** (``TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype``): "auto"
  keeps a checkpoint's ``kv_cache_quant_algo``, fp8 sets FP8, other names are only
  warned about: a checkpoint that quantizes its KV cache runs it so.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvbudget.engines import trtllm_gemma4
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import (
    GIB,
    auto_note,
    cdiv,
    check_block,
    comment_lines,
    engine_capacity,
    kv_dtype_name,
    refuse_unmodelled,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer, MLALayer
from kvbudget.plan_types import Capacity, EnginePlan, EngineSource, Plan, PoolPlan, PoolRole
from kvbudget.units import count_of, format_bytes
from kvbudget.weights.quantization import checkpoint_kv_dtype

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

VERSION = "main@38198e34"  # _util.py @ 38198e34, the newest commit of the sizing path read
FULL = 0  # window key of full-attention layers
FLASH_MLA_BLOCK = 64  # py_executor_creator.py: tokens_per_block = 64 for FlashMLA
FLASH_MLA_WIDTH = 576  # model_config.py enable_flash_mla: kv_lora_rank + qk_rope_head_dim
ONE_ENGINE = ("eagle3", "mtp", "draft-target")  # SpeculativeDecodingMode.use_one_engine


FILES = (
    "tensorrt_llm/_torch/pyexecutor/_util.py",
    "tensorrt_llm/_torch/pyexecutor/resource_manager.py",
    "tensorrt_llm/llmapi/llm_args.py",
)


@dataclass(frozen=True, kw_only=True)
class TrtllmRelease:
    """What differs between the TensorRT-LLM versions kvbudget models (the rest of this
    module holds for each of them).

    * ``host_split``: ``KvCacheCreator.build_managers`` splits ``host_cache_size`` between
      the target and a separate draft manager by price (PR #14373 "Fix KV cache host
      splitting logic", merged 2026-06-12 as c3238810f2). False: V1 builds each manager
      with the whole value, as the PR's regression test ``test_host_budget_not_doubled``
      puts it, "both managers used to receive the full host_cache_size" (PR #13130 had
      split it for V2 only).
    """

    version: str
    ref: str
    host_split: bool


RELEASE = TrtllmRelease(
    version=VERSION, ref="38198e34582cf777ecc72062f477987284ba9999", host_split=True
)


# Compute capability (major, minor) of the GPU presets (data/gpus.csv has no such column):
# NVIDIA's CUDA GPU list, https://developer.nvidia.com/cuda-gpus. FlashMLA needs (9, 0).
_SM_BY_NAME: tuple[tuple[str, tuple[int, int]], ...] = (
    ("H100", (9, 0)), ("H200", (9, 0)), ("GH200", (9, 0)), ("H20", (9, 0)),
    ("B200", (10, 0)), ("GB200", (10, 0)), ("B300", (10, 3)), ("GB300", (10, 3)),
    ("A100", (8, 0)), ("A10", (8, 6)), ("A10G", (8, 6)), ("A40", (8, 6)), ("RTX A6000", (8, 6)),
    ("RTX 3060", (8, 6)), ("RTX 3090", (8, 6)), ("L40S", (8, 9)), ("L4", (8, 9)),
    ("L20", (8, 9)), ("RTX 4090", (8, 9)), ("RTX 6000 Ada", (8, 9)), ("RTX 5090", (12, 0)),
    ("RTX 5060", (12, 0)), ("RTX PRO 6000", (12, 0)), ("GB10", (12, 1)),
)  # fmt: skip
DEFAULT_SM = (9, 0)  # the default GPU preset, H200


def sm_version(d: Deployment) -> tuple[int, int] | None:
    """The GPU's compute capability, or None when the GPU is not a known NVIDIA part
    (``--gpu-memory`` alone, or an AMD preset)."""
    name = d.gpu_rule.gpu_name or ""
    words = name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    # the longest matching name wins (GH200 before H200, A100 before A10)
    matches = [(len(k), sm) for k, sm in _SM_BY_NAME if words.startswith(k + " ") or words == k]
    return max(matches)[1] if matches else None


def flash_mla(d: Deployment) -> bool:
    """True when TensorRT-LLM runs the target's MLA with FlashMLA: a 576-wide latent on
    SM 9.0 (an unknown GPU is taken as the default H200's SM 9.0)."""
    if (sm_version(d) or DEFAULT_SM) != (9, 0):
        return False
    return any(
        isinstance(x, MLALayer) and x.kv_lora_rank + x.qk_rope_head_dim == FLASH_MLA_WIDTH
        for x in d.target.layers
    )


def block_tokens(d: Deployment) -> int:
    """Tokens per block every manager uses: 64 under FlashMLA, else the setting."""
    return FLASH_MLA_BLOCK if flash_mla(d) else d.tokens_per_block


def engine_max_seq_len(d: Deployment) -> int:
    """The max_seq_len ``create_py_executor`` hands the managers: the model length + 1
    with the overlap scheduler (on for every mode but ngram) + K under overlap, + the
    extra KV tokens + K (``max_total_draft_tokens``)."""
    k = d.lookahead_tokens
    if d.spec.name == "ngram":
        return d.max_seq_len + k  # NGram: no overlap scheduler
    if not k:
        return d.max_seq_len + 1
    return d.max_seq_len + 1 + k + (k - 1) + k


def per_seq_tokens(d: Deployment) -> int:
    """KV tokens one request of max_seq_len holds: its draft tokens and, with a
    one-engine draft, the K - 1 extra (``get_request_kv_block_budget``)."""
    k = d.lookahead_tokens
    extra = k - 1 if d.spec.name in ONE_ENGINE and k else 0
    return d.max_seq_len + k + extra


def separate_draft(d: Deployment) -> bool:
    """The draft has its own manager: one-engine speculation without attention DP."""
    return d.spec.name in ONE_ENGINE and not d.parallel.dp_attention


def pp_layers(num_layers: int, pp: int, stage: int) -> range:
    """Layer indices of PP stage ``stage`` (``Mapping.pp_layers``, ``torch.tensor_split``:
    the first ``num_layers % pp`` stages hold one more)."""
    size, extra = divmod(num_layers, pp)
    start = stage * size + min(stage, extra)
    return range(start, start + size + (1 if stage < extra else 0))


@dataclass(frozen=True, kw_only=True)
class Manager:
    """One V1 KV cache manager on one PP stage.

    ``windows``: window (0: full) -> bytes per token of its layers; ``price``: the bytes
    per token the creator prices it at (``get_cache_size_per_token``), None when it is
    not priced; ``placeholder``: the one-layer draft manager of a stage without draft
    layers.
    """

    role: str
    num_layers: int
    bytes_per_token: int
    windows: dict[int, int]
    price: int | None
    placeholder: bool = False


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


def _price(layer: Layer, d: Deployment) -> int:
    """A layer's bytes per token as ``get_cache_size_per_token`` counts them: the latent
    for MLA, else ``2 x (head_dim x kv_heads // tp)`` values (not ceil per rank)."""
    dtype, tp = d.kv_dtype_value, d.parallel.attention_tp
    if isinstance(layer, AttentionLayer):
        return 2 * dtype.bytes_for(layer.head_dim * layer.num_kv_heads // tp)
    return layer.bytes_per_token(dtype, tp)


def _manager(
    role: str, layers: list[tuple[Layer, int | None]], d: Deployment, price: int | None
) -> Manager:
    """A manager of ``layers``, each with its window in the manager (None: full)."""
    windows: dict[int, int] = {}
    for layer, w in layers:
        per_token = layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp)
        if not per_token:
            continue
        window = w if w is not None and w < d.max_seq_len else FULL
        windows[window] = windows.get(window, 0) + per_token
    return Manager(
        role=role,
        num_layers=len(layers),
        bytes_per_token=sum(windows.values()),
        windows=windows,
        price=price,
        placeholder=False,
    )


def _spec_layers(d: Deployment) -> tuple[Layer, ...]:
    """The draft's layers: the EAGLE3 head's, the MTP layers (one for
    ``MTP_EAGLE_ONE_MODEL``, every one for vanilla MTP), or the draft model's."""
    if d.spec.name == "mtp":
        return d.target.mtp_layers
    if d.spec.name in ONE_ENGINE and d.draft is not None:
        return d.draft.layers
    return ()


def _joined(d: Deployment, layer: Layer) -> Layer:
    """A draft layer stored in the target manager: the target's head_dim for every layer
    (V1 takes one ``head_dim``; ``_build_per_layer_num_kv_heads`` keeps the draft's heads)."""
    first = next((x for x in d.target.layers if isinstance(x, AttentionLayer)), None)
    if isinstance(layer, AttentionLayer) and first is not None:
        return replace(layer, head_dim=first.head_dim, sliding_window=None, chunked=False)
    return layer


def stage_managers(d: Deployment, stage: int) -> tuple[Manager, ...]:
    """The managers of PP stage ``stage``: the target's (under attention DP with the
    EAGLE3/MTP layers at its end on the last stage) and, with a separate draft, the
    draft's (one placeholder layer on a stage that holds no draft layer)."""
    pp, last = d.parallel.pp, stage == d.parallel.pp - 1
    target = d.target
    own = [
        (target.layers[i], _window(target.layers[i]))
        for i in pp_layers(len(target.layers), pp, stage)
    ]
    price = sum(_price(x, d) for x, _ in own)
    spec = _spec_layers(d)
    if not separate_draft(d):
        if last and d.spec.name in ("eagle3", "mtp"):  # attention DP: joined at the end
            pattern = attention_windows(d)
            n = len(target.layers)
            own += [
                (_joined(d, x), pattern[(n + j) % len(pattern)] if pattern else None)
                for j, x in enumerate(spec)
            ]
        return (_manager("target", own, d, price),)
    return (_manager("target", own, d, price), _draft_manager(d, stage, spec))


def _draft_manager(d: Deployment, stage: int, spec: tuple[Layer, ...]) -> Manager:
    """The draft manager of ``stage``: a draft model's share of its layers; EAGLE3/MTP
    layers on the last stage. Either with no layer keeps a placeholder of one."""
    pp, last = d.parallel.pp, stage == d.parallel.pp - 1
    window = _draft_window(d)
    if d.spec.name == "draft-target":
        mine = [spec[i] for i in pp_layers(len(spec), pp, stage)]
        priced = True  # priced at max(its layers, 1) (_resolve_num_attention_layers)
    else:
        # the draft layers are the last of target + draft layers (get_pp_layers' mask)
        n = len(d.target.layers)
        mine = [spec[i - n] for i in pp_layers(n + len(spec), pp, stage) if i >= n]
        priced = last
    placeholder = not mine
    layers = mine or [spec[0]]
    price = sum(_price(x, d) for x in layers) if priced else None
    m = _manager("draft", [(x, window) for x in layers], d, price)
    return replace(m, placeholder=placeholder)


def _draft_window(d: Deployment) -> int | None:
    """The draft manager's window (``_derive_draft_max_attention_window``): the draft
    config's own when it defines one; else the target's ``max_attention_window`` when it
    is a single size; else full."""
    config = (d.draft or d.target).config
    own = [_window(x) for x in _spec_layers(d)]
    if any(
        config.get(k) is not None for k in ("use_sliding_window", "sliding_window", "layer_types")
    ):
        windows = {w for w in own if w is not None and w < d.max_seq_len}
        if len(windows) > 1 or (windows and None in own):
            raise InvalidArgumentError(
                "--engine trtllm is modelled with a draft of one window size; this draft "
                "mixes window sizes: plan it with --engine kvbudget"
            )
        return min(windows) if windows else None
    pattern = attention_windows(d)
    if pattern is not None and len(set(pattern)) == 1 and pattern[0] < d.max_seq_len:
        return pattern[0]
    return None


def managers(d: Deployment, stage: int | None = None) -> tuple[Manager, ...]:
    """The managers of PP stage ``stage`` (default: the last, where draft layers live)."""
    trtllm_gemma4.refuse_v1(d)  # TensorRT-LLM builds Gemma-4 no V1 manager
    for layer in d.target.layers:
        if layer.state_bytes(d.state_dtype_value, d.parallel.attention_tp):
            raise InvalidArgumentError(
                f"--engine trtllm models the V1 KV cache manager; {d.target.name} has "
                f"{layer.kind} layers, which TensorRT-LLM runs on its V2 manager: plan it with "
                "--engine kvbudget or vllm"
            )
    return stage_managers(d, d.parallel.pp - 1 if stage is None else stage)


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


def _shares_text(shares: list[float]) -> str:
    """Shares with 6 decimals whose float sum is exactly 1.0, the last taking the rest.

    The first (sliding windows) are rounded up, so that their pools hold at least the
    bytes they were sized for; the last (the full-length window) gives them the rest."""
    head = [round(math.ceil(round(s * 1e6, 3)) / 1e6, 6) for s in shares[:-1]]
    last = round(1.0 - sum(head), 6)
    for _ in range(20):
        if sum([*head, last]) == 1.0:
            break
        last = round(last + 1e-6, 6) if sum([*head, last]) < 1.0 else round(last - 1e-6, 6)
    return ",".join(f"{s:.6f}" for s in [*head, last])


def _ordered(m: Manager) -> list[int]:
    """A manager's windows, sliding ones first, full length last (ascending, as
    ``calculate_max_num_blocks_for_vswa`` sorts the window sizes)."""
    return sorted(m.windows, key=lambda w: (w == FULL, w))


@dataclass(frozen=True, kw_only=True)
class ManagerPools:
    """What one manager of one stage allocates.

    ``gpu_bytes`` / ``host_bytes``: the ``max_gpu_total_bytes`` / ``host_cache_size`` it
    was handed; ``blocks``: window -> (primary, secondary) blocks; ``keys``: window ->
    TensorRT-LLM's window size for it (its ``blocks_per_window`` key).
    """

    manager: Manager
    gpu_bytes: int
    host_bytes: int
    blocks: dict[int, tuple[int, int]]
    keys: dict[int, int]


@dataclass(frozen=True, kw_only=True)
class TrtllmPools:
    """Every stage's managers' pools, as V1 allocates them from the emitted settings."""

    max_tokens: int
    max_gpu_total_bytes: int
    shares: dict[int, float] | None
    stages: tuple[tuple[ManagerPools, ...], ...]

    @property
    def last(self) -> tuple[ManagerPools, ...]:
        """The reported (last) stage's managers."""
        return self.stages[-1]

    def blocks(self, role: str) -> dict[int, tuple[int, int]]:
        """The reported stage's blocks of ``role`` per window."""
        return next(p.blocks for p in self.last if p.manager.role == role)


def _budgets(
    mgrs: tuple[Manager, ...], gpu: int, host: int, split_host: bool = True
) -> list[tuple[int, int]]:
    """(``max_gpu_total_bytes``, ``host_cache_size``) each manager is handed: split by
    price when the draft is priced (``_split_kv_cache_budget_for_draft``, draft share
    ``budget x draft // (target + draft)``; the host only where ``split_host``), else the
    whole of both to each."""
    if len(mgrs) == 1:
        return [(gpu, host)]
    target, draft = mgrs[0].price or 0, mgrs[1].price
    if draft is None or not target + draft:
        return [(gpu, host), (gpu, host)]
    dg = gpu * draft // (target + draft)
    th, dh = (host - host * draft // (target + draft), host * draft // (target + draft))
    if not split_host:
        th, dh = host, host
    vswa = any(len(m.windows) > 1 for m in mgrs)
    if not vswa:  # the GPU budget is split only where a manager reads it (VSWA)
        return [(gpu, th), (gpu, dh)]
    return [(gpu - dg, th), (dg, dh)]


def _stage_blocks(
    d: Deployment, mgrs: tuple[Manager, ...], tokens: int, gpu: int, host: int,
    shares: list[float] | None, release: TrtllmRelease,
) -> list[tuple[int, int, dict[int, tuple[int, int]]]]:  # fmt: skip
    """Per manager: its budgets and blocks per window, before the ranks' MIN."""
    tpb = block_tokens(d)
    out = []
    for m, (g, h) in zip(mgrs, _budgets(mgrs, gpu, host, release.host_split), strict=True):
        if len(m.windows) > 1:
            ordered = _ordered(m)
            values = shares or [1 / len(ordered)] * len(ordered)
            blocks = {
                w: (int(g * s / m.windows[w] // tpb), int(h * s / m.windows[w] // tpb))
                for w, s in zip(ordered, values, strict=True)
            }
        else:
            (w,) = m.windows
            blocks = {w: (tokens // tpb, (h // m.bytes_per_token) // tpb)}
        out.append((g, h, blocks))
    return out


def allocate(
    d: Deployment,
    stages: tuple[tuple[Manager, ...], ...],
    *,
    max_tokens: int,
    max_gpu_total_bytes: int,
    host_cache_size: int,
    shares_text: str | None,
    release: TrtllmRelease = RELEASE,
) -> TrtllmPools:
    """Forward: every stage's pools from the emitted settings, as V1 allocates them.

    Per stage, ``max_gpu_total_bytes`` becomes ``min(price x T, setting)``; the ranks'
    ``allreduce(MIN)`` then makes every stage hold the smallest count of each window of
    a manager with several windows (a single-window manager holds ``T // block`` on every
    stage already); windows longer than their pools are cut to them.
    """
    shares = [float(x) for x in shares_text.split(",")] if shares_text else None
    raw = []
    for mgrs in stages:
        price = sum(m.price or 0 for m in mgrs)
        raw.append(
            _stage_blocks(
                d,
                mgrs,
                max_tokens,
                min(price * max_tokens, max_gpu_total_bytes),
                host_cache_size,
                shares,
                release,
            )
        )
    out = []
    for mgrs, per_stage in zip(stages, raw, strict=True):
        pools = []
        for i, (m, (g, h, blocks)) in enumerate(zip(mgrs, per_stage, strict=True)):
            if len(m.windows) > 1:  # VSWA: every window's counts reduced over the ranks
                blocks = {
                    w: (min(s[i][2][w][0] for s in raw), min(s[i][2][w][1] for s in raw))
                    for w in blocks
                }
            pools.append(
                ManagerPools(
                    manager=m, gpu_bytes=g, host_bytes=h, blocks=blocks, keys=_keys(d, blocks)
                )
            )
        out.append(tuple(pools))
    ordered = _ordered(stages[-1][0])
    return TrtllmPools(
        max_tokens=max_tokens,
        max_gpu_total_bytes=max_gpu_total_bytes,
        shares=dict(zip(ordered, shares, strict=True)) if shares else None,
        stages=tuple(out),
    )


def _keys(d: Deployment, blocks: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Each window's size in TensorRT-LLM: the window (full: the engine's max_seq_len),
    cut to its pool's ``blocks x block`` tokens when longer
    (``_validate_and_adjust_attention_windows``)."""
    seq, tpb = engine_max_seq_len(d), block_tokens(d)
    keys = {}
    for w, (primary, _) in blocks.items():
        if primary == 0:
            raise InfeasibleBudgetError(
                f"TensorRT-LLM's pool for window {w or 'full'} gets no block (it asserts "
                "'Impossible to fit in any sequence in kvCache'): raise --kv-budget"
            )
        keys[w] = min(min(w or seq, seq), primary * tpb)
    return keys


def _full_window_tokens(d: Deployment, target: Manager, part: int) -> int:
    """Full-length tokens of the target when its sliding pools hold what sequences need.

    Each sequence of max_seq_len takes ``ceil(per_seq / block)`` full-length blocks and,
    per sliding window ``w``, ``ceil((w + draft tokens) / block) + 1`` blocks (a window can
    straddle one more block than it fills); the sliding pools are sized for as many
    sequences as the full pool then holds, at most ``max_batch_size``.
    """
    tpb = block_tokens(d)
    lookahead = per_seq_tokens(d) - d.max_seq_len
    window_bytes = sum(
        (cdiv(w + lookahead, tpb) + 1) * tpb * b for w, b in target.windows.items() if w != FULL
    )
    full_seq_bytes = cdiv(per_seq_tokens(d), tpb) * tpb * target.windows[FULL]
    sequences = min(d.max_batch_size, part // (full_seq_bytes + window_bytes))
    if sequences == 0:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's target manager gets {part} B per rank; one sequence of "
            f"{d.max_seq_len} tokens needs {full_seq_bytes + window_bytes} B over its "
            "windows: raise --kv-budget or lower --max-seq-len"
        )
    return (part - sequences * window_bytes) // target.windows[FULL] // tpb * tpb


def _choose(d: Deployment, stages: tuple[tuple[Manager, ...], ...], budget: int) -> tuple[int, int]:
    """``max_tokens`` (whole blocks every stage's managers hold within ``budget``, the
    placeholder included) and ``max_gpu_total_bytes`` (the largest stage's bytes for it)."""
    tpb = block_tokens(d)
    slopes = [sum(m.bytes_per_token for m in mgrs) for mgrs in stages]
    tokens = min(budget // b // tpb * tpb for b in slopes if b)
    if tokens < tpb:
        raise InfeasibleBudgetError(
            f"TensorRT-LLM's managers need {max(slopes)} B per token; {budget} B per rank "
            "holds no block: raise --kv-budget"
        )
    return _choose_with_windows(d, stages, budget) or (tokens, max(slopes) * tokens)


def _choose_with_windows(
    d: Deployment, stages: tuple[tuple[Manager, ...], ...], budget: int
) -> tuple[int, int] | None:
    """``max_tokens`` and ``max_gpu_total_bytes`` for one stage whose target has
    sliding windows beside its full-length ones and a separate full-length draft: the
    draft holds ``max_tokens // block`` blocks whatever its split, so the budget is the
    draft's tokens + the target's full-length tokens + what the sliding windows of the
    sequences that fit need (not both managers' full-length price, which gives the
    windows bytes they never use). ``max_gpu_total_bytes`` P is the smallest whose
    target part ``P - P x draft // (target + draft)`` covers that; None where this does
    not apply (the price split then sizes both)."""
    if len(stages) != 1 or len(stages[0]) != 2:
        return None
    target, draft = stages[0]
    if FULL not in target.windows or len(target.windows) < 2 or set(draft.windows) != {FULL}:
        return None
    t, dp = target.price or 0, draft.price
    if dp is None or not t:
        return None
    tpb, f, db = block_tokens(d), target.windows[FULL], draft.bytes_per_token
    lookahead = per_seq_tokens(d) - d.max_seq_len
    window_bytes = sum(
        (cdiv(w + lookahead, tpb) + 1) * tpb * b for w, b in target.windows.items() if w != FULL
    )
    seq_blocks = cdiv(per_seq_tokens(d), tpb) * tpb
    sequences = min(d.max_batch_size, budget // (seq_blocks * (f + db) + window_bytes))
    if sequences == 0:
        return None
    tokens = (budget - sequences * window_bytes) // (f + db) // tpb * tpb
    while tokens >= tpb:
        need = tokens * f + sequences * window_bytes
        gpu = need * (t + dp) // t
        while gpu - gpu * dp // (t + dp) < need:
            gpu += 1
        if (t + dp) * tokens < gpu:  # the creator would cap P at the price of the tokens
            return None
        if gpu - gpu * dp // (t + dp) + tokens * db <= budget:
            return tokens, gpu
        tokens -= tpb
    return None


def plan(d: Deployment, ledger: Ledger, release: TrtllmRelease = RELEASE) -> EnginePlan:
    """``release``'s plan: the V1 managers' blocks and the YAML that makes them."""
    facts = ENGINES["trtllm"]
    check_block(d.tokens_per_block, facts)
    dtype = kv_dtype_name(d.kv_dtype, facts)
    managers(d)  # refuses what V1 does not run
    stages = tuple(stage_managers(d, s) for s in range(d.parallel.pp))
    tokens, gpu_total = _choose(d, stages, ledger.min_stage_gpu_bytes)
    shares_text = _window_shares(d, stages[-1], tokens, gpu_total)
    host = host_setting(d, ledger.host_bytes, release)
    pools = allocate(
        d,
        stages,
        max_tokens=tokens,
        max_gpu_total_bytes=gpu_total,
        host_cache_size=host,
        shares_text=shares_text,
        release=release,
    )
    capacity = _capacity(d, pools)
    notes = _notes(d, pools, shares_text, release)
    warnings = _warnings(d, pools, capacity, ledger.host_bytes) + draft_revision_warnings(d)
    warnings += _host_warnings(ledger.host_bytes, host, release) + disk_warnings(d)
    return EnginePlan(
        name="trtllm",
        version=release.version,
        source=source(release),
        pools=_pools(d, pools),
        capacity=capacity,
        settings=_settings(d, host, dtype, pools, shares_text),
        log=_log(d, pools),
        notes=tuple(notes + auto_note(d.kv_dtype, facts, dtype)),
        warnings=tuple(warnings),
        detail={
            "kv_cache_manager": "V1",
            "manager_class": "KVCacheManager",
            "max_tokens": pools.max_tokens,
            "tokens_per_block": block_tokens(d),
            "flash_mla": flash_mla(d),
            "engine_max_seq_len": engine_max_seq_len(d),
            "managers": [_manager_detail(p, pools) for p in pools.last],
            "stages": [
                {"pp_stage": s, "managers": [_manager_detail(p, pools) for p in stage]}
                for s, stage in enumerate(pools.stages)
            ],
            "host_pinned_bytes": [sum(p.host_bytes for p in st) for st in pools.stages],
            "gpu_tokens": capacity.tokens,
            "host_tokens": capacity.host_tokens,
            "blocks_per_sequence": cdiv(per_seq_tokens(d), block_tokens(d)),
        },
    )


def host_setting(d: Deployment, host: int, release: TrtllmRelease) -> int:
    """The ``host_cache_size`` to emit for ``host`` host bytes per rank: ``host`` itself;
    half of it where ``release`` hands a separate draft manager the whole value too, so
    that target and draft pin ``host`` together."""
    if release.host_split or not separate_draft(d):
        return host
    return host // 2


def _host_warnings(host: int, emitted: int, release: TrtllmRelease) -> list[str]:
    """Why the emitted host_cache_size is not the plan's host budget."""
    if emitted == host:
        return []
    return [
        f"TensorRT-LLM {release.version} builds the target and the draft manager each with "
        f"the whole host_cache_size (PR #14373 split it later): host_cache_size {host} would "
        f"pin {2 * host} B of host memory per rank; the plan emits {emitted}, which the two "
        f"pin {2 * emitted} B with"
    ]


def _capacity(d: Deployment, pools: TrtllmPools) -> Capacity:
    """What the reported stage holds: the full-length pool of every manager (or its
    only window's), as many sequences of max_seq_len as fit."""
    tpb = block_tokens(d)
    growing = [
        p.blocks[FULL if FULL in p.manager.windows else min(p.manager.windows)] for p in pools.last
    ]
    gpu_blocks = min(primary for primary, _ in growing)
    host_blocks = min(secondary for _, secondary in growing)
    sequences = min(gpu_blocks // cdiv(per_seq_tokens(d), tpb), d.max_batch_size)
    lookahead = per_seq_tokens(d) - d.max_seq_len
    for p in pools.last:  # a sliding window takes ceil((w + lookahead) / block) + 1 blocks
        for w in p.manager.windows:
            if w != FULL and len(p.manager.windows) > 1:
                sequences = min(sequences, p.blocks[w][0] // (cdiv(w + lookahead, tpb) + 1))
    return engine_capacity(
        d,
        tokens_per_block=tpb,
        gpu_blocks=gpu_blocks,
        host_blocks=host_blocks,
        max_concurrency=sequences,
    )


def _window_shares(
    d: Deployment, mgrs: tuple[Manager, ...], tokens: int, gpu_total: int
) -> str | None:
    """``TRTLLM_WINDOW_SIZE_SHARES`` for a target with several windows, else None.

    The target's part ``P`` of the budget (its share of ``min(price x tokens,
    max_gpu_total_bytes)``) between its windows: the full-length window gets what the
    draft manager's tokens need (or, with no draft, all but what the sliding windows
    need); sliding windows the rest, by their bytes per token.
    """
    target = mgrs[0]
    if len(target.windows) <= 1:
        return None
    price = sum(m.price or 0 for m in mgrs)
    part = _budgets(mgrs, min(price * tokens, gpu_total), 0)[0][0]
    sliding = {w: b for w, b in target.windows.items() if w != FULL}
    if FULL not in target.windows:
        values = [sliding[w] / sum(sliding.values()) for w in _ordered(target)]
        return _shares_text(values)
    full_tokens = _full_window_tokens(d, target, part) if len(mgrs) == 1 else tokens
    full_bytes = min(full_tokens * target.windows[FULL], part)
    rest = part - full_bytes
    values = [
        (rest * sliding[w] / sum(sliding.values())) / part if w != FULL else full_bytes / part
        for w in _ordered(target)
    ]
    return _shares_text(values)


def _pools(d: Deployment, pools: TrtllmPools) -> tuple[PoolPlan, ...]:
    """The reported stage's pools per manager and window, primary (GPU) and secondary
    (host) blocks."""
    tpb = block_tokens(d)
    out = []
    for p in pools.last:
        m = p.manager
        role: PoolRole = "target" if m.role == "target" else "draft"
        for w in _ordered(m):
            for tier, blocks in zip(("gpu", "host"), p.blocks[w], strict=True):
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
                        name=f"{m.role} manager, window {p.keys[w]}"
                        + (" (full length)" if w == FULL else ""),
                    )
                )
    return tuple(out)


def _manager_detail(p: ManagerPools, pools: TrtllmPools) -> dict[str, Any]:
    """One manager's figures as the fidelity comparison reads them."""
    m = p.manager
    return {
        "role": m.role,
        "num_layers": m.num_layers,
        "placeholder": m.placeholder,
        "bytes_per_token": m.bytes_per_token,
        "price_bytes_per_token": m.price,
        "max_gpu_total_bytes": p.gpu_bytes,
        "host_cache_size": p.host_bytes,
        "windows": [
            {
                "window": w if w != FULL else None,
                "attention_window": p.keys[w],
                "bytes_per_token": m.windows[w],
                "primary_blocks": p.blocks[w][0],
                "secondary_blocks": p.blocks[w][1],
                "share": None
                if pools.shares is None or len(m.windows) == 1
                else pools.shares.get(w),
            }
            for w in _ordered(m)
        ],
    }


def _settings(
    d: Deployment, host: int, dtype: str, pools: TrtllmPools, shares_text: str | None
) -> dict[str, Any]:
    """The YAML keys of the plan (dotted keys nest)."""
    settings = manager_settings(
        d, max_tokens=pools.max_tokens, gpu_total=pools.max_gpu_total_bytes, host=host, dtype=dtype
    )
    if shares_text is not None:
        settings["env.TRTLLM_WINDOW_SIZE_SHARES"] = shares_text
    return settings | model_settings(d)


def manager_settings(
    d: Deployment, *, max_tokens: int | None, gpu_total: int, host: int, dtype: str
) -> dict[str, Any]:
    """The YAML keys V1 and V2 share: the layout, the batch and sequence limits, the KV
    cache's budget (``max_tokens`` for V1, None for V2, which takes bytes only), host
    tier, block size, dtype, reuse and manager, attention DP, EP and the windows."""
    facts = ENGINES["trtllm"]
    layout = d.parallel
    settings: dict[str, Any] = {
        "tensor_parallel_size": layout.tp,
        "pipeline_parallel_size": layout.pp,
        "max_batch_size": d.max_batch_size,
        "max_seq_len": d.max_seq_len,
        "max_num_tokens": d.max_num_batched_tokens,
    }
    if max_tokens is not None:
        settings[facts.token_knob] = max_tokens
    settings |= {
        facts.gpu_knob: gpu_total,
        facts.host_knob: host,
        facts.block_knob: block_tokens(d),
        facts.kv_dtype_knob: dtype,
        "kv_cache_config.enable_block_reuse": d.enable_prefix_caching,
        "kv_cache_config.use_kv_cache_manager_v2": max_tokens is None,
    }
    if layout.dp_attention:
        settings["enable_attention_dp"] = True
    if layout.ep > 1:
        settings["moe_expert_parallel_size"] = layout.ep
    windows = attention_windows(d)
    if windows is not None:
        settings["kv_cache_config.max_attention_window"] = windows
    return settings


def disk_warnings(d: Deployment) -> list[str]:
    """V1 has no disk tier: the V1 ``KVCacheManager`` (resource_manager.py) reads no
    ``disk_cache_size``; only ``KVCacheManagerV2.__init__`` (kv_cache_manager_v2.py @
    38198e34) builds a ``DiskCacheTierConfig``. TensorRT-LLM starts and ignores the key,
    so the plan emits none and says so."""
    if d.disk_bytes <= 0:
        return []
    return [
        f"TensorRT-LLM's V1 manager has no disk tier (only the V2 manager reads "
        f"disk_cache_size): the {format_bytes(d.disk_bytes)} per rank of --disk-budget hold "
        "nothing and "
        "no disk_cache_size is emitted; plan --engine trtllm@v2 for a disk tier"
    ]


def model_settings(d: Deployment) -> dict[str, Any]:
    """The YAML keys naming what is loaded, for V1 and V2 alike: the target's Hub commit
    (``revision``, BaseLlmArgs in tensorrt_llm/llmapi/llm_args.py) and the speculation
    (decoding type, draft length, draft model)."""
    facts = ENGINES["trtllm"]
    settings: dict[str, Any] = {}
    if d.target_revision:
        settings["revision"] = d.target_revision
    spec = d.spec.name
    if spec in facts.spec_names:
        settings[facts.spec_knob] = facts.spec_names[spec]
        settings[f"speculative_config.{facts.draft_len_knob}"] = d.lookahead_tokens
        if d.draft_source:
            settings[f"speculative_config.{facts.draft_model_knob}"] = d.draft_source
    return settings


def draft_revision_warnings(d: Deployment) -> list[str]:
    """A Hub draft's commit, which TensorRT-LLM's speculative_config cannot pin."""
    if not d.draft_revision or d.draft is None:
        return []
    return [
        f"TensorRT-LLM's speculative_config has no revision setting: it loads "
        f"{d.draft.name}'s default branch, not necessarily commit {d.draft_revision} this "
        f"plan was made from; to pin it, download that commit (huggingface-cli download "
        f"{d.draft.name} --revision {d.draft_revision} --local-dir DIR) and plan with "
        "--draft DIR"
    ]


def _log(d: Deployment, pools: TrtllmPools) -> tuple[str, ...]:
    """TensorRT-LLM's start-up lines about the reported stage's managers."""
    tpb = block_tokens(d)
    log = [f"Number of tokens per block: {tpb}."]
    if flash_mla(d):
        log.insert(0, f"Change tokens_per_block to: {tpb} for using FlashMLA")
    for p in pools.last:
        m = p.manager
        per_window = {p.keys[w]: p.blocks[w] for w in _ordered(m)}
        log.append(f"[KVCacheManager] blocks_per_window: {per_window}  ({m.role})")
        primary = sum(b[0] * tpb * m.windows[w] for w, b in p.blocks.items())
        log.append(
            f"[MemUsageChange] Allocated {primary / GIB:.2f} GiB for max tokens in paged KV "
            f"cache ({sum(b[0] for b in p.blocks.values()) * tpb}).  ({m.role})"
        )
    return tuple(log)


def _warnings(d: Deployment, pools: TrtllmPools, capacity: Capacity, host: int) -> list[str]:
    """What the deployer must know: fewer sequences than the batch, windows cut to
    their pools, placeholder draft pools pinning more host memory than ``host``."""
    out = []
    if capacity.max_concurrency < d.max_batch_size:
        out.append(
            f"TensorRT-LLM's managers hold {count_of(capacity.max_concurrency, 'sequence')} "
            f"of {d.max_seq_len} tokens at once (max_batch_size {d.max_batch_size})"
        )
    for s, stage in enumerate(pools.stages[:-1]):
        out += [
            f"PP stage {s}'s ranks pin host_cache_size twice: the target manager and the "
            f"placeholder draft manager each get the whole {p.host_bytes} B (TensorRT-LLM "
            "prices no draft there, so it splits nothing): "
            f"{2 * p.host_bytes} B of host memory per rank"
            for p in stage
            if p.manager.placeholder and sum(q.host_bytes for q in stage) > host
        ]
    for p in pools.last:
        for w, key in p.keys.items():
            if key < min(w or engine_max_seq_len(d), engine_max_seq_len(d)):
                out.append(
                    f"TensorRT-LLM cuts the {p.manager.role} manager's "
                    f"{'full-length' if w == FULL else f'{w}-token'} attention window to "
                    f"{key} tokens (its pool's blocks) and max_seq_len with it: raise "
                    "--kv-budget or lower --max-seq-len"
                )
    return out


def _notes(
    d: Deployment, pools: TrtllmPools, shares_text: str | None, release: TrtllmRelease
) -> list[str]:
    """What each setting does in TensorRT-LLM, for the emitted comments."""
    mgrs = [p.manager for p in pools.last]
    notes = [
        f"# use: trtllm-serve {shlex.quote(d.target_source)} "
        "--extra_llm_api_options <this file> (newer releases: --config)",
        "# V1 manager (use_kv_cache_manager_v2 false): max_tokens sizes every manager "
        "alike, each at its own bytes per token",
    ]
    notes += _block_notes(d)
    if len(mgrs) > 1:
        notes.append(
            "# the draft has its own manager with the same max_tokens; host_cache_size is one "
            + (
                "per-rank budget split between them by bytes per token"
                if release.host_split
                else "value each of them is built with"
            )
        )
    elif d.spec.name in ("eagle3", "mtp"):
        notes.append(
            "# attention DP: no separate draft manager; the draft layers are the target "
            "manager's last layers"
        )
    notes += _stage_notes(d, pools)
    if attention_windows(d) is not None and len(mgrs[0].windows) > 1:
        notes.append(
            "# max_attention_window stores sliding layers in their own pools; the target's "
            "bytes go to the windows by TRTLLM_WINDOW_SIZE_SHARES (set it in the server's "
            "environment: export TRTLLM_WINDOW_SIZE_SHARES=" + str(shares_text) + ")"
        )
        if len(mgrs) > 1:
            notes.append(_draft_window_note(d, pools))
    return notes


def _draft_window_note(d: Deployment, pools: TrtllmPools) -> str:
    """How max_tokens and max_gpu_total_bytes were chosen with windows and a draft."""
    target = pools.last[0]
    if pools.max_gpu_total_bytes >= (
        sum(p.manager.bytes_per_token for p in pools.last) * pools.max_tokens
    ):
        return (
            "# with windows the draft manager still gets max_tokens = budget / (target + "
            "draft bytes per token at full length): the draft binds capacity"
        )
    sliding = sum(
        b[0] * block_tokens(d) * target.manager.windows[w]
        for w, b in target.blocks.items()
        if w != FULL
    )
    return (
        f"# max_tokens {pools.max_tokens} is what the draft manager holds (it takes "
        f"max_tokens // block blocks whatever its split) and the target's full-length "
        f"window; max_gpu_total_bytes {pools.max_gpu_total_bytes} gives the target's "
        f"sliding windows {sliding} B, what the sequences that fit need, instead of an "
        "even split by full-length price, which left those windows bytes they never use"
    )


def _block_notes(d: Deployment) -> list[str]:
    """Why the block size is what it is."""
    if not flash_mla(d):
        return []
    gpu = "an unknown GPU, taken as SM 9.0 (H200)" if sm_version(d) is None else "SM 9.0"
    return [
        f"# tokens_per_block {FLASH_MLA_BLOCK}: TensorRT-LLM runs this {FLASH_MLA_WIDTH}-wide "
        f"MLA latent with FlashMLA on {gpu} and sets 64 whatever is given "
        f"(--tokens-per-block {d.tokens_per_block} is not used)"
    ]


def _stage_notes(d: Deployment, pools: TrtllmPools) -> list[str]:
    """The PP stages' draft managers, where they differ from the reported stage's."""
    notes = []
    for s, stage in enumerate(pools.stages[:-1]):
        for p in stage:
            m = p.manager
            if m.placeholder:
                notes.append(
                    f"# PP stage {s} holds no draft layer; TensorRT-LLM still builds its draft "
                    f"manager with one placeholder layer ({m.bytes_per_token} B/token, "
                    f"{sum(b[0] for b in p.blocks.values())} blocks, and the whole "
                    f"host_cache_size: {sum(b[1] for b in p.blocks.values())} host blocks); "
                    "max_tokens leaves room for it"
                )
            elif m.role == "draft":
                notes.append(
                    f"# PP stage {s} holds {m.num_layers} of the draft's layers "
                    f"({m.bytes_per_token} B/token), split like the target's"
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
    layout = d.parallel
    if layout.dp_attention and layout.dp != layout.tp:
        raise InvalidArgumentError(
            f"TensorRT-LLM's attention DP makes every one of the tp={layout.tp} ranks its own "
            f"attention group (enable_attention_dp); use --dp {layout.tp}"
        )
    if layout.dp_attention and d.spec.name == "draft-target":
        raise InvalidArgumentError(
            "TensorRT-LLM under attention DP builds no separate draft manager, and a draft "
            "model's layers join no other: --spec draft-target with --dp-attention is not "
            "modelled for --engine trtllm"
        )
    quantized = checkpoint_kv_dtype(d.target)
    if quantized is not None and d.kv_dtype != quantized:
        raise InvalidArgumentError(
            f"{d.target.name} quantizes its KV cache to {quantized} (kv_cache_quant_algo); "
            "TensorRT-LLM keeps it ('auto') and only warns about another "
            f"kv_cache_config.dtype: plan with --kv-dtype {quantized}"
        )


def source(release: TrtllmRelease) -> EngineSource:
    """Where ``release``'s facts were read."""
    return EngineSource(repository="NVIDIA/TensorRT-LLM", ref=release.ref, files=FILES)


def engine_model(release: TrtllmRelease, *, default: bool) -> EngineModel:
    """The engine model of one TensorRT-LLM version (``trtllm@<version>``)."""

    def plan_release(d: Deployment, ledger: Ledger) -> EnginePlan:
        return plan(d, ledger, release)

    return EngineModel(
        name="trtllm",
        version=release.version,
        default=default,
        source=source(release),
        summary=f"TensorRT-LLM {release.version}",
        plan=plan_release,
        check=check,
        render=render,
        spec_names=frozenset(ENGINES["trtllm"].spec_names),
        # KvCacheConfig.free_gpu_memory_fraction: 0.9 (tensorrt_llm/llmapi/llm_args.py)
        memory_default=("memory_fraction", "0.9"),
    )


# --------------------------------------------------------------------- the manager "auto" picks

# llm_utils._resolve_kv_cache_manager_v2_auto (stored id 54619642641; SOURCES.md): an explicit
# bool wins; "auto" (the KvCacheConfig default) takes the model class's default, V1 where it
# has none. Model classes with a V2 default, by the checkpoint's ``architectures`` name:
# Llama / Llama-4 (PR #19004), GPT-OSS (#16942), DeepSeek-V3 (#16060, Kimi-K2 runs it),
# Gemma-3 (#17396); the hybrid Mamba / Qwen3-Next models (docs/source/features/kvcache.md
# @ 0076e939). Two-model speculation falls back to V1; every mode kvbudget plans on
# TensorRT-LLM (EAGLE3, MTP, draft-target, ngram) runs one model.
V2_DEFAULTS: dict[str, str] = {
    "LlamaForCausalLM": "PR #19004",
    "Llama4ForConditionalGeneration": "PR #19004",
    "Llama4ForCausalLM": "PR #19004",
    "GptOssForCausalLM": "PR #16942",
    "DeepseekV3ForCausalLM": "PR #16060",
    "Gemma3ForCausalLM": "PR #17396",
    "Gemma3ForConditionalGeneration": "PR #17396",
    # Gemma-4 (SOURCES.md: "Gemma3/4 (#17396)"); a Gemma-4 hybrid gets V2 whatever the
    # setting (trtllm_gemma4.MANAGER_REASON), which auto_manager says first
    "Gemma4ForCausalLM": "PR #17396",
    "Gemma4ForConditionalGeneration": "PR #17396",
    # hybrid Mamba / Gated-DeltaNet models: is_hybrid_linear routes them to
    # MambaHybridCacheManagerV2 under V2 (kvcache.md @ 0076e939: the hybrid Mamba models and
    # Qwen3-Next default to V2; Qwen3.5 is a Gated-DeltaNet hybrid of the same route)
    "NemotronHForCausalLM": "kvcache.md: hybrid Mamba",
    "Qwen3NextForCausalLM": "kvcache.md: Qwen3-Next",
    "Qwen3_5ForConditionalGeneration": "kvcache.md: hybrid, as Qwen3-Next",
    "Qwen3_5MoeForConditionalGeneration": "kvcache.md: hybrid, as Qwen3-Next",
}


def auto_manager(d: Deployment) -> tuple[str, str]:
    """("V1" or "V2", why): the manager ``use_kv_cache_manager_v2: "auto"`` builds."""
    # the checkpoint's architectures (a Qwen3.5 vision-language config names them outside
    # its text_config, which is what ``config`` holds)
    archs = list(d.target.architectures) or d.target.config.get("architectures") or ["?"]
    arch = str(archs[0])
    if trtllm_gemma4.is_gemma4(d) and trtllm_gemma4.is_hybrid(d):
        return "V2", trtllm_gemma4.MANAGER_REASON
    if arch in V2_DEFAULTS:
        return "V2", f"{arch} defaults to V2 ({V2_DEFAULTS[arch]})"
    return "V1", f"{arch} sets no V2 default"


def plan_auto(d: Deployment, ledger: Ledger) -> EnginePlan:
    """The default ``trtllm``: the manager TensorRT-LLM's "auto" picks where kvbudget
    models it, else V1; either way the plan emits the choice explicitly and notes what the
    other manager would hold on the same budget."""
    from kvbudget.engines import trtllm_v2  # a sibling that builds on this module

    choice, why = auto_manager(d)
    if trtllm_gemma4.is_gemma4(d):
        trtllm_v2.check(d)  # V2 is its only manager: refuse what kvbudget's V2 does not cover
    gap = trtllm_v2.uncovered(d)
    if gap is not None or choice == "V1":
        v1_plan = plan(d, ledger, RELEASE)
        if gap is not None:
            note = f"# manager: V1. TensorRT-LLM's auto would pick {choice} ({why})" + (
                ""
                if choice == "V1"
                else f"; kvbudget's V2 model does not cover {gap} yet, so the plan pins V1 "
                "(use_kv_cache_manager_v2 false)"
            )
        else:
            note = (
                f"# manager: V1, TensorRT-LLM's auto pick ({why}); V2 on the same "
                f"max_gpu_total_bytes would hold {_other_tokens(trtllm_v2.plan, d, ledger)}"
            )
        return replace(v1_plan, notes=(note, *v1_plan.notes))
    v2_plan = trtllm_v2.plan(d, ledger)
    note = (
        f"# manager: V2, TensorRT-LLM's auto pick ({why}); V1 on the same budget would hold "
        + _other_tokens(plan, d, ledger)
    )
    return replace(
        v2_plan,
        version=RELEASE.version,
        source=source(RELEASE),
        notes=(note, *v2_plan.notes),
    )


def _other_tokens(other: Callable[[Deployment, Ledger], EnginePlan], d: Deployment,
                  ledger: Ledger) -> str:  # fmt: skip
    """The tokens the manager not planned would hold, in words (or why it holds none)."""
    try:
        p = other(d, ledger)
    except InfeasibleBudgetError:
        return "no block (it would not start)"
    except InvalidArgumentError:  # V1's hybrid managers (CppMambaHybridCacheManager)
        if trtllm_gemma4.is_gemma4(d):
            return "nothing: TensorRT-LLM builds Gemma-4 no V1 manager"
        return "what kvbudget does not model (its V1 hybrid manager is not transcribed)"
    return f"{p.capacity.tokens} tokens ({count_of(p.capacity.max_concurrency, 'sequence')})"


V1_RELEASE = replace(RELEASE, version="v1")  # trtllm@v1: the V1 manager whatever the model
MODEL = replace(
    engine_model(RELEASE, default=True),
    plan=plan_auto,
    summary=f"TensorRT-LLM {RELEASE.version}",  # the manager its "auto" picks (plan_auto)
)
MODEL_V1 = engine_model(V1_RELEASE, default=False)
