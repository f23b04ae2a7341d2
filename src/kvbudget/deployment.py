"""A deployment as one checked, typed value: :class:`Deployment`, made by
:func:`resolve_deployment`.

:func:`kvbudget.plan` is ``build_plan(resolve_deployment(...))``. Everything that reads a
string (a model id or path, a dtype, a byte size, an engine or a speculation mode),
checks a setting or combines settings happens here, once; :func:`kvbudget.planner.build_plan`
and every engine model then compute from this value only, read whole (no setting is
copied into a second record). A variant of a deployment (another budget, another
layout, another engine) is a :func:`dataclasses.replace` of it.

Library errors name the parameters (``kv_budget``, ``max_draft_len``); the CLI maps them
to its flags.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget._validate import require_int
from kvbudget.budget import GpuBudgetRule, gpu_budget_rule
from kvbudget.cost import CostDetail, LayerSelection, cache_cost_detail
from kvbudget.dtypes import DType, parse_dtype
from kvbudget.engines.base import EngineModel
from kvbudget.engines.registry import get_engine_model
from kvbudget.errors import InvalidArgumentError
from kvbudget.model import ModelSpec, load_model
from kvbudget.spec_modes import SPEC_MODE_TABLE, SPEC_MODES, SpecModeInfo
from kvbudget.units import parse_bytes, rounding_note
from kvbudget.weights.quantization import checkpoint_kv_dtype

DEFAULT_TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_GPU = "H200"
DEFAULT_HOST_BUDGET = 0  # no engine offloads to host memory unless asked
DEFAULT_MAX_BATCH_SIZE = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # tokens one scheduler step runs (the prefill chunk)

# EAGLE3 heads shipped as presets, by the target they were trained for.
EAGLE3_DRAFTS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B",
    "openai/gpt-oss-120b": "nvidia/gpt-oss-120b-Eagle3-long-context",
}

# the one family whose own drafter --spec dspark runs (vLLM 0.33.0 DSparkV41DraftModel)
_DSPARK_TARGET = "deepseek_v41"
# an EAGLE head given by the user's word (--spec eagle) has at most this many layers
_MAX_HEAD_LAYERS = 4
_eagle3_marks = "an Eagle3 architecture name, draft_vocab_size or an eagle_config mark one"


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """How one deployment's GPUs are used, checked by :meth:`checked`.

    ``tp`` x ``pp`` ranks per model replica; ``draft_tp`` ranks of those run a separate
    draft (default ``tp``); ``dp`` replicas, or with ``dp_attention`` data-parallel
    attention groups inside the ``tp`` ranks; routed experts whole over ``ep`` ranks.
    """

    tp: int = 1
    pp: int = 1
    draft_tp: int = 1
    dp: int = 1
    dp_attention: bool = False
    ep: int = 1

    @property
    def attention_tp(self) -> int:
        """Ranks one attention layer (and one sequence's KV) is split over."""
        return self.tp // self.dp if self.dp_attention else self.tp

    @property
    def draft_kv_tp(self) -> int:
        """Ranks a separate draft's KV is split over: like the target's attention, or
        its own ``draft_tp`` ranks."""
        return self.attention_tp if self.draft_tp == self.tp else self.draft_tp

    @property
    def kv_groups(self) -> int:
        """Groups of ranks that each hold their own sequences: the DP size."""
        return self.dp

    @property
    def ranks(self) -> int:
        """GPUs of the whole deployment."""
        return self.tp * self.pp * (1 if self.dp_attention else self.dp)

    @classmethod
    def checked(
        cls,
        *,
        tp: int = 1,
        pp: int = 1,
        draft_tp: int | None = None,
        dp: int = 1,
        dp_attention: bool = False,
        ep: int = 1,
    ) -> Parallelism:
        """Check a layout; raises InvalidArgumentError naming the parameter at fault."""
        require_int("tp", tp, minimum=1)
        require_int("pp", pp, minimum=1)
        require_int("dp", dp, minimum=1)
        require_int("ep", ep, minimum=1)
        if not isinstance(dp_attention, bool):
            raise InvalidArgumentError(f"dp_attention must be True or False, got {dp_attention!r}")
        dtp = tp if draft_tp is None else require_int("draft_tp", draft_tp, minimum=1)
        if dtp > tp or tp % dtp:
            raise InvalidArgumentError(
                f"draft_tp={dtp} must divide tp={tp} (a draft runs on a subset of the "
                "target's TP ranks, e.g. draft_tp=1, as vLLM's draft_tensor_parallel_size)"
            )
        if dp_attention:
            if dp < 2 or tp % dp:
                raise InvalidArgumentError(
                    f"dp_attention splits the tp={tp} ranks into dp attention groups: "
                    f"dp={dp} must be > 1 and divide tp (e.g. --tp 8 --dp 8)"
                )
            if dtp != tp:
                raise InvalidArgumentError(
                    "draft_tp with dp_attention is not modelled: the draft's attention is "
                    "data parallel like the target's; drop --draft-tp"
                )
        ranks = tp * (1 if dp_attention else dp)
        if ep > ranks or ranks % ep:
            raise InvalidArgumentError(
                f"ep={ep} must divide the {ranks} ranks one expert group spans (tp"
                f"{'' if dp_attention else ' x dp'}); e.g. ep={ranks}"
            )
        return cls(tp=tp, pp=pp, draft_tp=dtp, dp=dp, dp_attention=dp_attention, ep=ep)


@dataclass(frozen=True, kw_only=True)
class NonKvOverrides:
    """Parts of the non-KV memory estimate given by the user (bytes per rank)."""

    activation_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    runtime_bytes: int | None = None

    def given(self) -> dict[str, int]:
        """The parts that were given, by field name."""
        return {
            name: value
            for name, value in (
                ("activation_bytes", self.activation_bytes),
                ("cuda_graph_bytes", self.cuda_graph_bytes),
                ("runtime_bytes", self.runtime_bytes),
            )
            if value is not None
        }


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """One deployment, checked and typed: what every engine model is handed, whole.

    * Models: ``target``, ``draft`` (an EAGLE3/EAGLE head or a small model, with its own
      geometry; None for MTP, whose layers are the target's, and ngram), ``spec``
      (``spec_reason``: why ``spec="auto"`` chose it).
    * Per-sequence settings: ``kv_dtype`` and ``state_dtype`` (names; ``state_dtype``
      may be ``"auto"``), ``tokens_per_block``, ``max_batch_size``, ``max_seq_len``,
      ``max_draft_len`` (K as given; :attr:`lookahead_tokens` is what a sequence
      reserves), ``cached_states`` (kvbudget's cache only).
    * ``parallel``: the layout; ``gpu_rule``: the GPU budget (given, or derived under
      one engine's memory knob); ``host_bytes``, ``disk_bytes``: budgets per rank;
      ``gpus_per_node``, ``host_memory_bytes``: the node.
    * ``engine``: the engine model planned for, and its knobs the user gave:
      ``max_num_batched_tokens``, ``async_scheduling``, ``enable_prefix_caching``,
      ``separate_draft_cache`` (MTP layers in their own manager), ``pre_load_bytes``
      (GPU memory in use before the weights load, for SGLang's --mem-fraction-static;
      None: the engine model's default).
    * ``notes``: warnings found while resolving (sizes rounded from logs, the draft's
      vocabulary or context, what a generic config assumed); the plan carries them first.
    """

    target: ModelSpec
    draft: ModelSpec | None
    spec: SpecModeInfo
    spec_reason: str | None
    kv_dtype: str
    state_dtype: str
    tokens_per_block: int
    max_batch_size: int
    max_seq_len: int
    max_draft_len: int
    cached_states: int
    parallel: Parallelism
    gpu_rule: GpuBudgetRule
    non_kv_overrides: NonKvOverrides
    weights_override: int | None
    pre_load_bytes: int | None = None
    host_bytes: int
    disk_bytes: int
    gpus_per_node: int
    host_memory_bytes: int | None
    engine: EngineModel
    separate_draft_cache: bool
    max_num_batched_tokens: int
    async_scheduling: bool
    enable_prefix_caching: bool
    notes: tuple[str, ...] = ()

    @property
    def lookahead_tokens(self) -> int:
        """Unverified draft tokens a sequence reserves: ``max_draft_len``, or 0 when the
        spec mode has no lookahead (``none``). The one place this rule is written."""
        return self.max_draft_len if self.spec.lookahead else 0

    @property
    def reserve_batch(self) -> int:
        """Sequences whose fixed costs (windows, states) the ledger reserves:
        ``max_batch_size`` where the engine reserves them up front, else one (engines
        that draw them per request size the rest from their own pools)."""
        return self.max_batch_size if self.engine.fixed_per_batch else 1

    @property
    def kv_dtype_value(self) -> DType:
        """The KV dtype as a value."""
        return parse_dtype(self.kv_dtype)

    @property
    def state_dtype_value(self) -> DType:
        """The dtype recurrent state is stored in (``auto``: the target's dtype)."""
        return parse_dtype(self.state_dtype, auto=self.target.dtype or "bf16", what="state_dtype")

    @property
    def ssm_state_dtype(self) -> DType | None:
        """The SSM state's own dtype from the config, when ``state_dtype`` is auto."""
        if self.state_dtype.strip().lower() == "auto" and self.target.ssm_state_dtype:
            return parse_dtype(self.target.ssm_state_dtype, what="state_dtype")
        return None

    @property
    def draft_source(self) -> str | None:
        """What an engine loads the draft from: its local folder, else its id."""
        if self.draft is None:
            return None
        return self.draft.location or self.draft.name

    @property
    def target_source(self) -> str:
        """What an engine loads the target from: its local folder, else its id."""
        return self.target.location or self.target.name

    @property
    def target_revision(self) -> str | None:
        """The Hub commit the target was planned from (None: a preset or a local folder),
        for the engine's own revision setting, so it loads what was planned."""
        return self.target.revision

    @property
    def draft_revision(self) -> str | None:
        """The Hub commit the draft was planned from (None: none, a preset or a folder)."""
        return self.draft.revision if self.draft is not None else None

    def cost_detail(
        self,
        model: ModelSpec,
        layers: LayerSelection,
        stage: int,
        stages: int,
        tp: int | None = None,
    ) -> CostDetail:
        """One manager's cost on PP stage ``stage`` of ``stages``, at ``tp`` ranks
        (default: the attention TP)."""
        return cache_cost_detail(
            model,
            kv_dtype=self.kv_dtype,
            state_dtype=self.state_dtype,
            tokens_per_block=self.tokens_per_block,
            max_batch_size=self.reserve_batch,
            max_seq_len=self.max_seq_len,
            tp=self.parallel.attention_tp if tp is None else tp,
            pp=stages,
            pp_stage=stage,
            layers=layers,
            lookahead_tokens=self.lookahead_tokens,
            cached_states=self.cached_states,
        )


def resolve_deployment(
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
    pre_load_bytes: int | str | None = None,
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
    from_hub: bool = False,
) -> Deployment:
    """Resolve and check :func:`kvbudget.plan`'s arguments (its docstring says what each
    means) into one :class:`Deployment`. Loads the models (``from_hub``: a target or
    draft id from the Hugging Face Hub even when it is a preset); raises
    InvalidArgumentError or ConfigError on bad input."""
    if spec != "auto" and spec not in SPEC_MODES:
        raise InvalidArgumentError(
            f"unknown spec {spec!r}; choose one of auto, {', '.join(SPEC_MODES)}"
        )
    parallel = Parallelism.checked(
        tp=tp, pp=pp, draft_tp=draft_tp, dp=dp, dp_attention=dp_attention, ep=ep
    )
    require_int("tokens_per_block", tokens_per_block, minimum=1)
    require_int("max_batch_size", max_batch_size, minimum=1)
    require_int("max_draft_len", max_draft_len, minimum=0)
    require_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    for name, flag in (
        ("async_scheduling", async_scheduling),
        ("enable_prefix_caching", enable_prefix_caching),
        ("separate_draft_cache", separate_draft_cache),
    ):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {flag!r}")
    engine_model = get_engine_model(engine)
    if cached_states is not None:
        require_int("cached_states", cached_states)
    if not isinstance(from_hub, bool):
        raise InvalidArgumentError(f"from_hub must be True or False, got {from_hub!r}")
    target_model, draft_model, mode, spec_reason = _models(
        target,
        draft,
        spec,
        parallel,
        max_draft_len=max_draft_len,
        separate=separate_draft_cache,
        resolve=_Resolver(from_hub=from_hub),
    )
    if str(state_dtype).strip().lower() != "auto":
        parse_dtype(state_dtype, what="state_dtype")
    seq_len = target_model.max_position_embeddings if max_seq_len is None else max_seq_len
    require_int("max_seq_len", seq_len, minimum=1)
    if mode.lookahead and max_draft_len >= seq_len:
        # engines reserve min(tokens + K, max_model_len): K draft tokens past the whole
        # sequence can never be verified (and no engine takes them: they are emitted as
        # num_speculative_tokens / max_draft_len / speculative_num_steps)
        raise InvalidArgumentError(
            f"max_draft_len {max_draft_len} must be below max_seq_len {seq_len} (draft "
            "tokens are verified inside the sequence); lower --max-draft-len (engines "
            "run 1 to a few tens)"
        )
    node_gpus = min(parallel.ranks, 8) if gpus_per_node is None else gpus_per_node
    require_int("gpus_per_node", node_gpus, minimum=1)
    rule = gpu_budget_rule(
        kv_budget=kv_budget,
        gpu=gpu,
        gpu_memory=gpu_memory,
        reserve=reserve,
        memory_fraction=memory_fraction,
        gpu_memory_utilization=gpu_memory_utilization,
        mem_fraction_static=mem_fraction_static,
    )  # the engine's default knob is applied by for_engine, which knows the deployment
    sizes = {
        "kv_budget": kv_budget,
        "host_budget": host_budget,
        "disk_budget": disk_budget,
        "gpu_memory": gpu_memory,
        "reserve": reserve,
        "weights_bytes": weights_bytes,
        "host_memory": host_memory,
    }
    notes = [n for k, v in sizes.items() if (n := rounding_note(v, name=k)) is not None]
    notes += draft_warnings(target_model, draft_model, seq_len)
    notes += [*target_model.assumed, *(draft_model.assumed if draft_model else ())]
    deployment = Deployment(
        target=target_model,
        draft=draft_model,
        spec=mode,
        spec_reason=spec_reason,
        kv_dtype=_kv_dtype(kv_dtype, target_model, draft_model),
        state_dtype=str(state_dtype),
        tokens_per_block=tokens_per_block,
        max_batch_size=max_batch_size,
        max_seq_len=seq_len,
        max_draft_len=max_draft_len,
        cached_states=0,
        parallel=parallel,
        gpu_rule=rule,
        non_kv_overrides=NonKvOverrides(
            activation_bytes=_optional_bytes(activation_bytes, "activation_bytes"),
            cuda_graph_bytes=_optional_bytes(cuda_graph_bytes, "cuda_graph_bytes"),
            runtime_bytes=_optional_bytes(runtime_bytes, "runtime_bytes"),
        ),
        weights_override=_optional_bytes(weights_bytes, "weights_bytes"),
        pre_load_bytes=_optional_bytes(pre_load_bytes, "pre_load_bytes"),
        host_bytes=parse_bytes(host_budget, name="host_budget"),
        disk_bytes=parse_bytes(disk_budget, name="disk_budget"),
        gpus_per_node=node_gpus,
        host_memory_bytes=_optional_bytes(host_memory, "host_memory"),
        engine=engine_model,
        separate_draft_cache=separate_draft_cache,
        max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
        notes=tuple(notes),
    )
    return for_engine(deployment, engine_model, cached_states=cached_states)


def for_engine(
    deployment: Deployment, engine: str | EngineModel, *, cached_states: int | None = None
) -> Deployment:
    """``deployment`` planned for ``engine`` (a name, ``name@version`` or model): the
    settings that depend on the engine resolved again and checked. Pure; a deployment
    transform (the simulator plans every engine's settings from one deployment).

    ``cached_states`` (kvbudget's cache only) defaults to ``max_batch_size`` with prefix
    caching on, else 0. Raises InvalidArgumentError for a setting the engine does not
    take or a deployment its model does not cover.
    """
    model = get_engine_model(engine)
    if cached_states and not model.sizes_cached_states:
        raise InvalidArgumentError(
            f"cached_states sizes kvbudget's own cache; {model.name} sizes its cached states "
            "itself: drop --cached-states or use --engine kvbudget"
        )
    mode, speculation = deployment.spec, model.spec_names
    if mode.name == "dspark" and (speculation is None or mode.name not in speculation):
        raise InvalidArgumentError(
            f"{model.summary} is not modelled for --spec dspark: kvbudget models "
            "DeepSeek-V4.1's DSpark stages as vLLM 0.33.0 and SGLang 0.5.23 run them only "
            "(its TensorRT-LLM model has not read a DSPARK drafter's pools, and kvbudget's "
            "own cache has no V4.1 compressed pool); plan --spec dspark with --engine vllm "
            "or --engine sglang"
        )
    if speculation is not None and mode.lookahead and mode.name not in speculation:
        raise InvalidArgumentError(
            f"{model.summary} has no speculation mode for --spec {mode.name} "
            f"(it runs {', '.join(sorted(speculation))}); choose one of them or another "
            "--engine"
        )
    if not model.sizes_cached_states:
        states = 0
    elif cached_states is not None:
        states = cached_states
    else:
        states = deployment.max_batch_size if deployment.enable_prefix_caching else 0
    rule = deployment.gpu_rule.with_default(model.memory_default_for(deployment))
    if model.before_load is not None:
        rule = replace(rule, before_load=model.before_load(deployment))
    planned = replace(deployment, engine=model, cached_states=states, gpu_rule=rule)
    model.check(planned)
    return planned


def _models(
    target: str | ModelSpec,
    draft: str | ModelSpec | None,
    spec: str,
    parallel: Parallelism,
    *,
    max_draft_len: int,
    separate: bool,
    resolve: _Resolver,
) -> tuple[ModelSpec, ModelSpec | None, SpecModeInfo, str | None]:
    """The target, the draft, the speculation mode and why ``auto`` chose it, checked
    against each other."""
    target_model = resolve(target)
    if target_model.is_head or target_model.model_type == "gemma4_assistant":
        kind = (
            "a DFlash draft"
            if target_model.is_dflash
            else "Gemma-4's MTP assistant"
            if not target_model.is_head
            else f"an EAGLE{'3' if target_model.is_eagle3 else ''} draft head"
        )
        raise InvalidArgumentError(
            f"{target_model.name} is {kind}, not a target model; pass it as --draft and "
            "its base model as --target"
        )
    spec_reason = None
    if spec == "auto":
        spec, why = _auto_spec(target_model, None if draft is None else resolve(draft))
        spec_reason = f"spec auto chose {spec}: {why}"
    mode = SPEC_MODE_TABLE[spec]
    if separate and mode.name != "mtp":
        raise InvalidArgumentError(
            f"--separate-draft-cache applies to --spec mtp only (got --spec {spec}); drop it"
        )
    if max_draft_len == 0 and mode.lookahead:
        raise InvalidArgumentError(
            f"--max-draft-len 0 means no speculation; use --spec none instead of --spec {spec}"
        )
    draft_model = _resolve_draft(mode, target_model, draft, resolve)
    if parallel.draft_tp != parallel.tp and draft_model is None:
        raise InvalidArgumentError(
            f"draft_tp applies to a separate draft (an EAGLE3 head or a draft model); "
            f"--spec {spec} has none (MTP layers run at the target's tp): drop --draft-tp"
        )
    return target_model, draft_model, mode, spec_reason


def _kv_dtype(kv_dtype: str, target: ModelSpec, draft: ModelSpec | None) -> str:
    """The KV dtype's name; ``auto`` resolved as the engines resolve it.

    "auto" is the target's dtype for every manager (engines run the draft in the
    target's dtype), else the draft's when the target config names none. A config that
    names no dtype (a quantized checkpoint) runs its activations, and so its KV cache, in
    bf16 in every engine (vLLM's ``_get_and_verify_dtype`` default). A ModelOpt
    checkpoint that quantizes its KV cache (kv_cache_quant_algo FP8) is run with that KV
    dtype under "auto" (vLLM's resolve_kv_cache_dtype_string).
    """
    auto_dtype = target.dtype or (draft.dtype if draft else None) or "bf16"
    kv_auto = checkpoint_kv_dtype(target) or auto_dtype
    return parse_dtype(kv_dtype, auto=kv_auto).name


def draft_warnings(target: ModelSpec, draft: ModelSpec | None, seq_len: int) -> list[str]:
    """What to know about a draft next to ``target`` at ``seq_len`` tokens. Pure."""
    if draft is None:
        return []
    warnings = []
    if not draft.is_head and draft.vocab_size != target.vocab_size:
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


def _optional_bytes(value: int | str | None, name: str) -> int | None:
    return None if value is None else parse_bytes(value, name=name)


class _Resolver:
    """Model names to specs, each name loaded once (a Hub id makes requests)."""

    def __init__(self, *, from_hub: bool) -> None:
        self.from_hub = from_hub
        self.loaded: dict[str, ModelSpec] = {}

    def __call__(self, model: str | ModelSpec, *, given: bool = True) -> ModelSpec:
        """The spec of ``model``; ``given``: named by the user (``from_hub`` applies)."""
        if isinstance(model, ModelSpec):
            return model
        if model not in self.loaded:
            self.loaded[model] = load_model(model, from_hub=self.from_hub and given)
        return self.loaded[model]


def _auto_spec(target: ModelSpec, draft: ModelSpec | None) -> tuple[str, str]:
    """The speculation mode ``spec="auto"`` picks, and why, in words."""
    if draft is not None:
        model = draft
        if model.model_type == "gemma4_assistant":
            return "mtp", f"--draft {model.name} is a Gemma-4 MTP assistant"
        if model.is_dflash:
            return "dflash", f"--draft {model.name} is a DFlash draft"
        if model.is_eagle3:
            return "eagle3", f"--draft {model.name} is an EAGLE3 head"
        if model.is_eagle_head:
            return "eagle", f"--draft {model.name} is an EAGLE head"
        return "draft-target", f"--draft {model.name} is a model, not a head"
    if target.name in EAGLE3_DRAFTS:
        return "eagle3", f"{EAGLE3_DRAFTS[target.name]} is the EAGLE3 head preset for it"
    if target.mtp_layers and target.model_type == _DSPARK_TARGET:
        return "dspark", f"{target.name} ships {len(target.mtp_layers)} DSpark stage(s)"
    if target.mtp_layers:
        return "mtp", f"{target.name} ships {len(target.mtp_layers)} MTP layer(s)"
    return "none", (
        f"no EAGLE3 head preset and no MTP layers for {target.name} (pass --draft or "
        "--spec ngram to speculate)"
    )


def _resolve_draft(
    mode: SpecModeInfo, target: ModelSpec, draft: str | ModelSpec | None, resolve: _Resolver
) -> ModelSpec | None:
    """The draft model ``mode`` runs, checked against what the mode needs."""
    if mode.name == "eagle3":
        if draft is None:
            default = EAGLE3_DRAFTS.get(target.name)
            if default is None:
                raise InvalidArgumentError(
                    f"spec eagle3 needs a draft head for {target.name}; pass --draft "
                    "(a config path, preset id or Hugging Face id of the EAGLE3 head)"
                )
            return _checked_eagle3(resolve(default, given=False))
        return _checked_eagle3(resolve(draft))
    if mode.name == "dflash":
        if draft is None:
            raise InvalidArgumentError(
                f"spec dflash needs --draft (the DFlash draft trained for {target.name})"
            )
        model = resolve(draft)
        if not model.is_dflash:
            raise InvalidArgumentError(
                f"{model.name} is not a DFlash draft (no dflash_config, no DFlash "
                "architecture name); pick the --spec its kind runs"
            )
        return model
    if mode.name == "eagle":
        if draft is None:
            raise InvalidArgumentError(
                f"spec eagle needs --draft (the EAGLE-1/2 head trained for {target.name})"
            )
        model = resolve(draft)
        if model.is_eagle3:
            raise InvalidArgumentError(f"{model.name} is an EAGLE3 head; use --spec eagle3 with it")
        if model.num_layers > _MAX_HEAD_LAYERS:
            raise InvalidArgumentError(
                f"{model.name} has {model.num_layers} decoder layers; an EAGLE head has one "
                f"(or a few): use --spec draft-target for a draft model"
            )
        # the user names it a head: count and place it as one
        return replace(model, is_eagle_head=True)
    if mode.draft == "model":
        if draft is None:
            raise InvalidArgumentError(f"spec {mode.name} needs --draft (the small model)")
        model = resolve(draft)
        if model.is_head:
            kind, label = (
                ("dflash", "a DFlash block draft")
                if model.is_dflash
                else ("eagle3", "an EAGLE3 head")
                if model.is_eagle3
                else ("eagle", "an EAGLE head")
            )
            raise InvalidArgumentError(
                f"{model.name} is {label}, not a draft model; use --spec {kind} with it"
            )
        return model
    if mode.name == "mtp" and draft is not None:
        model = resolve(draft)
        if model.model_type != "gemma4_assistant":
            raise InvalidArgumentError(
                f"spec mtp runs the target's own MTP layers, or a Gemma-4 assistant "
                f"(gemma4_assistant) as --draft; {model.name} is {model.model_type!r}"
            )
        return model
    if mode.name == "dspark":
        _check_dspark(target, draft)
        return None
    if draft is not None:
        raise InvalidArgumentError(f"spec {mode.name} uses no draft model; drop --draft")
    modules = target.config.get("num_mtp_modules")
    if mode.draft == "mtp" and not target.mtp_layers and isinstance(modules, int) and modules > 0:
        # MiniMax-M2: vLLM 0.33.0 builds no draft of its MTP modules (config/speculative.py
        # rewrites only minimax_m3_vl / minimax_m3_mtp to MiniMaxM3MTP)
        raise InvalidArgumentError(
            f"{target.name}'s {modules} MTP module(s) (num_mtp_modules) are not modelled "
            f"(vLLM builds no MTP draft for {target.model_type!r}); choose another --spec"
        )
    if mode.draft == "mtp" and target.model_type == _DSPARK_TARGET:
        # config/speculative.py (vLLM 0.33.0): "DeepSeek V4.1 has no classic-MTP draft: its
        # checkpoints ship DSpark stages under mtp.*"; method mtp is refused for it. SGLang
        # 0.5.23 (arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features): "DeepSeek-
        # V4.1 does not support speculative decoding other than DSpark yet"
        raise InvalidArgumentError(
            f"{target.name} (DeepSeek-V4.1) has no MTP layers: its num_nextn_predict_layers "
            "are DSpark stages, which vLLM runs only as --speculative-config method dspark "
            'and SGLang only as --speculative-algorithm DSPARK ("DeepSeek-V4.1 does not '
            'support speculative decoding other than DSpark yet"); plan --spec dspark '
            "with --engine vllm or sglang"
        )
    if mode.draft == "mtp" and not target.mtp_layers:
        raise InvalidArgumentError(
            f"{target.name} has no MTP layers (num_nextn_predict_layers); choose another --spec"
        )
    return None


def _check_dspark(target: ModelSpec, draft: str | ModelSpec | None) -> None:
    """InvalidArgumentError unless ``--spec dspark`` runs ``target``'s own DSpark stages:
    vLLM 0.33.0 builds them from the target checkpoint (config/speculative.py: the draft
    is the target's ``mtp.*``, ``DSparkV41DraftModel``); the standalone DSpark drafts it
    also runs (Qwen3, Gemma-4, Kimi K3, Muse Spark checkpoints) are not modelled."""
    if draft is not None:
        raise InvalidArgumentError(
            "spec dspark runs the DSpark stages inside the DeepSeek-V4.1 target checkpoint "
            "(vLLM loads them from the target's mtp.*); standalone DSpark drafts are not "
            "modelled: drop --draft"
        )
    if target.model_type != _DSPARK_TARGET:
        raise InvalidArgumentError(
            f"spec dspark is modelled for DeepSeek-V4.1 targets (their own DSpark stages) "
            f"only; {target.name} is {target.model_type!r}: choose another --spec"
        )
    if not target.mtp_layers:
        raise InvalidArgumentError(
            f"{target.name} has no DSpark stages: vLLM's DSparkDeepseekV4Model reads "
            "dspark_target_layer_ids and dspark_markov_rank from the config, which lacks "
            "them; choose another --spec"
        )


def _checked_eagle3(model: ModelSpec) -> ModelSpec:
    """``model`` when it is an EAGLE3 head (``--spec eagle3``'s draft)."""
    if model.is_dflash:
        raise InvalidArgumentError(
            f"{model.name} is a DFlash block draft, not an EAGLE3 head; use --spec dflash"
        )
    if not model.is_eagle3:
        raise InvalidArgumentError(
            f"{model.name} is not an EAGLE3 head ({_eagle3_marks}); use --spec eagle "
            "for an EAGLE-1/2 head or --spec draft-target for a small model"
        )
    return model


__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_HOST_BUDGET",
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_TARGET",
    "EAGLE3_DRAFTS",
    "Deployment",
    "NonKvOverrides",
    "Parallelism",
    "draft_warnings",
    "for_engine",
    "resolve_deployment",
]
