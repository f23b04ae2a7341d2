"""Planning: from models, devices and budgets to a per-rank :class:`~kvbudget.plan_types.Plan`.

``plan(...)`` is ``build_plan(resolve_deployment(...))``: :mod:`kvbudget.deployment` turns
the arguments into one checked value (:class:`~kvbudget.deployment.Deployment`), then the
pure :func:`build_plan` makes one cache manager per role (:data:`SPEC_MODE_TABLE` says
which), prices them per rank (:mod:`kvbudget.cost`), takes the per-rank GPU budget
(given, or derived from a GPU preset minus weights and non-KV memory), splits every tier
between the managers (:mod:`kvbudget.split`) and rounds to whole blocks: the
:class:`~kvbudget.ledger.Ledger`. The deployment's engine model then makes the engine's
whole plan from it (pools, capacity, settings, log, warnings, refusals); a refusal is
raised as :class:`~kvbudget.errors.EngineRefusedError`.

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
from kvbudget.deployment import (
    DEFAULT_GPU,
    DEFAULT_HOST_BUDGET,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TARGET,
    EAGLE3_DRAFTS,
    Deployment,
    resolve_deployment,
)
from kvbudget.errors import ConfigError, EngineRefusedError, InfeasibleBudgetError
from kvbudget.ledger import Ledger
from kvbudget.memory import NonKvMemory, estimate_non_kv
from kvbudget.model import ModelSpec
from kvbudget.plan_types import (
    Budget,
    EnginePlan,
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
from kvbudget.weights.check import headers_notes

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


def build_plan(deployment: Deployment) -> Plan:
    """The plan of ``deployment`` (:func:`~kvbudget.deployment.resolve_deployment`):
    kvbudget's ledger, then the deployment's engine model on it. Pure.

    Raises:
        InfeasibleBudgetError: the budget cannot hold the fixed costs or one sequence.
        EngineRefusedError: the engine would refuse to start (its plan attached).
    """
    ledger = build_ledger(deployment)
    engine = deployment.engine.plan(deployment, ledger)
    plan = _assemble(deployment, ledger, engine)
    if engine.refusals:
        deployment_warnings = tuple(w for w in plan.warnings if w not in engine.warnings)
        raise EngineRefusedError(" ".join(engine.refusals), plan=plan, warnings=deployment_warnings)
    return plan


def _assemble(d: Deployment, ledger: Ledger, engine: EnginePlan) -> Plan:
    """The :class:`Plan` of a ledger and the engine plan made from it."""
    target, draft, layout = d.target, d.draft, d.parallel
    return Plan(
        target=target.name,
        draft=draft.name if draft else None,
        target_path=target.location,
        draft_path=draft.location if draft else None,
        spec=d.spec.name,
        tp=layout.tp,
        pp=layout.pp,
        draft_tp=layout.draft_tp if layout.draft_tp != layout.tp else None,
        dp=layout.dp,
        dp_attention=layout.dp_attention,
        ep=layout.ep,
        pp_stage=ledger.pp_stage,
        binding_pp_stage=ledger.binding_pp_stage,
        kv_dtype=d.kv_dtype,
        tokens_per_block=d.tokens_per_block,
        budget=ledger.budget,
        managers=ledger.managers,
        engine=engine,
        stages=ledger.stages,
        warnings=ledger.warnings + engine.warnings + _unplaced_tier_warnings(d, engine),
        vocab_size=target.vocab_size,
        spec_reason=d.spec_reason,
        target_revision=target.revision,
        draft_revision=draft.revision if draft else None,
        weights_source=_weights_source(d),
    )


def _unplaced_tier_warnings(d: Deployment, engine: EnginePlan) -> tuple[str, ...]:
    """A host or disk budget the engine plan places in no pool: the engine (as kvbudget
    models it) has no such tier, so the budget is in none of its settings (unless the
    engine model says so itself, naming the flag)."""
    tiers = {pool.tier for pool in engine.pools}
    out = []
    for tier, flag, budget in (
        ("host", "--host-budget", d.host_bytes),
        ("disk", "--disk-budget", d.disk_bytes),
    ):
        if budget and tier not in tiers and not any(flag in w for w in engine.warnings):
            out.append(
                f"{flag} {format_bytes(budget)} changes nothing: {d.engine.summary} has no "
                f"{tier} KV tier in kvbudget's model of it (its pools: "
                f"{', '.join(sorted(tiers))}), so no setting it emits holds it; drop "
                f"{flag}, or plan the tier with --engine kvbudget"
            )
    return tuple(out)


def _weights_source(d: Deployment) -> dict[str, str]:
    """Where each model's weights figure comes from, by role."""
    models = {"target": d.target, "draft": d.draft}
    return {
        role: "given (--weights-bytes)"
        if d.weights_override is not None
        else model.checkpoint.source
        if model.checkpoint is not None
        else "inventory"
        for role, model in models.items()
        if model is not None
    }


def _stage_non_kv(d: Deployment, stage: int, *, with_draft: bool = True) -> NonKvMemory:
    """The non-KV memory of PP stage ``stage``'s rank, under the budget rule."""
    layout, last = d.parallel, d.parallel.pp - 1
    own = pp_stage_layers(d.target.num_layers, layout.pp)[stage]
    estimate = estimate_non_kv(
        d.target,
        d.draft if with_draft and stage == last else None,
        eagle3=d.spec.name == "eagle3",
        tp=layout.attention_tp,
        max_num_batched_tokens=d.max_num_batched_tokens,
        max_batch_size=d.max_batch_size,
        num_layers=len(own),
        layers=[d.target.layers[i] for i in own],
        state_dtype=d.ssm_state_dtype or d.state_dtype_value,
    )
    given = d.non_kv_overrides.given()
    if given:
        estimate = replace(estimate, **given, source="estimate, parts given")
    return d.gpu_rule.non_kv(estimate)


def _stage_weights(d: Deployment, stage: int, *, with_draft: bool = True) -> int:
    """Weight bytes on PP stage ``stage``'s rank (the draft's on the last stage)."""
    if d.weights_override is not None:
        return d.weights_override
    layout = d.parallel
    total = rank_weights(
        d.target,
        tp=layout.tp,
        pp=layout.pp,
        pp_stage=stage,
        include_mtp=d.spec.draft == "mtp",
        ep=layout.ep,
        attention_tp=layout.attention_tp,
    ).total_bytes
    if d.draft is not None and stage == layout.pp - 1 and with_draft:
        total += rank_weights(d.draft, tp=layout.draft_tp, pp=1, pp_stage=0).total_bytes
    return total


def _stage(d: Deployment, managers: Managers, stage: int, *, with_draft: bool = True) -> _Stage:
    """PP stage ``stage`` planned: its budget, split and common blocks."""
    weights = _stage_weights(d, stage, with_draft=with_draft) if d.gpu_rule.derived else None
    return _plan_stage(d, managers, weights, _stage_non_kv(d, stage, with_draft=with_draft), stage)


def build_ledger(d: Deployment) -> Ledger:
    """kvbudget's ledger of ``d``: every stage priced and split, every tier's common
    blocks. Pure; raises InfeasibleBudgetError when a stage cannot hold the fixed costs."""
    layout, tpb = d.parallel, d.tokens_per_block
    last = layout.pp - 1
    managers = _managers(d)
    stages = [_stage(d, managers, s) for s in range(layout.pp)]
    # a draft on fewer TP ranks than the target (draft_tp < tp): the last stage's other
    # ranks hold the target's shard only; every rank must hold the same tokens
    target_only: _Stage | None = None
    if layout.draft_tp != layout.tp:
        target_only = _stage(d, {"target": managers["target"]}, last, with_draft=False)
    # a stage with no growing layer (only windows or recurrent state) holds any number
    # of 0-byte blocks: it never binds
    growing = [s for s in range(layout.pp) if any(_cost(m, s).slope for m in managers.values())]
    binding = min(growing or [last], key=lambda s: (stages[s].blocks, -s))
    binding_stage = stages[binding]
    if target_only is not None and target_only.blocks < binding_stage.blocks:
        binding_stage = target_only  # unusual: the draft-free ranks have less room
    tier_bytes = {"host": d.host_bytes, "disk": d.disk_bytes}
    splits = {tier: _split(tier_bytes[tier], managers, last, tier) for tier in ("host", "disk")}
    # every stage's rank has its own host and disk budget; the common count is the
    # smallest over the stages with growing layers
    tier_blocks = {
        tier: min(
            _common_blocks(
                managers, s, _split(tier_bytes[tier], managers, s, tier), tpb, fixed=False
            )
            for s in growing or [last]
        )
        for tier in ("host", "disk")
    }
    blocks = binding_stage.blocks
    if not growing:  # only windows and states: 0-byte blocks for every sequence
        blocks = d.max_batch_size * -(-d.max_seq_len // tpb)
    splits["gpu"], tier_blocks["gpu"] = stages[last].split, blocks
    try:
        weights: int | None = max(_stage_weights(d, s) for s in range(layout.pp))
    except ConfigError:
        weights = None  # a config too sparse to count weights: a given budget still plans
    warnings = _ledger_warnings(d, stages, binding, weights, bool(growing))
    dtp = layout.draft_tp
    reports = tuple(
        st.report(i, "all" if target_only is None or i != last else _ranks_text(0, dtp))
        for i, st in enumerate(stages)
    )
    if target_only is not None:
        reports += (target_only.report(last, _ranks_text(dtp, layout.tp)),)
    return Ledger(
        managers=tuple(_manager_plan(d, m, last, splits, tier_blocks) for m in managers.values()),
        budget=_budget(d, stages[last]),
        stages=reports,
        pp_stage=last,
        binding_pp_stage=binding,
        gpu_blocks=blocks,
        host_blocks=tier_blocks["host"],
        disk_blocks=tier_blocks["disk"],
        growing=bool(growing),
        binding_gpu_bytes=binding_stage.gpu_bytes,
        binding_fixed_bytes=binding_stage.split.fixed_bytes,
        max_weights_bytes=weights,
        warnings=tuple(warnings),
    )


def _ledger_warnings(
    d: Deployment, stages: list[_Stage], binding: int, weights: int | None, growing: bool
) -> list[str]:
    """What the ledger tells the deployer: the deployment's notes first."""
    warnings = list(d.notes)
    layout, last = d.parallel, d.parallel.pp - 1
    if d.weights_override is None:
        warnings += headers_notes(d.target, include_mtp=d.spec.draft == "mtp")
        warnings += headers_notes(d.draft) if d.draft is not None else []
    if d.pre_load_bytes is not None and not d.engine.reads_pre_load_bytes:
        warnings.append(
            f"--pre-load-bytes changes nothing: {d.engine.summary} takes no setting it "
            "enters (it is SGLang's: the memory its --mem-fraction-static allows for)"
        )
    if layout.ep > 1 and not _has_routed_experts(d.target):
        warnings.append(f"--ep {layout.ep} changes nothing: {d.target.name} has no routed experts")
    if binding != last:
        warnings.append(
            f"PP stage {binding} binds capacity ({stages[binding].blocks} blocks vs "
            f"{stages[last].blocks} on the last stage, reported here)"
        )
    rule = d.gpu_rule
    if not rule.derived and rule.memory_bytes is not None and weights is not None:
        warnings += _given_budget_notes(rule, weights, _stage_non_kv(d, last).total_bytes)
    warnings += _static_fraction_notes(rule, stages[last])
    if d.host_bytes and not growing:
        warnings.append("the host tier holds growing-layer blocks only; this model has none")
    node_gpus, host_memory_bytes = d.gpus_per_node, d.host_memory_bytes
    if host_memory_bytes is not None and d.host_bytes * node_gpus > host_memory_bytes:
        warnings.append(
            f"{_ranks(node_gpus)} per node pin{'s' if node_gpus == 1 else ''} "
            f"{format_bytes(d.host_bytes * node_gpus)} of host KV cache "
            f"({format_bytes(d.host_bytes)} per rank) but the node has "
            f"{format_bytes(host_memory_bytes)} of host memory (--host-memory); lower "
            "--host-budget (it is per rank) or --gpus-per-node"
        )
    return warnings


def _budget(d: Deployment, report: _Stage) -> Budget:
    """The reported stage's budget as the plan shows it."""
    rule = d.gpu_rule
    return Budget(
        gpu_bytes=report.gpu_bytes,
        host_bytes=d.host_bytes,
        disk_bytes=d.disk_bytes,
        gpu_source=rule.describe(),
        gpu_name=rule.gpu_name,
        gpu_memory_bytes=rule.memory_bytes,
        weights_bytes=report.weights_bytes,
        reserve_bytes=None if report.non_kv is None else report.non_kv.total_bytes,
        memory_fraction=float(rule.fraction) if rule.derived else None,
        memory_rule=rule.rule if rule.derived else None,
        non_kv=report.non_kv,
        gpus_per_node=d.gpus_per_node,
        host_memory_bytes=d.host_memory_bytes,
    )


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


def _managers(d: Deployment) -> Managers:
    """The managers of ``d.spec`` with their per-stage costs; draft layers on the last
    stage (a separate draft's KV split over its own ``draft_kv_tp`` ranks)."""
    pp = d.parallel.pp
    last = pp - 1
    # (an MTP draft model, Gemma-4's assistant, is a draft of its own)
    mtp_in_target = d.spec.draft == "mtp" and not d.separate_draft_cache and d.draft is None
    target_layers: LayerSelection = "all" if mtp_in_target else "model"
    target = d.target
    managers: Managers = {
        "target": _Manager(
            role="target",
            model=target,
            layers=target_layers,
            details=tuple(d.cost_detail(target, target_layers, s, pp) for s in range(pp)),
        )
    }
    if d.draft is not None:
        draft_detail = d.cost_detail(d.draft, "model", 0, 1, tp=d.parallel.draft_kv_tp)
        managers["draft"] = _Manager(
            role="draft",
            model=d.draft,
            layers="model",
            details=tuple(draft_detail if s == last else None for s in range(pp)),
        )
    elif d.spec.draft == "mtp" and d.separate_draft_cache:
        mtp_detail = d.cost_detail(target, "mtp", last, pp)
        managers["draft"] = _Manager(
            role="draft",
            model=target,
            layers="mtp",
            details=tuple(mtp_detail if s == last else None for s in range(pp)),
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
    d: Deployment,
    managers: Managers,
    weights: int | None,
    non_kv: NonKvMemory,
    stage: int,
) -> _Stage:
    """Split one stage's GPU budget and count the whole blocks every manager holds."""
    rule = d.gpu_rule
    budget = rule.kv_bytes(weights or 0, non_kv, pp_stage=stage)
    try:
        split = _split(budget, managers, stage, "gpu")
    except InfeasibleBudgetError:
        raise _infeasible_fixed(budget, managers, stage, d) from None
    blocks = _common_blocks(managers, stage, split, d.tokens_per_block)
    return _Stage(
        gpu_bytes=budget,
        weights_bytes=weights,
        split=split,
        blocks=blocks,
        non_kv=non_kv if rule.derived else None,
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
    shape: Deployment,
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
    budget: int, managers: Managers, stage: int, shape: Deployment
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
        f"{f' on PP stage {stage}' if shape.parallel.pp > 1 else ''} cannot cover the fixed "
        "cost of "
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


def _resolve_then_build(resolve: Callable[P, Deployment]) -> Callable[P, Plan]:
    """``build_plan(resolve(...))`` under ``resolve``'s signature: :func:`plan`'s
    parameters are declared once, on :func:`~kvbudget.deployment.resolve_deployment`."""

    @functools.wraps(resolve)
    def plan(*args: P.args, **kwargs: P.kwargs) -> Plan:
        return build_plan(resolve(*args, **kwargs))

    plan.__doc__ = _PLAN_DOC
    plan.__name__ = plan.__qualname__ = "plan"
    plan.__module__ = __name__
    return plan


plan = _resolve_then_build(resolve_deployment)

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_HOST_BUDGET",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_TARGET",
    "EAGLE3_DRAFTS",
    "SPEC_MODES",
    "SPEC_MODE_TABLE",
    "build_ledger",
    "build_plan",
    "plan",
    "resolve_deployment",
]
