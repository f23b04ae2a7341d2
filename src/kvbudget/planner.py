"""Planning: from models, devices and budgets to a per-rank :class:`~kvbudget.plan_types.Plan`.

``plan(...)`` is pure: it resolves the models and the speculation mode into cache
managers (one per role), their per-rank costs (:mod:`kvbudget.cost`), the per-rank GPU
budget (given, or derived from a GPU preset minus weights and a runtime reserve), splits
every tier between the managers (:mod:`kvbudget.split`) and rounds to whole blocks.

Speculation modes and their managers:

=============  ================================================================
``eagle3``     target + a separate draft manager for the EAGLE3 head
``mtp``        one target manager whose cost includes the MTP layers (default),
               or target + draft(MTP layers) with ``separate_draft_cache``
``draft-target`` target + a draft manager for a small model (own geometry, same TP)
``ngram``      target only; every sequence still needs its lookahead slots
``none``       target only, no lookahead
=============  ================================================================

Draft layers live on the last pipeline stage. Every stage is planned; the plan reports
the last stage (where both managers live) and caps capacity at the binding stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, get_args

from kvbudget._validate import require_int
from kvbudget.cost import CacheCost, CostDetail, cache_cost_detail
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.gpus import get_gpu
from kvbudget.model import ModelSpec, load_model
from kvbudget.plan_types import Budget, Capacity, ManagerPlan, Plan, Role, TierPlan
from kvbudget.split import BudgetSplit, Tier, split_budget
from kvbudget.units import GIB, format_bytes, parse_bytes

SpecMode = Literal["eagle3", "mtp", "draft-target", "ngram", "none"]
SPEC_MODES: tuple[str, ...] = get_args(SpecMode)

DEFAULT_TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_GPU = "H200"
DEFAULT_HOST_BUDGET = "64GiB"
DEFAULT_RESERVE = "4GiB"
DEFAULT_MEMORY_FRACTION = 0.9
DEFAULT_MAX_BATCH_SIZE = 256

# EAGLE3 heads shipped as presets, by the target they were trained for.
EAGLE3_DRAFTS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B",
    "openai/gpt-oss-120b": "nvidia/gpt-oss-120b-Eagle3-long-context",
}


@dataclass(frozen=True, kw_only=True)
class _Manager:
    """A manager being planned: its role, model, layer selection and per-stage costs."""

    role: Role
    model: ModelSpec
    layers: Literal["model", "mtp", "all"]
    details: tuple[CostDetail | None, ...]  # per PP stage; None where it has no layers


@dataclass(frozen=True, kw_only=True)
class _Stage:
    gpu_bytes: int
    weights_bytes: int | None
    split: BudgetSplit
    blocks: int  # common GPU blocks of the growing layers on this stage


def _resolve(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def _fraction(value: float | str) -> Fraction:
    try:
        frac = Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise InvalidArgumentError(f"memory_fraction must be a number, got {value!r}") from None
    if not 0 < frac <= 1:
        raise InvalidArgumentError(f"memory_fraction must be in (0, 1], got {value}")
    return frac


def _resolve_draft(spec: str, target: ModelSpec, draft: str | ModelSpec | None) -> ModelSpec | None:
    if spec == "eagle3":
        if draft is None:
            default = EAGLE3_DRAFTS.get(target.name)
            if default is None:
                raise InvalidArgumentError(
                    f"spec eagle3 needs a draft head for {target.name}; pass --draft "
                    "(a config path or preset id of the EAGLE3 head)"
                )
            draft = default
        model = _resolve(draft)
        if not model.is_eagle3:
            raise InvalidArgumentError(
                f"{model.name} is not an EAGLE3 head; use --spec draft-target for a small model"
            )
        return model
    if spec == "draft-target":
        if draft is None:
            raise InvalidArgumentError("spec draft-target needs --draft (the small model)")
        model = _resolve(draft)
        if model.vocab_size != target.vocab_size:
            raise InvalidArgumentError(
                f"draft {model.name} has vocab_size {model.vocab_size} but target "
                f"{target.name} has {target.vocab_size}; draft-target needs the same "
                "vocabulary (pick a draft from the target's family)"
            )
        return model
    if draft is not None:
        raise InvalidArgumentError(f"spec {spec} uses no draft model; drop --draft")
    if spec == "mtp" and not target.mtp_layers:
        raise InvalidArgumentError(
            f"{target.name} has no MTP layers (num_nextn_predict_layers); choose another --spec"
        )
    return None


def plan(
    target: str | ModelSpec = DEFAULT_TARGET,
    draft: str | ModelSpec | None = None,
    *,
    spec: str = "eagle3",
    kv_budget: int | str | None = None,
    host_budget: int | str = DEFAULT_HOST_BUDGET,
    disk_budget: int | str = 0,
    gpu: str | None = DEFAULT_GPU,
    gpu_memory: int | str | None = None,
    memory_fraction: float | str = DEFAULT_MEMORY_FRACTION,
    reserve: int | str = DEFAULT_RESERVE,
    weights_bytes: int | str | None = None,
    kv_dtype: str = "auto",
    state_dtype: str = "auto",
    tokens_per_block: int = 32,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_seq_len: int | None = None,
    max_draft_len: int = 3,
    tp: int = 1,
    pp: int = 1,
    gpus_per_node: int | None = None,
    host_memory: int | str | None = None,
    separate_draft_cache: bool = False,
) -> Plan:
    """Plan the KV caches of one rank of a speculative-decoding deployment.

    Arguments mirror the ``kvbudget plan`` flags. Byte arguments accept integers or
    strings with units (``"40GiB"``, ``"64GB"``). With no arguments: Llama-3.1-8B-Instruct
    with its EAGLE3 head on one H200 with 64 GiB of host KV budget.

    The GPU budget per rank is ``kv_budget`` when given; otherwise
    ``floor((gpu memory - weights on the rank - reserve) x memory_fraction)`` (the
    fraction applies to what is free after weights and the runtime reserve, as
    TensorRT-LLM's ``free_gpu_memory_fraction``).

    Raises:
        InvalidArgumentError: bad input (sizes, tp/pp, dtype, unknown GPU, spec/draft mix).
        ConfigError: a model cannot be loaded.
        InfeasibleBudgetError: the budget cannot hold the fixed costs or one sequence.
    """
    if spec not in SPEC_MODES:
        raise InvalidArgumentError(f"unknown spec {spec!r}; choose one of {', '.join(SPEC_MODES)}")
    require_int("tp", tp, minimum=1)
    require_int("pp", pp, minimum=1)
    require_int("tokens_per_block", tokens_per_block, minimum=1)
    require_int("max_batch_size", max_batch_size, minimum=1)
    require_int("max_draft_len", max_draft_len, minimum=0)
    target_model = _resolve(target)
    draft_model = _resolve_draft(spec, target_model, draft)
    # "auto" is the target's dtype for every manager (engines run the draft in the
    # target's dtype), else the draft's when the target config names none.
    auto_dtype = target_model.dtype or (draft_model.dtype if draft_model else None)
    kv_name = parse_dtype(kv_dtype, auto=auto_dtype).name
    seq_len = target_model.max_position_embeddings if max_seq_len is None else max_seq_len
    require_int("max_seq_len", seq_len, minimum=1)
    lookahead = 0 if spec == "none" else max_draft_len
    host_bytes = parse_bytes(host_budget, name="host_budget")
    disk_bytes = parse_bytes(disk_budget, name="disk_budget")
    node_gpus = min(tp * pp, 8) if gpus_per_node is None else gpus_per_node
    require_int("gpus_per_node", node_gpus, minimum=1)

    def detail(
        model: ModelSpec, layers: Literal["model", "mtp", "all"], stage: int, stages: int
    ) -> CostDetail:
        return cache_cost_detail(
            model,
            kv_dtype=kv_name,
            state_dtype=state_dtype,
            tokens_per_block=tokens_per_block,
            max_batch_size=max_batch_size,
            max_seq_len=seq_len,
            tp=tp,
            pp=stages,
            pp_stage=stage,
            layers=layers,
            lookahead_tokens=lookahead,
        )

    last = pp - 1
    target_layers: Literal["model", "all"] = (
        "all" if spec == "mtp" and not separate_draft_cache else "model"
    )
    managers = [
        _Manager(
            role="target",
            model=target_model,
            layers=target_layers,
            details=tuple(detail(target_model, target_layers, s, pp) for s in range(pp)),
        )
    ]
    draft_detail: CostDetail | None = None
    if draft_model is not None:
        draft_detail = detail(draft_model, "model", 0, 1)
    elif spec == "mtp" and separate_draft_cache:
        draft_detail = detail(target_model, "mtp", last, pp)
    if draft_detail is not None:
        managers.append(
            _Manager(
                role="draft",
                model=draft_model or target_model,
                layers="model" if draft_model is not None else "mtp",
                details=tuple(draft_detail if s == last else None for s in range(pp)),
            )
        )

    # ----- GPU budget per stage
    weights_override = (
        None if weights_bytes is None else parse_bytes(weights_bytes, name="weights_bytes")
    )
    given = None if kv_budget is None else parse_bytes(kv_budget, name="kv_budget")
    frac = _fraction(memory_fraction)
    reserve_bytes = parse_bytes(reserve, name="reserve")
    memory: int | None = None
    gpu_name: str | None = None
    if gpu_memory is not None:
        memory = parse_bytes(gpu_memory, name="gpu_memory")
        gpu_name = "custom"
    elif gpu is not None:
        spec_gpu = get_gpu(gpu)
        memory, gpu_name = spec_gpu.memory_bytes, spec_gpu.name
    if given is None and memory is None:
        raise InvalidArgumentError(
            "give a GPU budget: --kv-budget BYTES, --gpu NAME or --gpu-memory BYTES"
        )

    def stage_weights(stage: int) -> int:
        if weights_override is not None:
            return weights_override
        from kvbudget.weights import weights_bytes as _weights_bytes

        total = _weights_bytes(
            target_model, tp=tp, pp=pp, pp_stage=stage, include_mtp=spec == "mtp"
        ).total_bytes
        if draft_model is not None and stage == last:
            total += _weights_bytes(
                draft_model, tp=tp, pp=1, pp_stage=0, include_mtp=False
            ).total_bytes
        return total

    stages: list[_Stage] = []
    for s in range(pp):
        costs = [m.details[s] for m in managers]
        t_cost = costs[0].cost if costs[0] else CacheCost(0)
        d_cost = costs[1].cost if len(costs) > 1 and costs[1] else CacheCost(0)
        w: int | None = None
        if given is not None:
            budget = given
        else:
            assert memory is not None
            w = stage_weights(s)
            free = memory - w - reserve_bytes
            if free <= 0:
                raise InfeasibleBudgetError(
                    f"weights {format_bytes(w)} + reserve {format_bytes(reserve_bytes)} on "
                    f"PP stage {s} leave nothing of the GPU's {format_bytes(memory)} for the KV "
                    "cache; raise --tp/--pp, use a quantized checkpoint, a larger --gpu, or "
                    "lower --reserve"
                )
            budget = int(free * frac)
        try:
            split = split_budget(budget, target=t_cost, draft=d_cost, tier="gpu")
        except InfeasibleBudgetError:
            raise _infeasible_fixed(
                budget, managers, s, max_batch_size, tokens_per_block, seq_len, lookahead
            ) from None
        shares = (split.target, split.draft)
        blocks = _common_blocks(managers, s, shares, tokens_per_block)
        stages.append(_Stage(gpu_bytes=budget, weights_bytes=w, split=split, blocks=blocks))

    binding = min(range(pp), key=lambda s: (stages[s].blocks, -s))
    blocks = stages[binding].blocks
    report = stages[last]
    growing = any(_slope(m, s) for m in managers for s in range(pp))

    seq_blocks = -(-(seq_len + lookahead) // tokens_per_block)
    warnings: list[str] = []
    if growing:
        concurrency = blocks // seq_blocks
        at_batch = min(seq_len, (blocks // max_batch_size) * tokens_per_block - lookahead)
        if concurrency == 0:
            longest = blocks * tokens_per_block - lookahead
            raise InfeasibleBudgetError(
                f"one sequence of max_seq_len {seq_len} (+{lookahead} lookahead) needs "
                f"{seq_blocks} blocks per manager but the GPU budget of "
                f"{format_bytes(stages[binding].gpu_bytes)} per rank holds {blocks} after the "
                f"fixed cost of {format_bytes(stages[binding].split.fixed_bytes)}; the longest "
                f"sequence that fits is {max(longest, 0)} tokens: lower --max-seq-len, raise "
                "--kv-budget/--memory-fraction, use a smaller --kv-dtype, or raise --tp/--pp"
            )
        if concurrency < max_batch_size:
            warnings.append(
                f"only {concurrency} sequences of max_seq_len {seq_len} fit at once "
                f"(max_batch_size is {max_batch_size}); at the full batch each sequence "
                f"can hold {max(at_batch, 0)} tokens"
            )
    else:
        concurrency = max_batch_size
        at_batch = seq_len
        warnings.append(
            "every cached layer is sliding-window or recurrent: the cache is a fixed cost "
            f"for max_batch_size={max_batch_size} sequences of any length; the rest of the "
            "GPU budget is unused (raise --max-batch-size to use it)"
        )
    if binding != last:
        warnings.append(
            f"PP stage {binding} binds capacity ({stages[binding].blocks} blocks vs "
            f"{report.blocks} on the last stage, reported here)"
        )

    host_split = split_budget(
        host_bytes,
        target=_cost(managers[0], last),
        draft=_cost(managers[1], last) if len(managers) > 1 else CacheCost(0),
        tier="host",
    )
    disk_split = split_budget(
        disk_bytes,
        target=_cost(managers[0], last),
        draft=_cost(managers[1], last) if len(managers) > 1 else CacheCost(0),
        tier="disk",
    )
    host_blocks = _common_blocks(
        managers, last, (host_split.target, host_split.draft), tokens_per_block, fixed=False
    )
    disk_blocks = _common_blocks(
        managers, last, (disk_split.target, disk_split.draft), tokens_per_block, fixed=False
    )
    if host_bytes and not growing:
        warnings.append("the host tier holds growing-layer blocks only; this model has none")
    host_memory_bytes = (
        None if host_memory is None else parse_bytes(host_memory, name="host_memory")
    )
    if host_memory_bytes is not None and host_bytes * node_gpus > host_memory_bytes:
        warnings.append(
            f"{node_gpus} ranks per node pin {format_bytes(host_bytes * node_gpus)} of host "
            f"KV cache but the node has {format_bytes(host_memory_bytes)} of host memory; "
            "lower --host-budget (it is per rank) or --gpus-per-node"
        )

    manager_plans = []
    for i, m in enumerate(managers):
        last_detail = m.details[last]
        assert last_detail is not None
        d = last_detail
        block_bytes = d.cost.slope * tokens_per_block
        gpu_share = (report.split.target, report.split.draft)[i]
        host_share = (host_split.target, host_split.draft)[i]
        disk_share = (disk_split.target, disk_split.draft)[i]
        manager_plans.append(
            ManagerPlan(
                role=m.role,
                model=m.model.name,
                layers=m.layers,
                num_layers=d.num_layers,
                kv_dtype=kv_name,
                tokens_per_block=tokens_per_block,
                slope_bytes_per_token=d.cost.slope,
                fixed_bytes=d.cost.intercept,
                window_bytes=d.window_bytes,
                window_groups=d.window_groups,
                state_bytes_per_seq=d.state_bytes_per_seq,
                max_batch_size=max_batch_size,
                gpu=_tier(
                    "gpu", gpu_share, d.cost.intercept, blocks, block_bytes, tokens_per_block
                ),
                host=_tier("host", host_share, 0, host_blocks, block_bytes, tokens_per_block),
                disk=_tier("disk", disk_share, 0, disk_blocks, block_bytes, tokens_per_block),
            )
        )

    if given is not None:
        source = "given (--kv-budget), per rank"
    else:
        source = (
            f"(GPU memory - weights - reserve) x {memory_fraction}: the fraction of memory "
            "free after weights and runtime reserve (TensorRT-LLM free_gpu_memory_fraction "
            "semantics), per rank"
        )
    plan_budget = Budget(
        gpu_bytes=report.gpu_bytes,
        host_bytes=host_bytes,
        disk_bytes=disk_bytes,
        gpu_source=source,
        gpu_name=gpu_name,
        gpu_memory_bytes=memory,
        weights_bytes=report.weights_bytes,
        reserve_bytes=reserve_bytes if given is None else None,
        memory_fraction=float(memory_fraction) if given is None else None,
        gpus_per_node=node_gpus,
        host_memory_bytes=host_memory_bytes,
    )
    capacity = Capacity(
        tokens=blocks * tokens_per_block,
        host_tokens=host_blocks * tokens_per_block,
        disk_tokens=disk_blocks * tokens_per_block,
        max_seq_len=seq_len,
        max_draft_len=max_draft_len if spec != "none" else 0,
        lookahead_tokens=lookahead,
        max_batch_size=max_batch_size,
        max_concurrency=concurrency,
        max_seq_len_at_batch=max(at_batch, 0),
    )
    return Plan(
        target=target_model.name,
        draft=draft_model.name if draft_model else None,
        spec=spec,
        tp=tp,
        pp=pp,
        pp_stage=last,
        binding_pp_stage=binding,
        kv_dtype=kv_name,
        tokens_per_block=tokens_per_block,
        budget=plan_budget,
        managers=tuple(manager_plans),
        capacity=capacity,
        warnings=tuple(warnings),
    )


def _cost(m: _Manager, stage: int) -> CacheCost:
    d = m.details[stage]
    return d.cost if d else CacheCost(0)


def _slope(m: _Manager, stage: int) -> int:
    return _cost(m, stage).slope


def _common_blocks(
    managers: list[_Manager],
    stage: int,
    shares: tuple[int, int],
    tokens_per_block: int,
    *,
    fixed: bool = True,
) -> int:
    """Whole blocks every manager with growing layers on ``stage`` can hold."""
    counts = []
    for i, m in enumerate(managers):
        cost = _cost(m, stage)
        if cost.slope == 0:
            continue
        room = shares[i] - (cost.intercept if fixed else 0)
        counts.append(max(0, room) // (cost.slope * tokens_per_block))
    return min(counts) if counts else 0


def _tier(
    tier: Tier, share: int, fixed: int, blocks: int, block_bytes: int, tokens_per_block: int
) -> TierPlan:
    if block_bytes == 0:
        blocks = 0
    return TierPlan(
        tier=tier,
        bytes=share,
        blocks=blocks,
        tokens=blocks * tokens_per_block,
        padding_bytes=share - fixed - blocks * block_bytes,
    )


def _infeasible_fixed(
    budget: int,
    managers: list[_Manager],
    stage: int,
    batch: int,
    tokens_per_block: int,
    seq_len: int,
    lookahead: int,
) -> InfeasibleBudgetError:
    fixed = sum(_cost(m, stage).intercept for m in managers)
    slope = sum(_cost(m, stage).slope for m in managers)
    per_seq_fixed = fixed // batch
    per_seq = per_seq_fixed + slope * tokens_per_block * -(
        -(seq_len + lookahead) // tokens_per_block
    )
    fits = budget // per_seq if per_seq else 0
    return InfeasibleBudgetError(
        f"the GPU budget of {format_bytes(budget)} ({budget} bytes) per rank cannot cover the "
        f"fixed cost of {format_bytes(fixed)} ({fixed} bytes: sliding-window blocks and "
        f"recurrent state for max_batch_size={batch}); at most {fits} sequences of "
        f"{seq_len} tokens fit: lower --max-batch-size (to {fits}) or --max-seq-len, raise "
        "--kv-budget/--memory-fraction, use a smaller --kv-dtype/--state-dtype, or raise --tp/--pp"
    )


__all__ = ["DEFAULT_TARGET", "EAGLE3_DRAFTS", "GIB", "SPEC_MODES", "plan"]
