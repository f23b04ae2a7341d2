"""The GPU KV budget of one rank: given, or derived from device memory and weights.

Two semantics, and a plan says which one it used:

* **given**: ``--kv-budget`` bytes per rank, taken as is;
* **derived**: ``floor((device memory - weights on the rank - reserve) x fraction)``.
  The fraction applies to what is free after weights and the runtime reserve, as
  TensorRT-LLM's ``free_gpu_memory_fraction`` does (vLLM's ``gpu_memory_utilization`` is
  instead a fraction of *total* memory; see :mod:`kvbudget.engines`).

The budget knows devices and ledgers, not blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.gpus import get_gpu
from kvbudget.units import format_bytes, parse_bytes


def parse_fraction(value: float | str) -> Fraction:
    """``value`` as an exact fraction in (0, 1]; raises InvalidArgumentError otherwise."""
    try:
        frac = Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise InvalidArgumentError(f"memory_fraction must be a number, got {value!r}") from None
    if not 0 < frac <= 1:
        raise InvalidArgumentError(f"memory_fraction must be in (0, 1], got {value}")
    return frac


@dataclass(frozen=True, kw_only=True)
class GpuBudgetRule:
    """How a rank's GPU KV budget is obtained; :meth:`kv_bytes` applies it to one stage."""

    given_bytes: int | None
    memory_bytes: int | None
    gpu_name: str | None
    reserve_bytes: int
    fraction: Fraction
    fraction_text: str

    @property
    def derived(self) -> bool:
        """True when the budget comes from device memory minus weights (not given)."""
        return self.given_bytes is None

    def describe(self) -> str:
        """The semantics in words, for reports."""
        if self.given_bytes is not None:
            return "given (--kv-budget), per rank"
        return (
            f"(GPU memory - weights - reserve) x {self.fraction_text}: the fraction of memory "
            "free after weights and runtime reserve (TensorRT-LLM free_gpu_memory_fraction "
            "semantics), per rank"
        )

    def kv_bytes(self, weights_bytes: int, *, pp_stage: int = 0) -> int:
        """KV bytes for a rank holding ``weights_bytes`` of weights.

        Raises InfeasibleBudgetError when weights and reserve fill the device.
        """
        if self.given_bytes is not None:
            return self.given_bytes
        assert self.memory_bytes is not None
        free = self.memory_bytes - weights_bytes - self.reserve_bytes
        if free <= 0:
            raise InfeasibleBudgetError(
                f"weights {format_bytes(weights_bytes)} + reserve "
                f"{format_bytes(self.reserve_bytes)} on PP stage {pp_stage} leave nothing of "
                f"the GPU's {format_bytes(self.memory_bytes)} for the KV cache; raise "
                "--tp/--pp, use a quantized checkpoint, a larger --gpu, or lower --reserve"
            )
        return int(free * self.fraction)


def gpu_budget_rule(
    *,
    kv_budget: int | str | None,
    gpu: str | None,
    gpu_memory: int | str | None,
    reserve: int | str,
    memory_fraction: float | str,
) -> GpuBudgetRule:
    """Resolve the GPU budget arguments of :func:`kvbudget.plan` into a rule.

    ``gpu_memory`` wins over ``gpu``; ``kv_budget`` wins over both for the budget (the
    device is still reported). Raises InvalidArgumentError for bad sizes, an unknown GPU,
    or no way to obtain a budget.
    """
    given = None if kv_budget is None else parse_bytes(kv_budget, name="kv_budget")
    memory: int | None = None
    name: str | None = None
    if gpu_memory is not None:
        memory, name = parse_bytes(gpu_memory, name="gpu_memory"), "custom"
    elif gpu is not None:
        device = get_gpu(gpu)
        memory, name = device.memory_bytes, device.name
    if given is None and memory is None:
        raise InvalidArgumentError(
            "give a GPU budget: --kv-budget BYTES, --gpu NAME or --gpu-memory BYTES"
        )
    return GpuBudgetRule(
        given_bytes=given,
        memory_bytes=memory,
        gpu_name=name,
        reserve_bytes=parse_bytes(reserve, name="reserve"),
        fraction=parse_fraction(memory_fraction),
        fraction_text=str(memory_fraction),
    )
