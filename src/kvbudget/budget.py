"""The GPU KV budget of one rank: given, or derived from device memory and weights.

A plan says which way it went:

* **given**: ``--kv-budget`` bytes per rank, taken as is;
* **derived**, from the device's memory ``M``, the weights on the rank ``W`` and the
  memory that is neither (``N``: activations, CUDA graphs, runtime;
  :mod:`kvbudget.memory`, or ``--reserve`` for all of it), with one engine's knob and
  its semantics:

  - ``memory_fraction F`` (TensorRT-LLM's ``free_gpu_memory_fraction``, the default,
    0.9): ``floor((M - W - N) x F)``, a share of what is free after weights and a
    forward pass;
  - ``gpu_memory_utilization F`` (vLLM): ``floor(F x M) - W - N``, a share of the
    total for everything (vLLM subtracts its measured peak activation, non-torch memory
    and, since 0.21, its CUDA-graph estimate);
  - ``mem_fraction_static F`` (SGLang): ``floor(F x (M - P)) - W - B``, a share of the
    memory free before weights load for weights and KV pools, as SGLang profiles it
    (``free after weights - free before weights x (1 - F)``), with ``P`` the memory in
    use before weights load and ``B`` the buffers it allocates beside the weights before
    it profiles (the engine's :attr:`GpuBudgetRule.before_load`; SGLang's pre-load bytes
    and margin: so the ``--mem-fraction-static`` the plan emits is ``F`` itself); under
    an engine that gives none, ``P`` is the runtime estimate and ``B`` 0. Activations and
    CUDA graphs must fit in the rest, and a warning says when they would not. SGLang's
    default ``F`` is the one it computes itself for the deployment
    (:mod:`kvbudget.engines.sglang_memory`, a :class:`MemoryDefault` with its reason).

The budget knows devices and ledgers, not blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Literal

from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.gpus import get_gpu
from kvbudget.memory import NonKvMemory
from kvbudget.units import format_bytes, parse_bytes

MemoryRule = Literal["memory_fraction", "gpu_memory_utilization", "mem_fraction_static"]


@dataclass(frozen=True, kw_only=True)
class MemoryDefault:
    """An engine's own GPU memory knob and the value it picks when none is given.

    ``fraction_text`` is the value as the engine would hold it (a decimal string that
    :func:`parse_fraction` reads exactly); ``reason`` says, for reports, how the engine
    arrived at it when it computes the value itself (None: a fixed default).
    """

    rule: MemoryRule
    fraction_text: str
    reason: str | None = None


def parse_fraction(value: float | str, name: str = "memory_fraction") -> Fraction:
    """``value`` as an exact fraction in (0, 1]; raises InvalidArgumentError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidArgumentError(f"{name} must be a number in (0, 1], got {value!r}")
    try:
        frac = Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}") from None
    if not 0 < frac <= 1:
        raise InvalidArgumentError(f"{name} must be in (0, 1], got {value}")
    return frac


@dataclass(frozen=True, kw_only=True)
class GpuBudgetRule:
    """How a rank's GPU KV budget is obtained; :meth:`kv_bytes` applies it to one stage."""

    given_bytes: int | None
    memory_bytes: int | None
    gpu_name: str | None
    reserve_bytes: int | None  # --reserve: all non-KV memory, instead of the estimate
    fraction: Fraction
    fraction_text: str
    rule: MemoryRule = "memory_fraction"
    fraction_given: bool = False  # the user named the knob; else the engine's default
    default_reason: str | None = None  # how the engine computed its default (reports)
    # (P, B) of mem_fraction_static: memory in use before weights load, and the buffers
    # allocated beside the weights before the engine profiles (None: P is the runtime
    # estimate, B is 0); set by the engine model (EngineModel.before_load)
    before_load: tuple[int, int] | None = None
    # what nvidia-smi reports as the device's memory.total (MiB; gpus.csv
    # driver_total_mib), for engines that size from it; None for --gpu-memory
    driver_total_mib: int | None = None

    def with_default(self, default: MemoryDefault | tuple[MemoryRule, str]) -> GpuBudgetRule:
        """This rule under another engine's default knob, unless the user named one."""
        if self.fraction_given:
            return self
        if isinstance(default, tuple):
            default = MemoryDefault(rule=default[0], fraction_text=default[1])
        rule, text = default.rule, default.fraction_text
        return replace(
            self,
            rule=rule,
            fraction=parse_fraction(text, rule),
            fraction_text=text,
            default_reason=default.reason,
        )

    @property
    def derived(self) -> bool:
        """True when the budget comes from device memory minus weights (not given)."""
        return self.given_bytes is None

    def describe(self) -> str:
        """The semantics in words, for reports."""
        if self.given_bytes is not None:
            return "given (--kv-budget), per rank"
        f = self.fraction_text
        if not self.fraction_given:
            why = self.default_reason or "the engine's default"
            f = f"{f} ({why})"
        return {
            "memory_fraction": f"(GPU memory - weights - non-KV memory) x {f}: the share of "
            "memory free after weights and a forward pass (TensorRT-LLM "
            "free_gpu_memory_fraction semantics), per rank",
            "gpu_memory_utilization": f"GPU memory x {f} - weights - non-KV memory (vLLM "
            "--gpu-memory-utilization semantics), per rank",
            "mem_fraction_static": self._static_text(f),
        }[self.rule]

    def _static_text(self, f: str) -> str:
        if self.before_load is None:
            return (
                f"(GPU memory - runtime) x {f} - weights (SGLang --mem-fraction-static "
                "semantics: weights and KV pools), per rank"
            )
        pre_load, buffers = self.before_load
        return (
            f"(GPU memory - {format_bytes(pre_load)} in use before weights load) x {f} - "
            f"weights - {format_bytes(buffers)} of buffers beside them (SGLang "
            "--mem-fraction-static semantics: weights and KV pools), per rank"
        )

    def non_kv(self, estimate: NonKvMemory) -> NonKvMemory:
        """``estimate``, or ``--reserve`` as the whole of it when given."""
        if self.reserve_bytes is None:
            return estimate
        return NonKvMemory(
            activation_bytes=self.reserve_bytes,
            draft_activation_bytes=0,
            cuda_graph_bytes=0,
            runtime_bytes=0,
            source="given (--reserve): all non-KV memory",
        )

    def kv_bytes(self, weights_bytes: int, non_kv: NonKvMemory, *, pp_stage: int = 0) -> int:
        """KV bytes for a rank holding ``weights_bytes`` of weights and ``non_kv`` (as
        :meth:`non_kv` returned it).

        Raises InfeasibleBudgetError when weights and the rest fill the device.
        """
        if self.given_bytes is not None:
            return self.given_bytes
        assert self.memory_bytes is not None
        memory, frac = self.memory_bytes, self.fraction
        if self.rule == "gpu_memory_utilization":
            kv = int(memory * frac) - weights_bytes - non_kv.total_bytes
        elif self.rule == "mem_fraction_static":
            pre_load, buffers = self.before_load or (non_kv.runtime_bytes, 0)
            kv = int((memory - pre_load) * frac) - weights_bytes - buffers
        else:
            kv = int(max(0, memory - weights_bytes - non_kv.total_bytes) * frac)
        if kv <= 0:
            if self.rule == "mem_fraction_static":
                # this rule leaves activations outside the fraction: name what it takes
                pre_load, buffers = self.before_load or (non_kv.runtime_bytes, 0)
                taken = (
                    f"weights {format_bytes(weights_bytes)} + {format_bytes(buffers)} of "
                    f"buffers on PP stage {pp_stage} leave nothing for the KV cache under "
                    f"{self.rule}={self.fraction_text} of the GPU's {format_bytes(memory)} "
                    f"less {format_bytes(pre_load)} in use before weights load"
                )
                fix = (
                    "raise --tp/--pp or the fraction, use a quantized checkpoint or a larger --gpu"
                )
            else:
                taken = (
                    f"weights {format_bytes(weights_bytes)} + non-KV memory "
                    f"{format_bytes(non_kv.total_bytes)} on PP stage {pp_stage} leave nothing "
                    f"of the GPU's {format_bytes(memory)} for the KV cache under "
                    f"{self.rule}={self.fraction_text}"
                )
                fix = (
                    "raise --tp/--pp or the fraction, use a quantized checkpoint, a larger "
                    "--gpu, or lower --max-num-batched-tokens"
                )
            raise InfeasibleBudgetError(f"{taken}; {fix}")
        return kv


def gpu_budget_rule(
    *,
    kv_budget: int | str | None,
    gpu: str | None,
    gpu_memory: int | str | None,
    reserve: int | str | None,
    memory_fraction: float | str | None,
    gpu_memory_utilization: float | str | None = None,
    mem_fraction_static: float | str | None = None,
    default: tuple[MemoryRule, str] = ("memory_fraction", "0.9"),
) -> GpuBudgetRule:
    """Resolve the GPU budget arguments of :func:`kvbudget.plan` into a rule.

    ``gpu_memory`` wins over ``gpu``; ``kv_budget`` wins over both for the budget (the
    device is still reported). At most one of ``memory_fraction``,
    ``gpu_memory_utilization`` and ``mem_fraction_static`` is given (default: ``default``,
    the engine's own knob and value: :meth:`GpuBudgetRule.with_default`). Raises
    InvalidArgumentError for bad sizes, an unknown GPU, two fractions, or no way to obtain
    a budget.
    """
    given = None if kv_budget is None else parse_bytes(kv_budget, name="kv_budget")
    memory: int | None = None
    name: str | None = None
    smi_mib: int | None = None
    if gpu_memory is not None:
        memory, name = parse_bytes(gpu_memory, name="gpu_memory"), "custom"
    elif gpu is not None:
        device = get_gpu(gpu)
        memory, name, smi_mib = device.memory_bytes, device.name, device.driver_total_mib
    if given is None and memory is None:
        raise InvalidArgumentError(
            "give a GPU budget: --kv-budget BYTES, --gpu NAME or --gpu-memory BYTES"
        )
    chosen = [
        (rule, value)
        for rule, value in (
            ("memory_fraction", memory_fraction),
            ("gpu_memory_utilization", gpu_memory_utilization),
            ("mem_fraction_static", mem_fraction_static),
        )
        if value is not None
    ]
    if len(chosen) > 1:
        names = " and ".join(f"--{r.replace('_', '-')}" for r, _ in chosen)
        raise InvalidArgumentError(
            f"{names} are different engines' ways to size the KV cache; give one of them"
        )
    rule, value = chosen[0] if chosen else default
    return GpuBudgetRule(
        given_bytes=given,
        memory_bytes=memory,
        gpu_name=name,
        reserve_bytes=None if reserve is None else parse_bytes(reserve, name="reserve"),
        fraction=parse_fraction(value, rule),
        fraction_text=str(value),
        rule=rule,  # type: ignore[arg-type]
        fraction_given=bool(chosen),
        driver_total_mib=smi_mib,
    )
