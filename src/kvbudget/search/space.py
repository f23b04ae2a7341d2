"""The space of a sweep: its axes (:class:`SweepSpace`), one point of it
(:class:`SweepConfig`), and the enumeration of the points, valid or not.

A point is a full ``kvbudget plan`` deployment: the target, a draft and speculation
mode, a GPU preset, a layout of ``gpus`` GPUs (``tp x pp x dp``, ``ep`` routed-expert
ranks; with ``dp_attention`` the ``dp`` groups split the ``tp`` ranks' attention, so
``tp x pp`` GPUs), a KV dtype, an engine (``name@version``) and ``max_batch_size``; the options
every point shares (``max_seq_len``, ``max_draft_len``, ...) are the space's own fields.
:meth:`SweepConfig.plan_args` is the ``kvbudget plan`` command line of a point: a
sweep row is reproduced by running it.

Layouts: for each GPU count ``n``, every ``tp x pp x dp == n`` with ``tp``, ``pp``,
``dp`` in their lists (``None``: any divisor), for each ``ep`` of its list; with
``dp_attention`` every ``tp x pp == n`` and ``dp`` of its list (``None``: every divisor
of ``tp`` above 1). A layout the model cannot run is listed with the reason
(:func:`layout_problem`), not dropped.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

from kvbudget._validate import require_int
from kvbudget.deployment import DEFAULT_TARGET, Parallelism
from kvbudget.engines.registry import get_engine_model
from kvbudget.errors import InvalidArgumentError, KvBudgetError
from kvbudget.gpus import get_gpu
from kvbudget.model import ModelSpec, load_model
from kvbudget.spec_modes import SPEC_MODE_TABLE, SPEC_MODES
from kvbudget.units import parse_bytes

# speculation modes that take a draft model (the others pair with no --draft)
_DRAFT_SPECS = frozenset(
    {"auto", *(n for n, m in SPEC_MODE_TABLE.items() if m.draft in ("head", "model"))}
)


@dataclass(frozen=True, kw_only=True)
class SweepSpace:
    """The axes of a sweep (tuples, cross-multiplied) and the plan options every point
    shares. Names as ``kvbudget plan`` takes them; checked by :meth:`checked`.

    ``drafts``: draft candidates (None: the speculation mode's own, e.g. the target's
    EAGLE3 head preset), paired with each of ``specs`` that takes a draft; ``tp``/``dp``
    None: every divisor of the GPU count.
    """

    target: str = DEFAULT_TARGET
    drafts: tuple[str | None, ...] = (None,)
    specs: tuple[str, ...] = ("auto",)
    gpus: tuple[str, ...] = ("H200",)
    gpu_counts: tuple[int, ...] = (1,)
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] = (1,)
    dp: tuple[int, ...] | None = None
    ep: tuple[int, ...] = (1,)
    dp_attention: tuple[bool, ...] = (False,)
    kv_dtypes: tuple[str, ...] = ("auto",)
    engines: tuple[str, ...] = ("kvbudget",)
    max_batch_sizes: tuple[int, ...] = (256,)
    max_seq_len: int | None = None
    max_draft_len: int = 3
    host_budget: str = "0"
    tokens_per_block: int = 32
    gpus_per_node: int | None = None
    max_num_batched_tokens: int = 8192

    def checked(self) -> SweepSpace:
        """This space with GPU and engine names resolved (``h200`` -> ``H200``,
        ``vllm`` -> ``vllm@0.33.0``). Raises InvalidArgumentError for an empty axis, an
        unknown GPU, engine or speculation mode, or a count below 1."""
        axes = {
            "drafts": self.drafts,
            "specs": self.specs,
            "gpus": self.gpus,
            "gpu_counts": self.gpu_counts,
            "pp": self.pp,
            "ep": self.ep,
            "dp_attention": self.dp_attention,
            "kv_dtypes": self.kv_dtypes,
            "engines": self.engines,
            "max_batch_sizes": self.max_batch_sizes,
            "tp": self.tp if self.tp is not None else (1,),
            "dp": self.dp if self.dp is not None else (1,),
        }
        for name, values in axes.items():
            if not values:
                raise InvalidArgumentError(f"the sweep's {name} list is empty; give one value")
        for name in ("gpu_counts", "pp", "ep", "max_batch_sizes", "tp", "dp"):
            for value in axes[name]:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise InvalidArgumentError(
                        f"the sweep's {name} must be integers >= 1, got {value!r}"
                    )
        if any(not isinstance(v, bool) for v in self.dp_attention):
            raise InvalidArgumentError(
                f"the sweep's dp_attention must be True/False, got {self.dp_attention!r}"
            )
        for spec in self.specs:
            if spec != "auto" and spec not in SPEC_MODES:
                raise InvalidArgumentError(
                    f"unknown spec {spec!r} in the sweep; choose from auto, {', '.join(SPEC_MODES)}"
                )
        self._check_shared()
        gpus = tuple(dict.fromkeys(get_gpu(g).short_name for g in self.gpus))
        engines = tuple(dict.fromkeys(get_engine_model(e).id for e in self.engines))
        return _replace(self, gpus=gpus, engines=engines)

    def _check_shared(self) -> None:
        """The settings every configuration shares, with resolve_deployment's own checks:
        a bad one is the sweep's one error, not the same refusal on every row."""
        require_int("tokens_per_block", self.tokens_per_block, minimum=1)
        require_int("max_draft_len", self.max_draft_len, minimum=0)
        require_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        for name, value in (
            ("max_seq_len", self.max_seq_len),
            ("gpus_per_node", self.gpus_per_node),
        ):
            if value is not None:
                require_int(name, value, minimum=1)
        parse_bytes(self.host_budget, name="host_budget")


def _replace(space: SweepSpace, **changes: object) -> SweepSpace:
    from dataclasses import replace

    return replace(space, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True, order=True)
class SweepConfig:
    """One point of a :class:`SweepSpace`: every setting of one ``kvbudget plan``."""

    index: int  # position in the enumeration (the stable order of results)
    target: str
    draft: str | None
    spec: str
    gpu: str
    tp: int
    pp: int
    dp: int
    ep: int
    kv_dtype: str
    engine: str
    max_batch_size: int
    dp_attention: bool = False
    problem: str | None = field(default=None, compare=False)  # why it cannot run

    @property
    def gpus(self) -> int:
        """GPUs of the deployment (``Parallelism.ranks``)."""
        return self.tp * self.pp * (1 if self.dp_attention else self.dp)

    def plan_kwargs(self, space: SweepSpace) -> dict[str, object]:
        """:func:`kvbudget.plan`'s keyword arguments of this point."""
        return {
            "target": self.target,
            "draft": self.draft,
            "spec": self.spec,
            "gpu": self.gpu,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "dp_attention": self.dp_attention,
            "ep": self.ep,
            "kv_dtype": self.kv_dtype,
            "engine": self.engine,
            "max_batch_size": self.max_batch_size,
            "max_seq_len": space.max_seq_len,
            "max_draft_len": space.max_draft_len,
            "host_budget": space.host_budget,
            "tokens_per_block": space.tokens_per_block,
            "gpus_per_node": space.gpus_per_node,
            "max_num_batched_tokens": space.max_num_batched_tokens,
        }

    def plan_args(self, space: SweepSpace) -> list[str]:
        """The ``kvbudget plan`` flags of this point (the command that reproduces it)."""
        args = []
        for name, value in self.plan_kwargs(space).items():
            flag = f"--{name.replace('_', '-')}"
            if value is True:
                args.append(flag)  # a switch (--dp-attention)
            elif value is not None and value is not False:
                args += [flag, str(value)]
        return args

    def command(self, space: SweepSpace) -> str:
        """``kvbudget plan ...``, quoted for a POSIX shell."""
        return shlex.join(["kvbudget", "plan", *self.plan_args(space)])

    def label(self) -> str:
        """A short description: ``H200x2 tp2 pp1 dp1 ep1 fp8 vllm@0.33.0 b256``
        (``dp2a``: two data-parallel attention groups)."""
        spec = self.spec if self.draft is None else f"{self.spec}:{self.draft}"
        dp = f"dp{self.dp}{'a' if self.dp_attention else ''}"
        return (
            f"{self.gpu}x{self.gpus} tp{self.tp} pp{self.pp} {dp} ep{self.ep} "
            f"{self.kv_dtype} {self.engine} b{self.max_batch_size} {spec}"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(space: SweepSpace, count: int) -> Iterator[tuple[int, int, int, int, bool]]:
    """``(tp, pp, dp, ep, dp_attention)`` on ``count`` GPUs, each in its list (module
    docstring): ``tp x pp x dp == count``, or ``tp x pp == count`` under dp_attention."""
    for dp_attention in dict.fromkeys(space.dp_attention):
        for tp in _divisors(count):
            if space.tp is not None and tp not in space.tp:
                continue
            for pp in _divisors(count // tp):
                if pp not in space.pp:
                    continue
                for dp in _dp_sizes(space, count, tp, pp, dp_attention):
                    for ep in space.ep:
                        yield tp, pp, dp, ep, dp_attention


def _dp_sizes(space: SweepSpace, count: int, tp: int, pp: int, dp_attention: bool) -> list[int]:
    """The ``dp`` of each layout of ``tp`` and ``pp`` on ``count`` GPUs."""
    if not dp_attention:
        dp = count // (tp * pp)
        return [dp] if space.dp is None or dp in space.dp else []
    if tp * pp != count:
        return []
    if space.dp is None:
        return [d for d in _divisors(tp) if d > 1]
    return list(space.dp)


def layout_problem(
    target: ModelSpec, tp: int, pp: int, dp: int, ep: int, dp_attention: bool = False
) -> str | None:
    """Why ``target`` cannot run on this layout, or None.

    * ``tp`` must divide the attention heads: engines shard query heads evenly (vLLM
      ``ModelConfig.verify_with_parallel_config``, vllm-project/vllm
      ``vllm/config/model.py`` at 18ec6629: "Total number of attention heads (N) must be
      divisible by tensor parallel size (T)").
    * ``pp`` at most the layer count: a stage with no layer is not a stage.
    * ``ep > 1`` only for a model with routed experts, and as
      :meth:`~kvbudget.deployment.Parallelism.checked` takes it (dividing ``tp x dp``).
    * ``dp_attention`` only for a model with routed experts (the sweep's rule: data-
      parallel attention pairs with an expert FFN that stays parallel over all ``tp``
      ranks; a dense target's equivalent is plain ``dp`` replicas), with ``dp > 1``
      dividing ``tp`` as :meth:`~kvbudget.deployment.Parallelism.checked` takes it.
      What one engine refuses beyond that (TensorRT-LLM: ``dp == tp``) is the engine's
      reason on the row.
    """
    heads = target.num_attention_heads
    if heads % tp:
        return f"tp={tp} does not divide the target's {heads} attention heads"
    if pp > target.num_layers:
        return f"pp={pp} is more stages than the target's {target.num_layers} layers"
    if ep > 1 and not _has_experts(target):
        return f"ep={ep}: {target.name} has no routed experts"
    if dp_attention and not _has_experts(target):
        return (
            f"dp_attention: {target.name} has no routed experts (data-parallel attention "
            "is swept for MoE targets; use plain --dp replicas)"
        )
    try:
        Parallelism.checked(tp=tp, pp=pp, dp=dp, ep=ep, dp_attention=dp_attention)
    except InvalidArgumentError as exc:
        return str(exc)
    return None


def _has_experts(model: ModelSpec) -> bool:
    from kvbudget.weights import weights_bytes

    try:
        return weights_bytes(model).routed_experts_bytes > 0
    except KvBudgetError:
        return False


def _draft_pairs(space: SweepSpace) -> list[tuple[str | None, str]]:
    """(draft, spec) candidates: each draft with each spec that takes one."""
    pairs: list[tuple[str | None, str]] = []
    for spec in space.specs:
        drafts = space.drafts if spec in _DRAFT_SPECS else (None,)
        pairs += [(d, spec) for d in dict.fromkeys(drafts)]
    return list(dict.fromkeys(pairs))


def enumerate_configs(space: SweepSpace) -> tuple[SweepConfig, ...]:
    """Every point of ``space`` (checked first), in a stable order; a point whose layout
    the target cannot run carries its ``problem``. Loads the target and each draft once
    (raises ConfigError for an unknown one)."""
    space = space.checked()
    target = load_model(space.target)
    for draft in space.drafts:
        if draft is not None:
            load_model(draft)
    out: list[SweepConfig] = []
    for gpu, count in product(space.gpus, dict.fromkeys(space.gpu_counts)):
        for tp, pp, dp, ep, dp_attention in layouts(space, count):
            problem = layout_problem(target, tp, pp, dp, ep, dp_attention)
            for (draft, spec), kv, engine, batch in product(
                _draft_pairs(space), space.kv_dtypes, space.engines, space.max_batch_sizes
            ):
                out.append(
                    SweepConfig(
                        index=len(out),
                        target=space.target,
                        draft=draft,
                        spec=spec,
                        gpu=gpu,
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        ep=ep,
                        kv_dtype=kv,
                        engine=engine,
                        max_batch_size=batch,
                        dp_attention=dp_attention,
                        problem=problem,
                    )
                )
    return tuple(out)


__all__ = ["SweepConfig", "SweepSpace", "enumerate_configs", "layout_problem", "layouts"]
