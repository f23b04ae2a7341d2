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

from dataclasses import dataclass, replace
from typing import Literal, get_args

from kvbudget._validate import require_int
from kvbudget.budget import GpuBudgetRule, gpu_budget_rule
from kvbudget.cost import CacheCost, CostDetail, cache_cost_detail, pp_stage_layers
from kvbudget.dtypes import parse_dtype
from kvbudget.engines import ENGINE_NAMES, with_engine
from kvbudget.engines.inputs import DEFAULT_MAX_NUM_BATCHED_TOKENS, EngineInputs
from kvbudget.errors import ConfigError, InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import MLALayer
from kvbudget.memory import NonKvMemory, estimate_non_kv
from kvbudget.model import ModelSpec, load_model
from kvbudget.plan_types import (
    Budget,
    Capacity,
    ManagerPlan,
    Plan,
    Role,
    StagePlan,
    TierPlan,
)
from kvbudget.split import BudgetSplit, Tier, split_budget
from kvbudget.units import count_of, format_bytes, parse_bytes, rounding_note
from kvbudget.weights import weights_bytes as rank_weights

SpecMode = Literal["eagle3", "mtp", "draft-target", "ngram", "none"]
SPEC_MODES: tuple[str, ...] = get_args(SpecMode)

DEFAULT_TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_GPU = "H200"
DEFAULT_HOST_BUDGET = 0  # no engine offloads to host memory unless asked
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


@dataclass(frozen=True, kw_only=True)
class _Shape:
    """The per-sequence settings every manager is costed with."""

    kv_dtype: str
    state_dtype: str
    tokens_per_block: int
    max_batch_size: int
    reserve_batch: int  # sequences whose fixed costs (windows, states) are reserved
    cached_states: int  # recurrent states kept at block boundaries (prefix reuse)
    max_seq_len: int
    lookahead_tokens: int
    tp: int
    pp: int

    def detail(
        self,
        model: ModelSpec,
        layers: Literal["model", "mtp", "all"],
        stage: int,
        stages: int,
        tp: int | None = None,
    ) -> CostDetail:
        return cache_cost_detail(
            model,
            kv_dtype=self.kv_dtype,
            state_dtype=self.state_dtype,
            tokens_per_block=self.tokens_per_block,
            max_batch_size=self.reserve_batch,
            max_seq_len=self.max_seq_len,
            tp=self.tp if tp is None else tp,
            pp=stages,
            pp_stage=stage,
            layers=layers,
            lookahead_tokens=self.lookahead_tokens,
            cached_states=self.cached_states,
        )


def _resolve(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def _auto_spec(target: ModelSpec, draft: str | ModelSpec | None) -> tuple[str, str]:
    """The speculation mode ``spec="auto"`` picks, and why, in words."""
    if draft is not None:
        model = _resolve(draft)
        if model.is_eagle3:
            return "eagle3", f"--draft {model.name} is an EAGLE3 head"
        return "draft-target", f"--draft {model.name} is a model, not a head"
    if target.name in EAGLE3_DRAFTS:
        return "eagle3", f"{EAGLE3_DRAFTS[target.name]} is the EAGLE3 head preset for it"
    if target.mtp_layers:
        return "mtp", f"{target.name} ships {len(target.mtp_layers)} MTP layer(s)"
    return "none", (
        f"no EAGLE3 head preset and no MTP layers for {target.name} (pass --draft or "
        "--spec ngram to speculate)"
    )


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
        if model.is_eagle3:
            raise InvalidArgumentError(
                f"{model.name} is an EAGLE3 head, not a draft model; use --spec eagle3 with it"
            )
        return model
    if draft is not None:
        raise InvalidArgumentError(f"spec {spec} uses no draft model; drop --draft")
    if spec == "mtp" and not target.mtp_layers:
        raise InvalidArgumentError(
            f"{target.name} has no MTP layers (num_nextn_predict_layers); choose another --spec"
        )
    return None


def _draft_warnings(target: ModelSpec, draft: ModelSpec | None, seq_len: int) -> list[str]:
    """What to know about a draft next to ``target`` at ``seq_len`` tokens. Pure."""
    if draft is None:
        return []
    warnings = []
    if not draft.is_eagle3 and draft.vocab_size != target.vocab_size:
        warnings.append(
            f"draft {draft.name} has vocab_size {draft.vocab_size:,}, target {target.name} "
            f"{target.vocab_size:,}: the target reads the draft's token ids as its own, "
            "right when both pad one tokenizer (Qwen2.5-0.5B's 151,936 next to Qwen2.5-7B's "
            "152,064), wrong for another family's tokenizer"
        )
    if draft.max_position_embeddings < seq_len:
        warnings.append(
            f"draft {draft.name} was trained on {draft.max_position_embeddings:,} positions, "
            f"fewer than max_seq_len {seq_len:,}: past them its proposals (and acceptance) "
            "may degrade; its KV is planned for the full length"
        )
    return warnings


def plan(
    target: str | ModelSpec = DEFAULT_TARGET,
    draft: str | ModelSpec | None = None,
    *,
    spec: str = "auto",
    kv_budget: int | str | None = None,
    host_budget: int | str = DEFAULT_HOST_BUDGET,
    disk_budget: int | str = 0,
    gpu: str | None = DEFAULT_GPU,
    gpu_memory: int | str | None = None,
    memory_fraction: float | str | None = None,
    gpu_memory_utilization: float | str | None = None,
    mem_fraction_static: float | str | None = None,
    reserve: int | str | None = None,
    activation_bytes: int | str | None = None,
    cuda_graph_bytes: int | str | None = None,
    runtime_bytes: int | str | None = None,
    weights_bytes: int | str | None = None,
    kv_dtype: str = "auto",
    state_dtype: str = "auto",
    tokens_per_block: int = 32,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_seq_len: int | None = None,
    max_draft_len: int = 3,
    tp: int = 1,
    pp: int = 1,
    draft_tp: int | None = None,
    dp: int = 1,
    dp_attention: bool = False,
    ep: int = 1,
    gpus_per_node: int | None = None,
    host_memory: int | str | None = None,
    separate_draft_cache: bool = False,
    engine: str = "kvbudget",
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    async_scheduling: bool = True,
    enable_prefix_caching: bool = True,
    cached_states: int | None = None,
) -> Plan:
    """Plan the KV caches of one rank of a speculative-decoding deployment.

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
    if spec != "auto" and spec not in SPEC_MODES:
        raise InvalidArgumentError(
            f"unknown spec {spec!r}; choose one of auto, {', '.join(SPEC_MODES)}"
        )
    require_int("tp", tp, minimum=1)
    require_int("pp", pp, minimum=1)
    layout = _layout(tp, draft_tp, dp, dp_attention, ep)
    dtp = layout.draft_tp
    require_int("tokens_per_block", tokens_per_block, minimum=1)
    require_int("max_batch_size", max_batch_size, minimum=1)
    require_int("max_draft_len", max_draft_len, minimum=0)
    engine_name = _engine_name(engine)
    if cached_states is not None:
        require_int("cached_states", cached_states)
        if engine_name != "kvbudget" and cached_states:
            raise InvalidArgumentError(
                f"cached_states sizes kvbudget's own cache; {engine_name} sizes its cached "
                "states itself: drop --cached-states or use --engine kvbudget"
            )
    require_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    for name, flag in (
        ("async_scheduling", async_scheduling),
        ("enable_prefix_caching", enable_prefix_caching),
        ("separate_draft_cache", separate_draft_cache),
    ):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {flag!r}")
    target_model = _resolve(target)
    if target_model.is_eagle3:
        raise InvalidArgumentError(
            f"{target_model.name} is an EAGLE3 draft head, not a target model; pass it as "
            "--draft and its base model as --target"
        )
    spec_reason = None
    if spec == "auto":
        spec, why = _auto_spec(target_model, draft)
        spec_reason = f"spec auto chose {spec}: {why}"
    if separate_draft_cache and spec != "mtp":
        raise InvalidArgumentError(
            f"--separate-draft-cache applies to --spec mtp only (got --spec {spec}); drop it"
        )
    if max_draft_len == 0 and spec not in ("none", "auto"):
        raise InvalidArgumentError(
            f"--max-draft-len 0 means no speculation; use --spec none instead of --spec {spec}"
        )
    draft_model = _resolve_draft(spec, target_model, draft)
    # "auto" is the target's dtype for every manager (engines run the draft in the
    # target's dtype), else the draft's when the target config names none.
    # A config that names no dtype (a quantized checkpoint) runs its activations, and so
    # its KV cache, in bf16 in every engine (vLLM's ``_get_and_verify_dtype`` default).
    auto_dtype = target_model.dtype or (draft_model.dtype if draft_model else None) or "bf16"
    if str(state_dtype).strip().lower() != "auto":
        parse_dtype(state_dtype, what="state_dtype")
    seq_len = target_model.max_position_embeddings if max_seq_len is None else max_seq_len
    require_int("max_seq_len", seq_len, minimum=1)
    shape = _Shape(
        kv_dtype=parse_dtype(kv_dtype, auto=auto_dtype).name,
        state_dtype=state_dtype,
        tokens_per_block=tokens_per_block,
        # an engine draws windows and states per request from its pool: the per-manager
        # split reserves them for one sequence, the engine model sizes the rest
        max_batch_size=max_batch_size,
        reserve_batch=max_batch_size if engine_name == "kvbudget" else 1,
        cached_states=(
            0
            if engine_name != "kvbudget"
            else cached_states
            if cached_states is not None
            else max_batch_size
            if enable_prefix_caching
            else 0
        ),
        max_seq_len=seq_len,
        lookahead_tokens=0 if spec == "none" else max_draft_len,
        tp=layout.attention_tp,  # the ranks one sequence's KV is split over
        pp=pp,
    )
    tier_bytes = {
        "host": parse_bytes(host_budget, name="host_budget"),
        "disk": parse_bytes(disk_budget, name="disk_budget"),
    }
    ranks_total = tp * pp * (1 if dp_attention else dp)
    node_gpus = min(ranks_total, 8) if gpus_per_node is None else gpus_per_node
    require_int("gpus_per_node", node_gpus, minimum=1)
    host_memory_bytes = (
        None if host_memory is None else parse_bytes(host_memory, name="host_memory")
    )
    rule = gpu_budget_rule(
        kv_budget=kv_budget,
        gpu=gpu,
        gpu_memory=gpu_memory,
        reserve=reserve,
        memory_fraction=memory_fraction,
        gpu_memory_utilization=gpu_memory_utilization,
        mem_fraction_static=mem_fraction_static,
    )
    overrides = {
        name: None if value is None else parse_bytes(value, name=name)
        for name, value in (
            ("activation_bytes", activation_bytes),
            ("cuda_graph_bytes", cuda_graph_bytes),
            ("runtime_bytes", runtime_bytes),
        )
    }
    stage_layers = pp_stage_layers(target_model.num_layers, pp)

    def stage_non_kv(stage: int, with_draft: bool = True) -> NonKvMemory:
        estimate = estimate_non_kv(
            target_model,
            draft_model if with_draft and stage == pp - 1 else None,
            eagle3=spec == "eagle3",
            tp=layout.attention_tp,
            max_num_batched_tokens=max_num_batched_tokens,
            max_batch_size=max_batch_size,
            num_layers=len(stage_layers[stage]),
        )
        given = {k: v for k, v in overrides.items() if v is not None}
        if given:
            estimate = replace(estimate, **given, source="estimate, parts given")
        return rule.non_kv(estimate)

    weights_override = (
        None if weights_bytes is None else parse_bytes(weights_bytes, name="weights_bytes")
    )

    if layout.draft_tp != tp and draft_model is None:
        raise InvalidArgumentError(
            f"draft_tp applies to a separate draft (an EAGLE3 head or a draft model); "
            f"--spec {spec} has none (MTP layers run at the target's tp): drop --draft-tp"
        )
    if engine_name != "kvbudget" and any(
        isinstance(x, MLALayer) and x.index_head_dim for x in target_model.layers
    ):
        raise InvalidArgumentError(
            f"--engine {engine_name} is not modelled for {target_model.name}'s sparse-attention "
            "indexer cache (the engines keep it apart from the MLA latent); plan it with "
            "--engine kvbudget"
        )
    if layout.draft_tp != tp and engine_name != "kvbudget":
        raise InvalidArgumentError(
            f"--engine {engine_name} is modelled with the draft at the target's tp; plan a "
            "different draft_tp with --engine kvbudget"
        )
    # the draft's KV is split like the target's attention, or over its own draft_tp ranks
    draft_kv_tp = layout.attention_tp if layout.draft_tp == tp else layout.draft_tp
    managers = _managers(shape, spec, target_model, draft_model, separate_draft_cache, draft_kv_tp)
    last = pp - 1

    def stage_weights(stage: int, with_draft: bool = True) -> int:
        if weights_override is not None:
            return weights_override
        total = rank_weights(
            target_model,
            tp=tp,
            pp=pp,
            pp_stage=stage,
            include_mtp=spec == "mtp",
            ep=ep,
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
            managers[:1],
            rule,
            None if not rule.derived else stage_weights(last, with_draft=False),
            stage_non_kv(last, with_draft=False),
            last,
        )
    # a stage with no growing layer (only windows or recurrent state) holds any number
    # of 0-byte blocks: it never binds
    growing_stages = [s for s in range(pp) if any(_cost(m, s).slope for m in managers)]
    binding = min(growing_stages or [last], key=lambda s: (stages[s].blocks, -s))
    blocks = stages[binding].blocks
    binding_stage = stages[binding]
    if target_only is not None and target_only.blocks < blocks:
        binding_stage = target_only  # unusual: the draft-free ranks have less room
        blocks = target_only.blocks
    report = stages[last]

    def tier_split(tier: Tier, stage: int) -> BudgetSplit:
        return split_budget(
            tier_bytes[tier],
            target=_cost(managers[0], stage),
            draft=_cost(managers[1], stage) if len(managers) > 1 else CacheCost(0),
            tier=tier,
        )

    splits = {tier: tier_split(tier, last) for tier in ("host", "disk")}
    # every stage's rank has its own host and disk budget; the common count is the
    # smallest over the stages with growing layers
    tier_blocks = {
        tier: min(
            _common_blocks(
                managers,
                s,
                (split.target, split.draft),
                tokens_per_block,
                fixed=False,
            )
            for s in growing_stages or [last]
            for split in (tier_split(tier, s),)
        )
        for tier in ("host", "disk")
    }
    growing = any(_cost(m, s).slope for m in managers for s in range(pp))
    if not growing:  # only windows and states: 0-byte blocks for every sequence
        blocks = max_batch_size * -(-seq_len // tokens_per_block)
    splits["gpu"], tier_blocks["gpu"] = report.split, blocks
    warnings: list[str] = [
        note
        for name, value in (
            ("kv_budget", kv_budget),
            ("host_budget", host_budget),
            ("disk_budget", disk_budget),
            ("gpu_memory", gpu_memory),
            ("reserve", reserve),
            ("weights_bytes", weights_bytes),
            ("host_memory", host_memory),
        )
        if (note := rounding_note(value, name=name)) is not None
    ]
    warnings += _draft_warnings(target_model, draft_model, seq_len)
    warnings += [*target_model.assumed, *(draft_model.assumed if draft_model else ())]
    if engine_name == "kvbudget":
        capacity = _capacity(shape, managers, binding_stage, tier_blocks, warnings)
    else:  # the engine model decides what fits; the ledger's own checks do not apply
        try:
            capacity = _capacity(shape, managers, binding_stage, tier_blocks, [])
        except InfeasibleBudgetError:
            capacity = _ledger_capacity(shape, binding_stage, tier_blocks)
    capacity = replace(capacity, kv_groups=layout.kv_groups)
    if ep > 1 and not _has_routed_experts(target_model):
        warnings.append(f"--ep {ep} changes nothing: {target_model.name} has no routed experts")
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
        _check_given_budget(rule, weights, stage_non_kv(last).total_bytes, warnings)
    if rule.derived and rule.rule == "mem_fraction_static" and report.non_kv is not None:
        assert rule.memory_bytes is not None and report.weights_bytes is not None
        slack = rule.memory_bytes - report.weights_bytes - report.gpu_bytes
        need = report.non_kv.total_bytes
        if need > slack:
            warnings.append(
                f"--mem-fraction-static {rule.fraction_text} leaves {format_bytes(slack)} "
                f"outside weights and KV, less than the {format_bytes(need)} of activations, "
                "CUDA graphs and runtime estimated: lower the fraction or "
                "--max-num-batched-tokens"
            )
    if tier_bytes["host"] and not growing:
        warnings.append("the host tier holds growing-layer blocks only; this model has none")
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
    ledger = Plan(
        target=target_model.name,
        draft=draft_model.name if draft_model else None,
        target_path=target_model.location,
        draft_path=draft_model.location if draft_model else None,
        spec=spec,
        tp=tp,
        pp=pp,
        draft_tp=layout.draft_tp if layout.draft_tp != tp else None,
        dp=dp,
        dp_attention=dp_attention,
        ep=ep,
        pp_stage=last,
        binding_pp_stage=binding,
        kv_dtype=shape.kv_dtype,
        tokens_per_block=tokens_per_block,
        budget=plan_budget,
        managers=tuple(
            _manager_plan(shape, m, i, last, splits, tier_blocks) for i, m in enumerate(managers)
        ),
        capacity=capacity,
        stages=tuple(
            st.report(i, "all" if target_only is None or i != last else _ranks_text(0, dtp))
            for i, st in enumerate(stages)
        )
        + (() if target_only is None else (target_only.report(last, _ranks_text(dtp, tp)),)),
        warnings=tuple(warnings),
        vocab_size=target_model.vocab_size,
        spec_reason=spec_reason,
    )
    inputs = EngineInputs(
        target=target_model,
        draft=draft_model,
        spec=spec,
        max_draft_len=shape.lookahead_tokens,
        tp=layout.attention_tp,  # the engines split one sequence's KV over these ranks
        pp=pp,
        kv_dtype=parse_dtype(shape.kv_dtype),
        state_dtype=parse_dtype(state_dtype, auto=target_model.dtype or "bf16", what="state_dtype"),
        ssm_state_dtype=(
            parse_dtype(target_model.ssm_state_dtype, what="state_dtype")
            if str(state_dtype).strip().lower() == "auto" and target_model.ssm_state_dtype
            else None
        ),
        tokens_per_block=tokens_per_block,
        max_seq_len=seq_len,
        max_batch_size=max_batch_size,
        gpu_kv_bytes=min(st.gpu_bytes for st in stages),
        host_bytes=tier_bytes["host"],
        gpu_memory_bytes=rule.memory_bytes,
        weights_bytes=weights,
        max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
        launch_tp=tp,
        dp=dp,
        dp_attention=dp_attention,
        ep=ep,
    )
    return with_engine(ledger, inputs, engine_name)


def _managers(
    shape: _Shape,
    spec: str,
    target: ModelSpec,
    draft: ModelSpec | None,
    separate_draft_cache: bool,
    draft_tp: int,
) -> list[_Manager]:
    """The managers of ``spec`` with their per-stage costs; draft layers on the last stage
    (a draft model's KV split over ``draft_tp`` ranks)."""
    last = shape.pp - 1
    target_layers: Literal["model", "all"] = (
        "all" if spec == "mtp" and not separate_draft_cache else "model"
    )
    managers = [
        _Manager(
            role="target",
            model=target,
            layers=target_layers,
            details=tuple(
                shape.detail(target, target_layers, s, shape.pp) for s in range(shape.pp)
            ),
        )
    ]
    if draft is not None:
        draft_detail = shape.detail(draft, "model", 0, 1, tp=draft_tp)
        managers.append(
            _Manager(
                role="draft",
                model=draft,
                layers="model",
                details=tuple(draft_detail if s == last else None for s in range(shape.pp)),
            )
        )
    elif spec == "mtp" and separate_draft_cache:
        mtp_detail = shape.detail(target, "mtp", last, shape.pp)
        managers.append(
            _Manager(
                role="draft",
                model=target,
                layers="mtp",
                details=tuple(mtp_detail if s == last else None for s in range(shape.pp)),
            )
        )
    return managers


def _plan_stage(
    shape: _Shape,
    managers: list[_Manager],
    rule: GpuBudgetRule,
    weights: int | None,
    non_kv: NonKvMemory,
    stage: int,
) -> _Stage:
    """Split one stage's GPU budget and count the whole blocks every manager holds."""
    budget = rule.kv_bytes(weights or 0, non_kv, pp_stage=stage)
    target = _cost(managers[0], stage)
    draft = _cost(managers[1], stage) if len(managers) > 1 else CacheCost(0)
    try:
        split = split_budget(budget, target=target, draft=draft, tier="gpu")
    except InfeasibleBudgetError:
        raise _infeasible_fixed(budget, managers, stage, shape) from None
    blocks = _common_blocks(managers, stage, (split.target, split.draft), shape.tokens_per_block)
    return _Stage(
        gpu_bytes=budget,
        weights_bytes=weights,
        split=split,
        blocks=blocks,
        non_kv=non_kv if rule.derived else None,
    )


def _capacity(
    shape: _Shape,
    managers: list[_Manager],
    binding: _Stage,
    tier_blocks: dict[str, int],
    warnings: list[str],
) -> Capacity:
    """Tokens, concurrency and the longest sequence at the batch size; appends warnings.

    Raises InfeasibleBudgetError when not even one sequence of max_seq_len fits.
    """
    bs, lookahead, batch = shape.tokens_per_block, shape.lookahead_tokens, shape.max_batch_size
    blocks = tier_blocks["gpu"]
    # a sequence never grows past max_seq_len, so neither does its lookahead (engines
    # reserve min(tokens + K, max_seq_len)): a full-length sequence spans its own blocks
    seq_blocks = -(-shape.max_seq_len // bs)
    growing = any(_cost(m, s).slope for m in managers for s in range(shape.pp))
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
    return Capacity(
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


def _ledger_capacity(shape: _Shape, binding: _Stage, tier_blocks: dict[str, int]) -> Capacity:
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


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """Parallelism of one deployment, checked (see :func:`plan`'s docstring)."""

    tp: int
    draft_tp: int
    dp: int
    dp_attention: bool
    ep: int

    @property
    def attention_tp(self) -> int:
        """Ranks one attention layer (and its KV) is split over."""
        return self.tp // self.dp if self.dp_attention else self.tp

    @property
    def kv_groups(self) -> int:
        """Groups of ranks that each hold their own sequences: the DP size."""
        return self.dp


def _layout(tp: int, draft_tp: int | None, dp: int, dp_attention: bool, ep: int) -> _Layout:
    require_int("dp", dp, minimum=1)
    require_int("ep", ep, minimum=1)
    if not isinstance(dp_attention, bool):
        raise InvalidArgumentError(f"dp_attention must be True or False, got {dp_attention!r}")
    dtp = tp if draft_tp is None else require_int("draft_tp", draft_tp, minimum=1)
    if dtp > tp or tp % dtp:
        raise InvalidArgumentError(
            f"draft_tp={dtp} must divide tp={tp} (a draft runs on a subset of the target's "
            "TP ranks, e.g. draft_tp=1, as vLLM's draft_tensor_parallel_size)"
        )
    if dp_attention:
        if dp < 2 or tp % dp:
            raise InvalidArgumentError(
                f"dp_attention splits the tp={tp} ranks into dp attention groups: dp={dp} "
                f"must be > 1 and divide tp (e.g. --tp 8 --dp 8)"
            )
        if dtp != tp:
            raise InvalidArgumentError(
                "draft_tp with dp_attention is not modelled: the draft's attention is data "
                "parallel like the target's; drop --draft-tp"
            )
    ranks = tp * (1 if dp_attention else dp)
    if ep > ranks or ranks % ep:
        raise InvalidArgumentError(
            f"ep={ep} must divide the {ranks} ranks one expert group spans (tp"
            f"{'' if dp_attention else ' x dp'}); e.g. ep={ranks}"
        )
    return _Layout(tp=tp, draft_tp=dtp, dp=dp, dp_attention=dp_attention, ep=ep)


def _has_routed_experts(model: ModelSpec) -> bool:
    """Whether ``model`` has routed-expert weights (False when they cannot be counted)."""
    try:
        return rank_weights(model).routed_experts_bytes > 0
    except ConfigError:
        return False


def _ranks_text(start: int, end: int) -> str:
    """TP ranks ``start .. end - 1`` as text: ``"0"``, ``"1-3"``."""
    return str(start) if end - start == 1 else f"{start}-{end - 1}"


def _engine_name(engine: object) -> str:
    name = engine.lower() if isinstance(engine, str) else None
    if name not in ENGINE_NAMES:
        raise InvalidArgumentError(
            f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_NAMES)}"
        )
    return name


def _manager_plan(
    shape: _Shape,
    m: _Manager,
    index: int,
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
        share = split.target if index == 0 else split.draft
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


def _infeasible_fixed(
    budget: int, managers: list[_Manager], stage: int, shape: _Shape
) -> InfeasibleBudgetError:
    """The error for a GPU budget below the fixed costs, with the batch that would fit."""
    batch = shape.reserve_batch
    fixed = sum(_cost(m, stage).intercept for m in managers)
    slope = sum(_cost(m, stage).slope for m in managers)
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


def _check_given_budget(
    rule: GpuBudgetRule, weights: int, non_kv: int, warnings: list[str]
) -> None:
    """Warn when a given --kv-budget plus weights and non-KV memory overflow the GPU."""
    assert rule.given_bytes is not None and rule.memory_bytes is not None
    need = rule.given_bytes + weights + non_kv
    if need > rule.memory_bytes:
        warnings.append(
            f"--kv-budget {format_bytes(rule.given_bytes)} + weights {format_bytes(weights)} + "
            f"non-KV memory {format_bytes(non_kv)} = {format_bytes(need)} per rank is more "
            f"than the {format_bytes(rule.memory_bytes)} of {rule.gpu_name} (--gpu/--gpu-memory); "
            "lower --kv-budget, or name the GPU you run on"
        )


def _ranks(count: int) -> str:
    return f"{count} rank" if count == 1 else f"{count} ranks"


__all__ = ["DEFAULT_TARGET", "EAGLE3_DRAFTS", "SPEC_MODES", "plan"]
