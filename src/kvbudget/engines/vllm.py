"""vLLM 0.33's KV cache, as its own sizing code builds it, and the flags that realise a plan.

vLLM keeps **one block pool** for every cached layer of target and draft. Its start-up
planning (``vllm/v1/core/kv_cache_planning.py`` and ``vllm/v1/core/kv_cache_utils.py``
of the vllm 0.33.0 wheel; ``vllm/v1/kv_cache_interface.py`` for the per-layer specs) is,
for the default layer-outer KV layout (FlashAttention on Hopper/Blackwell)::

    specs     one per cached layer and rank: full attention, sliding window, MLA, Mamba
              (attention.py ``get_kv_cache_spec``: a layer with a window is always a
              sliding-window spec, however long max_model_len is)
    groups    all specs equal             -> one group of every layer
              one type, one block size    -> one group (UniformTypeKVCacheSpecs)
              otherwise (hybrid)          -> pages unified to the largest (a smaller
              attention page raises its block size by the integer ratio, or is padded),
              then layers bucketed by spec and split into groups of equal size
              ``group_size`` = fewest layers of a bucket, or the most when
              ``most < 1.5 x fewest``; short groups hold padding layers
              (``_get_kv_cache_groups_uniform_page_size``)
    block     bytes_per_block = max over groups of the summed pages of its layers
    pool      num_blocks = kv_cache_memory_bytes // bytes_per_block   (null block included;
              with PP: the smallest stage's count)
    check     refused at start-up when bytes_per_block x (blocks one max_model_len request
              needs, summed over groups) > kv_cache_memory_bytes - bytes_per_block (the
              null block BlockPool holds back)
    capacity  per request: full/MLA ``cdiv(max_model_len, block)``; sliding
              ``cdiv(min(window - 1 + in_flight, max_model_len), block) + 1`` with
              ``in_flight = max_concurrent_batches x max_num_batched_tokens`` and
              ``max_concurrent_batches = pp + 1`` with async scheduling (Model Runner V2,
              the default) else ``pp``; concurrency ``num_blocks / sum over groups``;
              tokens ``int(concurrency x max_model_len)``; logged as
              "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
              (``update_kv_cache_capacity``).

Hybrid attention/Mamba models (Qwen3-Next, Nemotron-H; ``vllm/platforms/interface.py``
``_align_hybrid_block_size``, ``vllm/model_executor/layers/mamba/``): the attention block
size is raised until one attention page holds a state page (blocks of ``lcm(16, block,
64 when FlashInfer's GDN prefill exports checkpoints)`` tokens), the state page is padded
to the attention page, the conv state keeps ``conv_kernel - 1 + K`` rows, Nemotron-H's SSM
state is float32 (``NemotronHForCausalLMConfig``), and a request holds ``2 + K + 1``
states with prefix caching on ("align" mode, the default) or ``1 + K`` with it off.

Speculative decoding adds the draft's layers to the same pool (EAGLE3: the head's own
layer; MTP: the target's MTP layers; draft model: all its layers), each with its own
geometry. ``--kv-cache-memory-bytes`` is the pool's bytes per GPU and overrides
``--gpu-memory-utilization``. Host offload (``--kv-offloading-size``, GiB summed over all
TP x PP ranks) is one budget for every layer.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace
from typing import Any, Literal

from kvbudget.cost import pp_stage_layers
from kvbudget.engines.common import (
    auto_note,
    cdiv,
    command_line,
    comment_lines,
    gib_text,
    host_total,
    kv_dtype_name,
    stage_note,
)
from kvbudget.engines.facts import ENGINES
from kvbudget.engines.inputs import EngineInputs
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer, MLALayer
from kvbudget.plan_types import EnginePlan, Plan

VERSION = "0.33.0"

SpecKind = Literal["full_attention", "sliding_window", "chunked_local", "mla", "mamba"]

# speculative methods that make vLLM turn its hybrid KV cache manager off for chunked
# local attention (VllmConfig: "not yet supported with chunked local attention + eagle";
# SpeculativeConfig.use_eagle: eagle, eagle3, mtp): every layer is then full attention
_NO_HYBRID_WITH_CHUNKS = frozenset({"eagle", "eagle3", "mtp"})


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One cached layer on one rank as vLLM describes it (a ``KVCacheSpec``).

    ``page_bytes`` is one block of this layer (padded where vLLM pads it);
    ``geometry`` is what vLLM compares to decide that two specs are the same (heads,
    head size, dtype bytes per token). ``stage`` is the PP stage that holds the layer.
    """

    kind: SpecKind
    block_size: int
    page_bytes: int
    geometry: tuple[int, ...]
    sliding_window: int | None = None
    draft: bool = False
    stage: int = 0
    # Mamba: state pages one request holds (running + speculative + checkpoint)
    states_per_request: int = 0

    @property
    def key(self) -> tuple[object, ...]:
        """What makes two specs equal for vLLM (``is_draft`` and the stage excluded)."""
        return (self.kind, self.block_size, self.page_bytes, self.geometry, self.sliding_window)

    @property
    def type_key(self) -> tuple[object, ...]:
        """Specs of one *type* need the same token slots (``is_uniform_type``)."""
        if self.kind in ("full_attention", "mla"):
            return ("full", self.block_size)
        if self.kind == "sliding_window":
            return ("sliding", self.block_size, self.sliding_window)
        if self.kind == "chunked_local":
            return ("chunked", self.block_size, self.sliding_window)
        return ("mamba", self.block_size, self.page_bytes, self.states_per_request)


@dataclass(frozen=True, kw_only=True)
class KvCacheGroup:
    """One vLLM KV cache group: layers sharing one block table."""

    kind: SpecKind
    layers: tuple[int, ...]  # indices into the spec list
    padding_layers: int
    page_bytes: int  # one layer's page (uniform-type groups: the largest)
    block_size: int
    sliding_window: int | None
    draft_layers: int


@dataclass(frozen=True, kw_only=True)
class VllmPool:
    """The pool vLLM builds: groups, block size, blocks, and the logged capacity."""

    groups: tuple[KvCacheGroup, ...]
    block_size: int
    bytes_per_block: int
    num_gpu_blocks: int
    blocks_per_request: int  # summed over the groups
    group_blocks_per_request: tuple[int, ...]  # per group, in ``groups`` order
    max_concurrency: float
    gpu_kv_cache_tokens: int
    refused: str | None


# FlashAttention's kernel block sizes: MultipleOf(16) (flash_attn.py
# get_supported_kernel_block_sizes); FlashInfer's GDN prefill exports align-mode
# checkpoints every 64 tokens on Hopper (gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
KERNEL_BLOCK = 16
GDN_CHECKPOINT_ALIGNMENT = 64


@dataclass(frozen=True, kw_only=True)
class MambaSetup:
    """What vLLM sets for a hybrid attention/Mamba model before building specs.

    ``block_size``: the attention block size, raised until one attention page holds a
    Mamba state page (``Platform._align_hybrid_block_size``); ``state_page_bytes``: one
    layer's state (conv rows ``conv_kernel - 1 + K``, SSM state in its own dtype);
    ``page_bytes``: the state page padded to the attention page; ``states_per_request``:
    ``2 + K + checkpoint`` in "align" mode (prefix caching on, the default), ``1 + K``
    in "none" mode (``MambaSpec.max_memory_usage_bytes``).
    """

    block_size: int
    mamba_block_size: int
    state_page_bytes: int
    page_bytes: int
    states_per_request: int


def mamba_setup(inputs: EngineInputs) -> MambaSetup | None:
    """vLLM's block-size override and state pages for a hybrid model, or None."""
    target = inputs.target
    k = inputs.lookahead_tokens
    states = [
        x.state_bytes(inputs.state_dtype, inputs.tp, lookahead=k, ssm_dtype=inputs.ssm_state_dtype)
        for x in target.layers
    ]
    state_page = max(states, default=0)
    if not state_page:
        return None
    attention = [x for x in target.layers if x.kind in ("attention", "mla")]
    attn_page_1 = attention[0].bytes_per_token(inputs.kv_dtype, inputs.tp) if attention else 0
    align = inputs.enable_prefix_caching
    gdn = any(x.kind == "gated_deltanet" for x in target.layers)
    checkpoint_alignment = GDN_CHECKPOINT_ALIGNMENT if align and gdn else None
    bs = inputs.tokens_per_block
    if attn_page_1:
        kernel_align = max(KERNEL_BLOCK, bs)
        if align:
            kernel_align = math.lcm(kernel_align, checkpoint_alignment or 1)
        block = kernel_align * cdiv(state_page, kernel_align * attn_page_1)
        block = KERNEL_BLOCK * cdiv(block, KERNEL_BLOCK)
        bs = max(bs, block)
    page = bs * attn_page_1 if attn_page_1 else state_page
    # Mamba2 layers always declare a checkpoint block; GDN only when its FlashInfer
    # prefill exports checkpoints (align mode on Hopper)
    checkpoint = 1 if (not gdn or checkpoint_alignment) else 0
    per_request = (2 + k + checkpoint) if align else (1 + k)
    return MambaSetup(
        block_size=bs,
        mamba_block_size=bs if align else inputs.max_seq_len,
        state_page_bytes=state_page,
        page_bytes=max(page, state_page),
        states_per_request=per_request,
    )


def layer_specs(inputs: EngineInputs) -> list[LayerSpec]:
    """Every cached layer of target and draft on one rank, in vLLM's order.

    Target layers first (their PP stage from vLLM's ``get_pp_indices`` split), then the
    draft's (EAGLE3 head, MTP layers or draft model), on the last stage.
    """
    mamba = mamba_setup(inputs)
    if mamba is not None:
        inputs = replace(inputs, tokens_per_block=mamba.block_size)
    target = inputs.target
    stage_of = {
        i: s
        for s, layers in enumerate(pp_stage_layers(target.num_layers, inputs.pp))
        for i in layers
    }
    specs = [
        spec
        for layer in target.layers
        if (spec := _layer_spec(inputs, layer, stage_of[layer.index], False, mamba)) is not None
    ]
    last = inputs.pp - 1
    draft_layers: tuple[Layer, ...] = ()
    if inputs.spec == "mtp":
        draft_layers = target.mtp_layers
    elif inputs.draft is not None:
        draft_layers = inputs.draft.layers
    specs += [
        spec
        for layer in draft_layers
        if (spec := _layer_spec(inputs, layer, last, True, None)) is not None
    ]
    return specs


def _layer_spec(
    inputs: EngineInputs, layer: Layer, stage: int, draft: bool, mamba: MambaSetup | None
) -> LayerSpec | None:
    bs = inputs.tokens_per_block
    per_token = layer.bytes_per_token(inputs.kv_dtype, inputs.tp)
    if isinstance(layer, AttentionLayer):
        window = layer.sliding_window
        kind: SpecKind = "full_attention" if window is None else "sliding_window"
        if layer.chunked:
            # ChunkedLocalAttentionSpec (attention_chunk_size in ``sliding_window``), or
            # FullAttentionSpec when the hybrid manager is off
            full = inputs.spec in _NO_HYBRID_WITH_CHUNKS
            kind, window = ("full_attention", None) if full else ("chunked_local", window)
        return LayerSpec(
            kind=kind,
            block_size=bs,
            page_bytes=per_token * bs,
            geometry=(layer.num_kv_heads, layer.head_dim, per_token),
            sliding_window=window,
            draft=draft,
            stage=stage,
        )
    if isinstance(layer, MLALayer):
        return LayerSpec(
            kind="mla",
            block_size=bs,
            page_bytes=per_token * bs,
            geometry=(1, layer.kv_lora_rank + layer.qk_rope_head_dim, per_token),
            draft=draft,
            stage=stage,
        )
    if mamba is not None and layer.kind in ("gated_deltanet", "mamba2"):
        return LayerSpec(
            kind="mamba",
            block_size=mamba.mamba_block_size,
            page_bytes=mamba.page_bytes,
            geometry=(mamba.state_page_bytes,),
            draft=draft,
            stage=stage,
            states_per_request=mamba.states_per_request,
        )
    return None


def _all_equal(specs: list[LayerSpec]) -> bool:
    return len({s.key for s in specs}) == 1


def _uniform_type(specs: list[LayerSpec]) -> bool:
    return len({s.type_key for s in specs}) == 1


def _unify_pages(specs: list[LayerSpec]) -> list[LayerSpec]:
    """``unify_kv_cache_spec_page_size``: raise smaller pages to the largest."""
    largest = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == largest:
            out.append(s)
        elif s.kind != "mamba" and largest % s.page_bytes == 0:
            ratio = largest // s.page_bytes
            out.append(replace(s, block_size=s.block_size * ratio, page_bytes=largest))
        elif s.kind in ("full_attention", "sliding_window", "chunked_local", "mamba"):
            out.append(replace(s, page_bytes=largest))  # padded page
        else:
            raise InvalidArgumentError(
                "vLLM cannot unify this model's KV page sizes (an MLA page that does not "
                "divide the largest page); plan it with --engine kvbudget"
            )
    return out


def kv_cache_groups(specs: list[LayerSpec]) -> tuple[list[LayerSpec], list[KvCacheGroup]]:
    """vLLM's KV cache groups for ``specs`` (``get_kv_cache_groups``, layer-outer layout).

    Returns the specs as grouped (pages unified for hybrid models) and the groups.
    """
    if not specs:
        return specs, []
    everything = tuple(range(len(specs)))
    if _all_equal(specs) or _uniform_type(specs):
        first = specs[0]
        return specs, [
            KvCacheGroup(
                kind=first.kind,
                layers=everything,
                padding_layers=0,
                page_bytes=max(s.page_bytes for s in specs),
                block_size=first.block_size,
                sliding_window=first.sliding_window,
                draft_layers=sum(s.draft for s in specs),
            )
        ]
    unified = _unify_pages(specs)
    buckets: dict[tuple[object, ...], list[int]] = {}
    for i, s in enumerate(unified):
        buckets.setdefault(s.key, []).append(i)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for members in buckets.values():
        count = cdiv(len(members), group_size)
        for g in range(count):
            layers = tuple(members[g::count])
            spec = unified[layers[0]]
            groups.append(
                KvCacheGroup(
                    kind=spec.kind,
                    layers=layers,
                    padding_layers=group_size - len(layers),
                    page_bytes=spec.page_bytes,
                    block_size=spec.block_size,
                    sliding_window=spec.sliding_window,
                    draft_layers=sum(unified[i].draft for i in layers),
                )
            )
    return unified, groups


def _group_blocks_per_request(
    group: KvCacheGroup, specs: list[LayerSpec], inputs: EngineInputs
) -> int:
    """Blocks of the shared pool one request of max_model_len takes in ``group``."""
    max_len = inputs.max_seq_len
    if group.kind == "sliding_window":
        assert group.sliding_window is not None
        retained = group.sliding_window - 1 + _in_flight_tokens(inputs)
        return cdiv(min(retained, max_len), group.block_size) + 1
    if group.kind == "chunked_local":
        # ChunkedLocalAttentionSpec: one chunk plus the in-flight tokens, no extra block
        assert group.sliding_window is not None
        chunk = group.sliding_window + _in_flight_tokens(inputs)
        return cdiv(min(chunk, max_len), group.block_size)
    if group.kind == "mamba":
        return max(specs[i].states_per_request for i in group.layers)
    return cdiv(max_len, group.block_size)


def _in_flight_tokens(inputs: EngineInputs) -> int:
    """``VllmConfig.max_in_flight_tokens``: batches in flight x max_num_batched_tokens."""
    batches = inputs.pp + 1 if inputs.async_scheduling else inputs.pp
    return batches * inputs.max_num_batched_tokens


def _bytes_per_block(groups: list[KvCacheGroup], specs: list[LayerSpec], stage: int) -> int:
    """``_get_kv_cache_bytes_per_block`` on one stage: the largest group's summed pages."""
    return max(
        sum(specs[i].page_bytes for i in g.layers if specs[i].stage == stage) for g in groups
    )


def vllm_pool(inputs: EngineInputs) -> VllmPool:
    """The pool vLLM 0.33 builds for ``inputs``, and its logged capacity figures."""
    specs, groups = kv_cache_groups(layer_specs(inputs))
    if not groups:
        raise InvalidArgumentError(f"{inputs.target.name} caches nothing for vLLM to size")
    budget = inputs.gpu_kv_bytes
    per_group = tuple(_group_blocks_per_request(g, specs, inputs) for g in groups)
    per_request = sum(per_group)
    counts = []
    refused = None
    for stage in range(inputs.pp):
        bpb = _bytes_per_block(groups, specs, stage)
        if bpb == 0:
            continue
        counts.append(budget // bpb)
        usable = budget - bpb
        needed = bpb * per_request
        if refused is None and (usable <= 0 or needed > usable):
            refused = (
                f"To serve at least one request with the model's max seq len "
                f"({inputs.max_seq_len}), ({_gib(needed)} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({_gib(usable)} GiB)."
            )
    num_blocks = min(counts)
    concurrency = num_blocks / per_request
    # the attention block size after any override (what vLLM's cache_config reports)
    attention = [g.block_size for g in groups if g.kind != "mamba"]
    block_size = min(attention) if attention else inputs.tokens_per_block
    return VllmPool(
        groups=tuple(groups),
        block_size=block_size,
        bytes_per_block=_bytes_per_block(groups, specs, inputs.pp - 1),
        num_gpu_blocks=num_blocks,
        blocks_per_request=per_request,
        group_blocks_per_request=per_group,
        max_concurrency=concurrency,
        gpu_kv_cache_tokens=int(concurrency * inputs.max_seq_len),
        refused=refused,
    )


def _gib(num_bytes: int) -> str:
    """vLLM's ``format_gib`` (``vllm/utils/mem_utils.py``): GiB rounded to 2 decimals."""
    return f"{round(num_bytes / (1 << 30), 2)}"


def build(plan: Plan, inputs: EngineInputs) -> EnginePlan:
    """vLLM's plan: its pool for ``inputs``, the flags that make it, its start-up line.

    Raises InfeasibleBudgetError when vLLM would refuse to start (not one request of
    max_model_len fits beside the null block), InvalidArgumentError for a dtype or model
    vLLM has no cache for.
    """
    facts = ENGINES["vllm"]
    dtype = kv_dtype_name(plan, facts)
    pool = vllm_pool(inputs)
    if pool.refused is not None:
        raise InfeasibleBudgetError(
            f"vLLM {VERSION} would refuse to start: {pool.refused} Raise --kv-budget, lower "
            "--max-seq-len, or use a smaller --kv-dtype"
        )
    settings: dict[str, Any] = {
        # vLLM's data parallelism (replicas or DP attention) runs --data-parallel-size
        # engines of --tensor-parallel-size ranks each: the attention TP
        "--tensor-parallel-size": inputs.tp,
        "--pipeline-parallel-size": plan.pp,
        "--max-model-len": inputs.max_seq_len,
        "--max-num-seqs": inputs.max_batch_size,
        "--max-num-batched-tokens": inputs.max_num_batched_tokens,
        "--async-scheduling" if inputs.async_scheduling else "--no-async-scheduling": True,
        "--enable-prefix-caching"
        if inputs.enable_prefix_caching
        else "--no-enable-prefix-caching": True,
        facts.block_knob: plan.tokens_per_block,
        facts.kv_dtype_knob: dtype,
        facts.gpu_knob: inputs.gpu_kv_bytes,
    }
    if inputs.dp > 1:
        settings["--data-parallel-size"] = inputs.dp
    if inputs.ep > 1:
        settings["--enable-expert-parallel"] = True
    host = host_total(plan)
    ranks = plan.tp * plan.pp
    size = gib_text(host * ranks)
    if size != "0":
        settings["--kv-offloading-backend"] = "native"
        settings[facts.host_knob] = size
    if plan.spec in facts.spec_names:
        config: dict[str, object] = {
            "method": facts.spec_names[plan.spec],
            facts.draft_len_knob: inputs.max_draft_len,
        }
        if plan.draft_source:
            config[facts.draft_model_knob] = plan.draft_source
        config.update(facts.spec_extra.get(plan.spec, {}))
        settings["--speculative-config"] = config
    groups = [
        {
            "kind": g.kind,
            "layers": len(g.layers),
            "draft_layers": g.draft_layers,
            "padding_layers": g.padding_layers,
            "page_bytes": g.page_bytes,
            "block_size": g.block_size,
            "sliding_window": g.sliding_window,
            "blocks_per_request": per_request,
        }
        for g, per_request in zip(pool.groups, pool.group_blocks_per_request, strict=True)
    ]
    predicted: dict[str, Any] = {
        "block_size": pool.block_size,
        "bytes_per_block": pool.bytes_per_block,
        "num_gpu_blocks": pool.num_gpu_blocks,
        "usable_gpu_blocks": pool.num_gpu_blocks - 1,
        "blocks_per_request": pool.blocks_per_request,
        "gpu_kv_cache_tokens": pool.gpu_kv_cache_tokens,
        "max_concurrency": pool.max_concurrency,
        "max_in_flight_tokens": _in_flight_tokens(inputs),
        "kv_cache_groups": groups,
        "refused": None,
    }
    log = (
        f"GPU KV cache size: {pool.gpu_kv_cache_tokens:,} tokens, Maximum concurrency for "
        f"{inputs.max_seq_len:,} tokens per request: {pool.max_concurrency:.2f}x",
    )
    notes = [
        f"# {facts.gpu_knob} is the one block pool per GPU for every layer, draft layers "
        "included; it overrides --gpu-memory-utilization",
        f"# pool: {pool.num_gpu_blocks} blocks of {pool.bytes_per_block} B (one page per "
        f"layer of the widest group), block 0 held back as the null block",
    ]
    if len(pool.groups) > 1:
        notes.append(
            f"# {len(pool.groups)} KV cache groups share the pool; a request of "
            f"max_model_len takes {pool.blocks_per_request} blocks over all groups"
        )
    if any(g.kind == "sliding_window" for g in pool.groups):
        notes.append(
            "# sliding-window groups are charged window - 1 + max in-flight tokens "
            f"({_in_flight_tokens(inputs)} = batches in flight x --max-num-batched-tokens) per "
            "request: a larger --max-num-batched-tokens lowers the logged capacity"
        )
    if any(g.kind == "mamba" for g in pool.groups):
        other = vllm_pool(replace(inputs, enable_prefix_caching=not inputs.enable_prefix_caching))
        on, off = (pool, other) if inputs.enable_prefix_caching else (other, pool)
        chosen = "on" if inputs.enable_prefix_caching else "off"
        notes.append(
            f"# prefix caching {chosen} for this hybrid model: with it on vLLM keeps 2 + K + 1 "
            f"states per request (align mode) and holds {on.max_concurrency:.2f} requests of "
            f"max_model_len; with --no-prefix-caching 1 + K states and "
            f"{off.max_concurrency:.2f} requests, but no prefix reuse"
        )
    if size != "0":
        notes.append(
            f"# {facts.host_knob} is GiB summed over all {ranks} rank(s) "
            f"(TP {plan.tp} x PP {plan.pp}): {host} B per rank x {ranks}, rounded down"
        )
    elif host:
        notes.append(
            f"# host budget under 0.001 GiB in all: {facts.host_knob} left unset (0 would fail)"
        )
    sequences = min(int(pool.max_concurrency), inputs.max_batch_size)
    warnings = []
    if sequences < inputs.max_batch_size:
        warnings.append(
            f"vLLM's pool holds {pool.max_concurrency:.2f} requests of max_model_len "
            f"{inputs.max_seq_len} at once (--max-num-seqs {inputs.max_batch_size}); it "
            "admits more shorter ones"
        )
    return EnginePlan(
        name="vllm",
        version=VERSION,
        settings=settings,
        predicted=predicted,
        gpu_tokens=pool.gpu_kv_cache_tokens,
        max_concurrency=sequences,
        warnings=tuple(warnings),
        log=log,
        notes=tuple(notes + auto_note(plan, facts, dtype) + stage_note(plan)),
    )


def render(plan: Plan, engine: EnginePlan) -> str:
    """The ``vllm serve`` command of ``engine.settings``, with comments."""
    lines = comment_lines(plan, engine, "vLLM")
    lines.append(command_line(f"vllm serve {shlex.quote(plan.target_source)}", engine.settings))
    return "\n".join(lines) + "\n"
