"""The engine-model type: one engine version, registered by name and version.

An engine model turns a :class:`~kvbudget.deployment.Deployment` and kvbudget's budget
ledger into that engine's whole plan (:class:`~kvbudget.plan_types.EnginePlan`): the
pools it allocates, what they hold, the settings that make it allocate them, its
predicted start-up lines, warnings and refusals. Each engine version is one module that
defines ``MODEL``; :mod:`kvbudget.engines.registry` lists them. Nothing downstream
branches on an engine's name: what differs between engines is in these values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvbudget.budget import MemoryDefault, MemoryRule
from kvbudget.plan_types import EngineSource

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger
    from kvbudget.plan_types import EnginePlan, Plan


@dataclass(frozen=True, kw_only=True)
class EngineModel:
    """One engine version's model.

    * ``name`` and ``version``: ``--engine name@version``; ``default``: the version that
      ``--engine name`` picks.
    * ``source``: the repository, release or commit and files the model was read from.
    * ``fixed_per_batch``: the engine reserves window blocks and recurrent state for
      ``max_batch_size`` sequences up front (kvbudget's own cache); False where it draws
      them per request from its pools, so the ledger reserves them for one sequence.
    * ``sizes_cached_states``: ``cached_states`` (recurrent states kept for prefix
      reuse) is a setting of this engine; others size their own.
    * ``reads_pre_load_bytes``: the deployment's ``pre_load_bytes`` (GPU memory in use
      before weights load) enters this engine's settings; others ignore it (a warning).
    * ``spec_names``: the speculation modes it runs (None: every mode kvbudget plans).
    * ``memory_default``: the engine's own GPU memory knob and its default value, which
      derives the KV budget when the user gives neither ``--kv-budget`` nor a knob: a
      fixed ``(knob, value)``, or a function of the deployment for an engine that
      computes its default itself (:meth:`memory_default_for` is the one reader).
    * ``before_load(deployment)``: for an engine whose ``mem_fraction_static`` is a share
      of the memory free before weights load, the bytes in use before they load and the
      buffers it allocates beside them before profiling (:attr:`GpuBudgetRule.before_load`;
      None: the runtime estimate and nothing).
    * ``check(deployment)``: raises InvalidArgumentError for a deployment this model does
      not cover (before any planning); ``plan(deployment, ledger)``: the engine plan;
      ``render(plan)``: the emitted settings as text (None: nothing to emit).
    """

    name: str
    version: str
    default: bool
    source: EngineSource
    summary: str
    plan: Callable[[Deployment, Ledger], EnginePlan]
    check: Callable[[Deployment], None]
    render: Callable[[Plan], str] | None = None
    fixed_per_batch: bool = False
    sizes_cached_states: bool = False
    reads_pre_load_bytes: bool = False
    spec_names: frozenset[str] | None = None
    memory_default: tuple[MemoryRule, str] | Callable[[Deployment], MemoryDefault] = (
        "memory_fraction",
        "0.9",
    )

    before_load: Callable[[Deployment], tuple[int, int]] | None = None

    def memory_default_for(self, deployment: Deployment) -> MemoryDefault:
        """The knob and value this engine picks for ``deployment`` when none is given."""
        if isinstance(self.memory_default, tuple):
            rule, text = self.memory_default
            return MemoryDefault(rule=rule, fraction_text=text)
        return self.memory_default(deployment)

    @property
    def id(self) -> str:
        """``name@version``."""
        return f"{self.name}@{self.version}"


def no_check(deployment: Deployment) -> None:
    """A :attr:`EngineModel.check` that accepts every deployment."""
    del deployment


__all__ = ["EngineModel", "no_check"]
