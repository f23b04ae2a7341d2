"""Planning: from models, devices and budgets to a per-rank :class:`~kvbudget.plan_types.Plan`.

``plan(...)`` is ``build_plan(resolve_inputs(...))``: :mod:`kvbudget.plan_inputs` turns
the arguments into checked values (:class:`~kvbudget.plan_inputs.PlanInputs`), then the
pure :func:`build_plan` makes one cache manager per role (:data:`SPEC_MODE_TABLE` says
which), prices them per rank (:mod:`kvbudget.cost`), takes the per-rank GPU budget
(given, or derived from a GPU preset minus weights and non-KV memory), splits every tier
between the managers (:mod:`kvbudget.split`) and rounds to whole blocks.

Draft layers live on the last pipeline stage. Every stage is planned; the plan reports
the last stage (where both managers live) and caps capacity at the binding stage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ParamSpec

from kvbudget.budget import GpuBudgetRule
from kvbudget.cost import CacheCost, CostDetail, LayerSelection, pp_stage_layers
from kvbudget.dtypes import parse_dtype
from kvbudget.engines import with_engine
from kvbudget.engines.inputs import EngineInputs
from kvbudget.errors import ConfigError, InfeasibleBudgetError
from kvbudget.memory import NonKvMemory, estimate_non_kv
from kvbudget.model import ModelSpec
from kvbudget.plan_inputs import (
    DEFAULT_GPU,
    DEFAULT_HOST_BUDGET,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TARGET,
    EAGLE3_DRAFTS,
    CostSettings,
    PlanInputs,
    resolve_inputs,
)
from kvbudget.plan_types import (
    Budget,
    Capacity,
    ManagerPlan,
    Plan,
    Role,
    StagePlan,
    TierPlan,
)
from kvbudget.spec_modes import SPEC_MODE_TABLE, SPEC_MODES
from kvbudget.split import BudgetSplit, Tier, split_budget
from kvbudget.units import count_of, format_bytes
from kvbudget.weights import weights_bytes as rank_weights

P = ParamSpec("P")


@dataclass(frozen=True, kw_only=True)
class _Manager:
    """A manager being planned: its role, model, layer selection and per-stage costs."""

    role: Role
    model: ModelSpec
    layers: LayerSelection
    details: tuple[CostDetail | None, ...]  # per PP stage; None where it has no layers


@dataclass(frozen=True, kw_only=True)
class _Stage:
    """One PP stage's GPU budget, its split and the common blocks it holds."""

    gpu_bytes: int
    weights_bytes: int | None
    split: BudgetSplit
    blocks: int  # common GPU blocks of the growing layers on this stage
    non_kv: NonKvMemory | None = None  # what the derived budget left out (None: given)

    def report(self, pp_stage: int, tp_ranks: str) -> StagePlan:
        """This stage as the plan reports it, for the TP ranks ``tp_ranks``."""
        return StagePlan(
            pp_stage=pp_stage,
            gpu_bytes=self.gpu_bytes,
            weights_bytes=self.weights_bytes,
            fixed_bytes=self.split.fixed_bytes,
            blocks=self.blocks,
            tp_ranks=tp_ranks,
        )


def build_plan(inputs: PlanInputs) -> Plan:
    """The plan of ``inputs`` (:func:`~kvbudget.plan_inputs.resolve_inputs`). Pure.

    Raises:
        InfeasibleBudgetError: the budget cannot hold the fixed costs or one sequence.
    """
    shape, layout = inputs.settings, inputs.parallel
    target_model, draft_model = inputs.target, inputs.draft
    tp, pp, last = layout.tp, layout.pp, layout.pp - 1
    rule = inputs.gpu_rule
    managers = _managers(shape, inputs, layout.draft_kv_tp)
    stage_layers = pp_stage_layers(target_model.num_layers, pp)

    def stage_non_kv(stage: int, with_draft: bool = True) -> NonKvMemory:
        estimate = estimate_non_kv(
            target_model,
            draft_model if with_draft and stage == last else None,
            eagle3=inputs.spec.name == "eagle3",
            tp=layout.attention_tp,
            max_num_batched_tokens=inputs.max_num_batched_tokens,
            max_batch_size=shape.max_batch_size,
            num_layers=len(stage_layers[stage]),
        )
        given = inputs.non_kv_overrides.given()
        if given:
            estimate = replace(estimate, **given, source="estimate, parts given")
        return rule.non_kv(estimate)

    def stage_weights(stage: int, with_draft: bool = True) -> int:
        if inputs.weights_override is not None:
            return inputs.weights_override
        total = rank_weights(
            target_model,
            tp=tp,
            pp=pp,
            pp_stage=stage,
            include_mtp=inputs.spec.draft == "mtp",
            ep=layout.ep,
            attention_tp=layout.attention_tp,
        ).total_bytes
        if draft_model is not None and stage == last and with_draft:
            total += rank_weights(draft_model, tp=layout.draft_tp, pp=1, pp_stage=0).total_bytes
        return total

    stages = [
        _plan_stage(
            shape,
            managers,
            rule,
            None if not rule.derived else stage_weights(s),
            stage_non_kv(s),
            s,
        )
        for s in range(pp)
    ]
    # a draft on fewer TP ranks than the target (draft_tp < tp): the last stage's other
    # ranks hold the target's shard only; every rank must hold the same tokens
    target_only: _Stage | None = None
    if layout.draft_tp != tp:
        target_only = _plan_stage(
            shape,
            {"target": managers["target"]},
            rule,
            None if not rule.derived else stage_weights(last, with_draft=False),
            stage_non_kv(last, with_draft=False),
            last,
        )
    # a stage with no growing layer (only windows or recurrent state) holds any number
    # of 0-byte blocks: it never binds
    growing_stages = [s for s in range(pp) if any(_cost(m, s).slope for m in managers.values())]
    binding = min(growing_stages or [last], key=lambda s: (stages[s].blocks, -s))
    blocks = stages[binding].blocks
    binding_stage = stages[binding]
    if target_only is not None and target_only.blocks < blocks:
        binding_stage = target_only  # unusual: the draft-free ranks have less room
        blocks = target_only.blocks
    report = stages[last]
    tier_bytes = {"host": inputs.host_bytes, "disk": inputs.disk_bytes}

    def tier_split(tier: Tier, stage: int) -> BudgetSplit:
        return _split(tier_bytes[tier], managers, stage, tier)

    splits = {tier: tier_split(tier, last) for tier in ("host", "disk")}
    # every stage's rank has its own host and disk budget; the common count is the
    # smallest over the stages with growing layers
    tier_blocks = {
        tier: min(
            _common_blocks(managers, s, tier_split(tier, s), shape.tokens_per_block, fixed=False)
            for s in growing_stages or [last]
        )
        for tier in ("host", "disk")
    }
    growing = bool(growing_stages)
    if not growing:  # only windows and states: 0-byte blocks for every sequence
        blocks = shape.max_batch_size * -(-shape.max_seq_len // shape.tokens_per_block)
    splits["gpu"], tier_blocks["gpu"] = report.split, blocks
    warnings = list(inputs.notes)
    if inputs.engine == "kvbudget":
        capacity, notes = _capacity(shape, managers, binding_stage, tier_blocks)
        warnings += notes
    else:  # the engine model decides what fits; the ledger's own checks do not apply
        try:
            capacity, _ = _capacity(shape, managers, binding_stage, tier_blocks)
        except InfeasibleBudgetError:
            capacity = _ledger_capacity(shape, binding_stage, tier_blocks)
    capacity = replace(capacity, kv_groups=layout.kv_groups)
    if layout.ep > 1 and not _has_routed_experts(target_model):
        warnings.append(
            f"--ep {layout.ep} changes nothing: {target_model.name} has no routed experts"
        )
    if binding != last:
        warnings.append(
            f"PP stage {binding} binds capacity ({blocks} blocks vs "
            f"{report.blocks} on the last stage, reported here)"
        )
    try:
        weights: int | None = max(stage_weights(s) for s in range(pp))
    except ConfigError:
        weights = None  # a config too sparse to count weights: a given budget still plans
    if not rule.derived and rule.memory_bytes is not None and weights is not None:
        warnings += _given_budget_notes(rule, weights, stage_non_kv(last).total_bytes)
    warnings += _static_fraction_notes(rule, report)
    if tier_bytes["host"] and not growing:
        warnings.append("the host tier holds growing-layer blocks only; this model has none")
    node_gpus, host_memory_bytes = inputs.gpus_per_node, inputs.host_memory_bytes
    if host_memory_bytes is not None and tier_bytes["host"] * node_gpus > host_memory_bytes:
        warnings.append(
            f"{_ranks(node_gpus)} per node pin{'s' if node_gpus == 1 else ''} "
            f"{format_bytes(tier_bytes['host'] * node_gpus)} of host KV cache "
            f"({format_bytes(tier_bytes['host'])} per rank) but the node has "
            f"{format_bytes(host_memory_bytes)} of host memory (--host-memory); lower "
            "--host-budget (it is per rank) or --gpus-per-node"
        )
    plan_budget = Budget(
        gpu_bytes=report.gpu_bytes,
        host_bytes=tier_bytes["host"],
        disk_bytes=tier_bytes["disk"],
        gpu_source=rule.describe(),
        gpu_name=rule.gpu_name,
        gpu_memory_bytes=rule.memory_bytes,
        weights_bytes=report.weights_bytes,
        reserve_bytes=None if report.non_kv is None else report.non_kv.total_bytes,
        memory_fraction=float(rule.fraction) if rule.derived else None,
        memory_rule=rule.rule if rule.derived else None,
        non_kv=report.non_kv,
        gpus_per_node=node_gpus,
        host_memory_bytes=host_memory_bytes,
    )
    dtp = layout.draft_tp
    ledger = Plan(
        target=target_model.name,
        draft=draft_model.name if draft_model else None,
        target_path=target_model.location,
        draft_path=draft_model.location if draft_model else None,
        spec=inputs.spec.name,
        tp=tp,
        pp=pp,
        draft_tp=dtp if dtp != tp else None,
        dp=layout.dp,
        dp_attention=layout.dp_attention,
        ep=layout.ep,
        pp_stage=last,
        binding_pp_stage=binding,
        kv_dtype=shape.kv_dtype,
        tokens_per_block=shape.tokens_per_block,
        budget=plan_budget,
        managers=tuple(
            _manager_plan(shape, m, last, splits, tier_blocks) for m in managers.values()
        ),
        capacity=capacity,
        stages=tuple(
            st.report(i, "all" if target_only is None or i != last else _ranks_text(0, dtp))
            for i, st in enumerate(stages)
        )
        + (() if target_only is None else (target_only.report(last, _ranks_text(dtp, tp)),)),
        warnings=tuple(warnings),
        vocab_size=target_model.vocab_size,
        spec_reason=inputs.spec_reason,
    )
    engine_inputs = EngineInputs(
        target=target_model,
        draft=draft_model,
        spec=inputs.spec.name,
        max_draft_len=shape.lookahead_tokens,
        tp=layout.attention_tp,  # the engines split one sequence's KV over these ranks
        pp=pp,
        kv_dtype=parse_dtype(shape.kv_dtype),
        state_dtype=inputs.state_dtype,
        ssm_state_dtype=inputs.ssm_state_dtype,
        tokens_per_block=shape.tokens_per_block,
        max_seq_len=shape.max_seq_len,
        max_batch_size=shape.max_batch_size,
        gpu_kv_bytes=min(st.gpu_bytes for st in stages),
        host_bytes=tier_bytes["host"],
        gpu_memory_bytes=rule.memory_bytes,
        weights_bytes=weights,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        async_scheduling=inputs.async_scheduling,
        enable_prefix_caching=inputs.enable_prefix_caching,
        launch_tp=tp,
        dp=layout.dp,
        dp_attention=layout.dp_attention,
        ep=layout.ep,
    )
    return with_engine(ledger, engine_inputs, inputs.engine)


def _static_fraction_notes(rule: GpuBudgetRule, report: _Stage) -> list[str]:
    """A warning when ``mem_fraction_static`` leaves too little for activations."""
    if not (rule.derived and rule.rule == "mem_fraction_static" and report.non_kv is not None):
        return []
    assert rule.memory_bytes is not None and report.weights_bytes is not None
    slack = rule.memory_bytes - report.weights_bytes - report.gpu_bytes
    need = report.non_kv.total_bytes
    if need <= slack:
        return []
    return [
        f"--mem-fraction-static {rule.fraction_text} leaves {format_bytes(slack)} "
        f"outside weights and KV, less than the {format_bytes(need)} of activations, "
        "CUDA graphs and runtime estimated: lower the fraction or "
        "--max-num-batched-tokens"
    ]


Managers = dict[Role, _Manager]  # in role order: target, then draft


def _managers(shape: CostSettings, inputs: PlanInputs, draft_tp: int) -> Managers:
    """The managers of ``inputs.spec`` with their per-stage costs; draft layers on the
    last stage (a separate draft's KV split over ``draft_tp`` ranks)."""
    last = shape.pp - 1
    mtp_in_target = inputs.spec.draft == "mtp" and not inputs.separate_draft_cache
    target_layers: LayerSelection = "all" if mtp_in_target else "model"
    target = inputs.target
    managers: Managers = {
        "target": _Manager(
            role="target",
            model=target,
            layers=target_layers,
            details=tuple(
                shape.detail(target, target_layers, s, shape.pp) for s in range(shape.pp)
            ),
        )
    }
    if inputs.draft is not None:
        draft_detail = shape.detail(inputs.draft, "model", 0, 1, tp=draft_tp)
        managers["draft"] = _Manager(
            role="draft",
            model=inputs.draft,
            layers="model",
            details=tuple(draft_detail if s == last else None for s in range(shape.pp)),
        )
    elif inputs.spec.draft == "mtp" and inputs.separate_draft_cache:
        mtp_detail = shape.detail(target, "mtp", last, shape.pp)
        managers["draft"] = _Manager(
            role="draft",
            model=target,
            layers="mtp",
            details=tuple(mtp_detail if s == last else None for s in range(shape.pp)),
        )
    return managers


def _split(total_bytes: int, managers: Managers, stage: int, tier: Tier) -> BudgetSplit:
    """``total_bytes`` of ``tier`` split between the managers' costs on ``stage``."""
    draft = managers.get("draft")
    return split_budget(
        total_bytes,
        target=_cost(managers["target"], stage),
        draft=_cost(draft, stage) if draft is not None else CacheCost(0),
        tier=tier,
    )


def _share(split: BudgetSplit, role: Role) -> int:
    """The bytes of ``split`` that go to ``role``."""
    return split.target if role == "target" else split.draft


def _plan_stage(
    shape: CostSettings,
    managers: Managers,
    rule: GpuBudgetRule,
    weights: int | None,
    non_kv: NonKvMemory,
    stage: int,
) -> _Stage:
    """Split one stage's GPU budget and count the whole blocks every manager holds."""
    budget = rule.kv_bytes(weights or 0, non_kv, pp_stage=stage)
    try:
        split = _split(budget, managers, stage, "gpu")
    except InfeasibleBudgetError:
        raise _infeasible_fixed(budget, managers, stage, shape) from None
    blocks = _common_blocks(managers, stage, split, shape.tokens_per_block)
    return _Stage(
        gpu_bytes=budget,
        weights_bytes=weights,
        split=split,
        blocks=blocks,
        non_kv=non_kv if rule.derived else None,
    )


def _capacity(
    shape: CostSettings,
    managers: Managers,
    binding: _Stage,
    tier_blocks: dict[str, int],
) -> tuple[Capacity, list[str]]:
    """Tokens, concurrency and the longest sequence at the batch size, with warnings.

    Raises InfeasibleBudgetError when not even one sequence of max_seq_len fits.
    """
    bs, lookahead, batch = shape.tokens_per_block, shape.lookahead_tokens, shape.max_batch_size
    blocks = tier_blocks["gpu"]
    # a sequence never grows past max_seq_len, so neither does its lookahead (engines
    # reserve min(tokens + K, max_seq_len)): a full-length sequence spans its own blocks
    seq_blocks = -(-shape.max_seq_len // bs)
    warnings: list[str] = []
    growing = any(_cost(m, s).slope for m in managers.values() for s in range(shape.pp))
    if growing:
        fit = blocks // seq_blocks
        # window pools and state slots exist for max_batch_size sequences, and an engine
        # runs no more than that: concurrency is capped at the batch size.
        concurrency = min(fit, batch)
        per_seq = (blocks // batch) * bs
        at_batch = shape.max_seq_len if per_seq >= shape.max_seq_len else per_seq - lookahead
        if fit == 0:
            raise InfeasibleBudgetError(
                f"one sequence of max_seq_len {shape.max_seq_len} needs "
                f"{seq_blocks} blocks per manager but the GPU budget of "
                f"{format_bytes(binding.gpu_bytes)} per rank holds {blocks} after the fixed "
                f"cost of {format_bytes(binding.split.fixed_bytes)}; the longest sequence that "
                f"fits is {max(blocks * bs - lookahead, 0)} tokens: lower --max-seq-len, raise "
                "--kv-budget/--memory-fraction, use a smaller --kv-dtype, or raise --tp/--pp"
            )
        if fit > batch:
            warnings.append(
                f"the GPU blocks hold {count_of(fit, 'sequence')} of max_seq_len "
                f"{shape.max_seq_len} but "
                f"max_batch_size is {batch}: at most {batch} run at once (raise "
                "--max-batch-size to use the rest, or lower --kv-budget/--memory-fraction)"
            )
        if fit < batch:
            warnings.append(
                f"only {count_of(concurrency, 'sequence')} of max_seq_len {shape.max_seq_len} "
                "fit at once "
                f"(max_batch_size is {batch}); at the full batch each sequence can hold "
                f"{max(at_batch, 0)} tokens"
            )
    else:
        concurrency, at_batch = batch, shape.max_seq_len
        warnings.append(
            "every cached layer is sliding-window or recurrent: the cache is a fixed cost "
            f"for max_batch_size={batch} sequences of any length; the rest of the GPU budget "
            "is unused (raise --max-batch-size to use it)"
        )
    capacity = Capacity(
        tokens=blocks * bs,
        gpu_blocks=blocks,
        host_blocks=tier_blocks["host"],
        disk_blocks=tier_blocks["disk"],
        host_tokens=tier_blocks["host"] * bs,
        disk_tokens=tier_blocks["disk"] * bs,
        max_seq_len=shape.max_seq_len,
        max_draft_len=lookahead,
        lookahead_tokens=lookahead,
        max_batch_size=batch,
        max_concurrency=concurrency,
        max_seq_len_at_batch=max(at_batch, 0),
    )
    return capacity, warnings


def _ledger_capacity(shape: CostSettings, binding: _Stage, tier_blocks: dict[str, int]) -> Capacity:
    """Capacity of a split too small for one sequence in kvbudget's own cache.

    Only used under another engine, whose model then says what that engine holds.
    """
    bs = shape.tokens_per_block
    return Capacity(
        tokens=binding.blocks * bs,
        gpu_blocks=binding.blocks,
        host_blocks=tier_blocks["host"],
        disk_blocks=tier_blocks["disk"],
        host_tokens=tier_blocks["host"] * bs,
        disk_tokens=tier_blocks["disk"] * bs,
        max_seq_len=shape.max_seq_len,
        max_draft_len=shape.lookahead_tokens,
        lookahead_tokens=shape.lookahead_tokens,
        max_batch_size=shape.max_batch_size,
        max_concurrency=0,
        max_seq_len_at_batch=0,
    )


def _has_routed_experts(model: ModelSpec) -> bool:
    """Whether ``model`` has routed-expert weights (False when they cannot be counted)."""
    try:
        return rank_weights(model).routed_experts_bytes > 0
    except ConfigError:
        return False


def _ranks_text(start: int, end: int) -> str:
    """TP ranks ``start .. end - 1`` as text: ``"0"``, ``"1-3"``."""
    return str(start) if end - start == 1 else f"{start}-{end - 1}"


def _manager_plan(
    shape: CostSettings,
    m: _Manager,
    stage: int,
    splits: dict[str, BudgetSplit],
    tier_blocks: dict[str, int],
) -> ManagerPlan:
    detail = m.details[stage]
    assert detail is not None
    block_bytes = detail.cost.slope * shape.tokens_per_block
    tiers = {}
    for tier in ("gpu", "host", "disk"):
        split = splits[tier]
        share = _share(split, m.role)
        fixed = detail.cost.intercept if tier == "gpu" else 0
        blocks = tier_blocks[tier]  # a 0-byte manager holds them too, for lockstep
        tiers[tier] = TierPlan(
            tier=split.tier,
            bytes=share,
            blocks=blocks,
            tokens=blocks * shape.tokens_per_block,
            padding_bytes=share - fixed - blocks * block_bytes,
        )
    return ManagerPlan(
        role=m.role,
        model=m.model.name,
        layers=m.layers,
        num_layers=detail.num_layers,
        kv_dtype=shape.kv_dtype,
        tokens_per_block=shape.tokens_per_block,
        slope_bytes_per_token=detail.cost.slope,
        fixed_bytes=detail.cost.intercept,
        window_bytes=detail.window_bytes,
        window_groups=detail.window_groups,
        state_bytes_per_seq=detail.state_bytes_per_seq,
        max_batch_size=shape.reserve_batch,
        cached_states=detail.cached_states,
        state_bytes_per_checkpoint=detail.state_bytes_per_checkpoint,
        gpu=tiers["gpu"],
        host=tiers["host"],
        disk=tiers["disk"],
    )


def _cost(m: _Manager, stage: int) -> CacheCost:
    d = m.details[stage]
    return d.cost if d else CacheCost(0)


def _common_blocks(
    managers: Managers,
    stage: int,
    split: BudgetSplit,
    tokens_per_block: int,
    *,
    fixed: bool = True,
) -> int:
    """Whole blocks every manager with growing layers on ``stage`` can hold."""
    counts = []
    for role, m in managers.items():
        cost = _cost(m, stage)
        if cost.slope == 0:
            continue
        room = _share(split, role) - (cost.intercept if fixed else 0)
        counts.append(max(0, room) // (cost.slope * tokens_per_block))
    return min(counts) if counts else 0


def _infeasible_fixed(
    budget: int, managers: Managers, stage: int, shape: CostSettings
) -> InfeasibleBudgetError:
    """The error for a GPU budget below the fixed costs, with the batch that would fit."""
    batch = shape.reserve_batch
    fixed = sum(_cost(m, stage).intercept for m in managers.values())
    slope = sum(_cost(m, stage).slope for m in managers.values())
    seq_tokens = -(-shape.max_seq_len // shape.tokens_per_block) * (shape.tokens_per_block)
    per_seq = fixed // batch + slope * seq_tokens
    fits = budget // per_seq if per_seq else 0
    advice = (
        f"at most {count_of(fits, 'sequence')} of {shape.max_seq_len} tokens fit: lower "
        "--max-batch-size "
        f"(to {fits}) or --max-seq-len"
        if fits
        else f"not even one sequence of {shape.max_seq_len} tokens fits "
        f"({format_bytes(per_seq)} each): lower --max-batch-size and --max-seq-len"
    )
    return InfeasibleBudgetError(
        f"the GPU budget of {format_bytes(budget)} ({budget} bytes) per rank"
        f"{f' on PP stage {stage}' if shape.pp > 1 else ''} cannot cover the fixed cost of "
        f"{format_bytes(fixed)} ({fixed} bytes: "
        f"sliding-window blocks and recurrent state for max_batch_size={batch}); {advice}, "
        "raise --kv-budget/--memory-fraction, use a smaller --kv-dtype/--state-dtype, or raise "
        "--tp/--pp"
    )


def _given_budget_notes(rule: GpuBudgetRule, weights: int, non_kv: int) -> list[str]:
    """A warning when a given --kv-budget plus weights and non-KV memory overflow the GPU."""
    assert rule.given_bytes is not None and rule.memory_bytes is not None
    need = rule.given_bytes + weights + non_kv
    if need <= rule.memory_bytes:
        return []
    return [
        f"--kv-budget {format_bytes(rule.given_bytes)} + weights {format_bytes(weights)} + "
        f"non-KV memory {format_bytes(non_kv)} = {format_bytes(need)} per rank is more "
        f"than the {format_bytes(rule.memory_bytes)} of {rule.gpu_name} (--gpu/--gpu-memory); "
        "lower --kv-budget, or name the GPU you run on"
    ]


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


_PLAN_DOC = """Plan the KV caches of one rank of a speculative-decoding deployment.

Arguments mirror the ``kvbudget plan`` flags. Byte arguments accept integers or
strings with units (``"40GiB"``, ``"64GB"``). With no arguments: Llama-3.1-8B-Instruct
with its EAGLE3 head on one H200, no host tier (``host_budget`` 0: no engine offloads
unless asked).

The GPU budget per rank is ``kv_budget`` when given; otherwise it is derived from the
GPU's memory, the weights on the rank and the memory that is neither (activations at
``max_num_batched_tokens``, CUDA graphs, runtime: :mod:`kvbudget.memory`; each part
can be given as ``activation_bytes``, ``cuda_graph_bytes``, ``runtime_bytes``, or all
of it as ``reserve``), under one engine's knob: ``memory_fraction`` (TensorRT-LLM's
``free_gpu_memory_fraction``, the default 0.9), ``gpu_memory_utilization`` (vLLM) or
``mem_fraction_static`` (SGLang); :mod:`kvbudget.budget` gives their formulas.

Parallelism: ``tp``, ``pp``; ``draft_tp`` (a draft on fewer TP ranks: each kind of
rank is planned, the tighter sets capacity); ``dp`` data-parallel groups, with
``dp_attention`` inside the ``tp`` ranks (attention split ``tp / dp`` ways); ``ep``
routed experts whole over ``ep`` ranks. ``capacity`` is per rank;
``capacity.total_tokens`` adds up the DP groups.

``engine`` picks whose cache is planned: ``"kvbudget"`` (the project's own
:class:`~kvbudget.SpecDecodeCache`: window pools and recurrent states reserved for
``max_batch_size`` sequences up front), or ``"vllm"``, ``"sglang"``, ``"trtllm"``: what
that engine will really allocate with the settings :func:`kvbudget.emit` writes
(``plan.engine``), its capacity in ``plan.capacity``. The per-manager split then
reserves fixed costs for one sequence only (the engines draw windows and states from
their pools per request). ``max_num_batched_tokens`` (the prefill chunk),
``async_scheduling`` and ``enable_prefix_caching`` are engine settings that change
what the engine holds (vLLM charges each sliding-window group the tokens in flight).

``cached_states`` (engine ``"kvbudget"``, models with recurrent layers): how many
recurrent states the cache keeps at block boundaries so that a prefix hit can restart
from one (one state each, on top of the running slots); default ``max_batch_size``
with prefix caching on, else 0. Other engines size their own.

Raises:
    InvalidArgumentError: bad input (sizes, tp/pp, dtype, unknown GPU, spec/draft mix).
    ConfigError: a model cannot be loaded.
    InfeasibleBudgetError: the budget cannot hold the fixed costs or one sequence.
"""


def _resolve_then_build(resolve: Callable[P, PlanInputs]) -> Callable[P, Plan]:
    """``build_plan(resolve(...))`` under ``resolve``'s signature: :func:`plan`'s
    parameters are declared once, on :func:`~kvbudget.plan_inputs.resolve_inputs`."""

    @functools.wraps(resolve)
    def plan(*args: P.args, **kwargs: P.kwargs) -> Plan:
        return build_plan(resolve(*args, **kwargs))

    plan.__doc__ = _PLAN_DOC
    plan.__name__ = plan.__qualname__ = "plan"
    plan.__module__ = __name__
    return plan


plan = _resolve_then_build(resolve_inputs)

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_HOST_BUDGET",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_TARGET",
    "EAGLE3_DRAFTS",
    "SPEC_MODES",
    "SPEC_MODE_TABLE",
    "build_plan",
    "plan",
    "resolve_inputs",
]
