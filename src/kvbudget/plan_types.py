"""The immutable result of planning: per rank, per manager, per tier.

These are the values the cache builds its pools from (``SpecDecodeCache.from_plan``) and
that ``kvbudget plan --json`` prints. All sizes are integers: bytes, blocks or tokens,
per rank unless a name says ``node``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from kvbudget.cost import WindowGroup
from kvbudget.memory import NonKvMemory
from kvbudget.split import Tier

Role = Literal["target", "draft"]
ROLES: tuple[Role, ...] = ("target", "draft")


@dataclass(frozen=True, kw_only=True)
class TierPlan:
    """One manager's share of one tier on one rank.

    ``blocks`` whole blocks of ``block_bytes`` hold the growing layers' tokens;
    ``tokens == blocks x tokens_per_block``. On the GPU the manager's fixed bytes
    (window pools, recurrent state) come out of ``bytes`` first. ``padding_bytes`` is what
    is left over: ``bytes - fixed - blocks x block_bytes``.
    """

    tier: Tier
    bytes: int
    blocks: int
    tokens: int
    padding_bytes: int


@dataclass(frozen=True, kw_only=True)
class ManagerPlan:
    """The cache of one model role over its layers on one rank.

    * ``slope_bytes_per_token``: bytes per token of the layers whose cache grows;
      ``block_bytes = slope_bytes_per_token x tokens_per_block``.
    * ``fixed_bytes``: window pools + recurrent state, GPU-resident:
      ``window_bytes + state_bytes_per_seq x max_batch_size
      + state_bytes_per_checkpoint x cached_states``.
    * ``window_groups``: sliding-window layers by window size; each is a GPU pool of
      ``blocks_per_seq x max_batch_size`` blocks of ``bytes_per_token x tokens_per_block``.
    * ``state_bytes_per_seq``: one recurrent-state slot; ``max_batch_size`` slots.
    * ``cached_states``: recurrent states kept at block boundaries for prefix reuse, of
      ``state_bytes_per_checkpoint`` each (one state, no lookahead copies).
    """

    role: Role
    model: str
    layers: Literal["model", "mtp", "all"]
    num_layers: int
    kv_dtype: str
    tokens_per_block: int
    slope_bytes_per_token: int
    fixed_bytes: int
    window_bytes: int
    window_groups: tuple[WindowGroup, ...]
    state_bytes_per_seq: int
    max_batch_size: int
    gpu: TierPlan
    host: TierPlan
    disk: TierPlan
    cached_states: int = 0
    state_bytes_per_checkpoint: int = 0

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of the growing layers on this rank."""
        return self.slope_bytes_per_token * self.tokens_per_block

    def tier(self, name: Tier) -> TierPlan:
        """The :class:`TierPlan` of ``name`` ("gpu", "host" or "disk")."""
        return {"gpu": self.gpu, "host": self.host, "disk": self.disk}[name]


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Bytes per rank given to KV caches, and where the GPU figure came from."""

    gpu_bytes: int
    host_bytes: int
    disk_bytes: int
    gpu_source: str  # how gpu_bytes was obtained, in words
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None
    weights_bytes: int | None = None
    reserve_bytes: int | None = None
    memory_fraction: float | None = None
    gpus_per_node: int = 1
    host_memory_bytes: int | None = None
    memory_rule: str | None = None  # memory_fraction / gpu_memory_utilization / ...
    non_kv: NonKvMemory | None = None  # the parts a derived budget left out

    @property
    def node_host_bytes(self) -> int:
        """Host bytes pinned by all ranks of one node."""
        return self.host_bytes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """What the plan holds: tokens common to all managers, and what that buys.

    ``gpu_blocks``, ``host_blocks``, ``disk_blocks`` are the blocks every manager's pool
    holds per tier: the one count :class:`~kvbudget.SpecDecodeCache` builds its pools
    from. A manager with no growing layer (every layer a window shorter than
    ``max_seq_len``) holds them too, at 0 bytes each; when no manager has a growing
    layer, the GPU count is ``max_batch_size x ceil(max_seq_len / block)``.
    """

    tokens: int  # GPU tokens every manager holds (whole blocks)
    gpu_blocks: int
    host_blocks: int
    disk_blocks: int
    host_tokens: int
    disk_tokens: int
    max_seq_len: int
    max_draft_len: int
    lookahead_tokens: int
    max_batch_size: int
    max_concurrency: int  # sequences of max_seq_len (+ lookahead) that fit on the GPU
    max_seq_len_at_batch: int  # longest sequence that fits at max_batch_size
    kv_groups: int = 1  # data-parallel groups, each holding its own sequences (--dp)

    @property
    def total_tokens(self) -> int:
        """GPU tokens of the whole deployment: ``tokens`` in each of ``kv_groups``."""
        return self.tokens * self.kv_groups

    @property
    def total_concurrency(self) -> int:
        """Sequences of the whole deployment: ``max_concurrency`` per DP group."""
        return self.max_concurrency * self.kv_groups


@dataclass(frozen=True, kw_only=True)
class StagePlan:
    """One pipeline stage of a rank: its GPU KV budget, weights and common blocks."""

    pp_stage: int
    gpu_bytes: int
    weights_bytes: int | None
    fixed_bytes: int
    blocks: int
    tp_ranks: str = "all"  # which TP ranks of the stage: "all", or e.g. "0" and "1-3"


@dataclass(frozen=True, kw_only=True)
class EnginePlan:
    """What one serving engine will allocate for a plan, and the settings that make it.

    * ``name``: ``"kvbudget"`` (the project's own cache), ``"vllm"``, ``"sglang"`` or
      ``"trtllm"``; ``version``: the engine version the model of it is for.
    * ``settings``: flag or YAML key -> value, exactly as :func:`kvbudget.emit` writes it.
    * ``predicted``: the engine's pools and figures, JSON-ready (integers, floats, strings,
      lists and dicts of those); keys differ per engine (see each engine's module).
    * ``log``: the engine's predicted start-up lines about its KV cache, verbatim.
    * ``notes``: what each setting really does in that engine, for the emitted comments.
    * ``gpu_tokens``: tokens of the growing layers the engine holds on one GPU, as the
      engine itself counts them (its logged capacity); ``max_concurrency``: sequences of
      ``max_seq_len`` it runs at once, capped at ``max_batch_size``. They become the plan's
      ``capacity.tokens`` and ``capacity.max_concurrency``.
    """

    name: str
    version: str
    settings: Mapping[str, Any]
    predicted: Mapping[str, Any]
    gpu_tokens: int
    max_concurrency: int
    log: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The engine plan as plain data (the ``"engine"`` object of schema 2)."""
        return {
            "name": self.name,
            "version": self.version,
            "settings": dict(self.settings),
            "predicted": _plain(self.predicted),
            "log": list(self.log),
        }


def _plain(value: Any) -> Any:
    """Mappings and sequences of ``value`` as dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A complete KV plan for one rank of a speculative-decoding deployment."""

    target: str
    draft: str | None
    spec: str
    tp: int
    pp: int
    pp_stage: int  # the stage reported (the last: where draft layers live)
    binding_pp_stage: int  # the stage whose blocks cap capacity
    kv_dtype: str
    tokens_per_block: int
    budget: Budget
    managers: tuple[ManagerPlan, ...]
    capacity: Capacity
    stages: tuple[StagePlan, ...] = ()
    warnings: tuple[str, ...] = ()
    engine: EnginePlan | None = None
    vocab_size: int | None = None  # the target's: token ids are in [0, vocab_size)
    spec_reason: str | None = None  # why spec="auto" chose ``spec``; None when given
    target_path: str | None = None  # absolute folder of a local target config
    draft_path: str | None = None  # absolute folder of a local draft config
    draft_tp: int | None = None  # the draft's TP size when not ``tp``
    dp: int = 1  # data-parallel groups (each its own sequences)
    dp_attention: bool = False  # the dp groups split the tp ranks' attention
    ep: int = 1  # expert-parallel size

    @property
    def target_source(self) -> str:
        """What an engine loads the target from: the local folder, else the preset id."""
        return self.target_path or self.target

    @property
    def draft_source(self) -> str | None:
        """What an engine loads the draft from (None without a draft model)."""
        return self.draft_path or self.draft

    @property
    def min_stage_gpu_bytes(self) -> int:
        """The smallest GPU KV budget of any PP stage: safe for a per-GPU engine knob."""
        if not self.stages:
            return self.budget.gpu_bytes
        return min(stage.gpu_bytes for stage in self.stages)

    def manager(self, role: Role) -> ManagerPlan | None:
        """The manager of ``role``, or None (e.g. no draft cache for ngram)."""
        for m in self.managers:
            if m.role == role:
                return m
        return None

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (schema 2); every size an integer.

        Schema 2 added the top-level ``"engine"`` object (:meth:`EnginePlan.to_dict`).
        """
        b = self.budget
        return {
            "schema": SCHEMA_VERSION,
            "target": self.target,
            "draft": self.draft,
            "target_path": self.target_path,
            "draft_path": self.draft_path,
            "spec": self.spec,
            "spec_reason": self.spec_reason,
            "tp": self.tp,
            "pp": self.pp,
            "draft_tp": self.draft_tp if self.draft_tp is not None else self.tp,
            "dp": self.dp,
            "dp_attention": self.dp_attention,
            "ep": self.ep,
            "pp_stage": self.pp_stage,
            "binding_pp_stage": self.binding_pp_stage,
            "kv_dtype": self.kv_dtype,
            "tokens_per_block": self.tokens_per_block,
            "vocab_size": self.vocab_size,
            "budget": {
                "gpu_bytes": b.gpu_bytes,
                "host_bytes": b.host_bytes,
                "disk_bytes": b.disk_bytes,
                "weights_bytes": b.weights_bytes,
                "reserve_bytes": b.reserve_bytes,
                "memory_rule": b.memory_rule,
                "memory_fraction": b.memory_fraction,
                "non_kv": None
                if b.non_kv is None
                else {
                    "activation_bytes": b.non_kv.activation_bytes,
                    "draft_activation_bytes": b.non_kv.draft_activation_bytes,
                    "cuda_graph_bytes": b.non_kv.cuda_graph_bytes,
                    "runtime_bytes": b.non_kv.runtime_bytes,
                    "total_bytes": b.non_kv.total_bytes,
                    "source": b.non_kv.source,
                },
                "gpu_name": b.gpu_name,
                "gpu_memory_bytes": b.gpu_memory_bytes,
                "gpu_source": b.gpu_source,
                "gpus_per_node": b.gpus_per_node,
                "node_gpu_bytes": b.gpu_bytes * b.gpus_per_node,
                "node_host_bytes": b.node_host_bytes,
                "node_disk_bytes": b.disk_bytes * b.gpus_per_node,
                "host_memory_bytes": b.host_memory_bytes,
            },
            "managers": [_manager_dict(m) for m in self.managers],
            "capacity": {
                **asdict(self.capacity),
                "total_tokens": self.capacity.total_tokens,
                "total_concurrency": self.capacity.total_concurrency,
            },
            "stages": [asdict(stage) for stage in self.stages],
            "warnings": list(self.warnings),
            "engine": None if self.engine is None else self.engine.to_dict(),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)


SCHEMA_VERSION = 2


def _manager_dict(m: ManagerPlan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": m.role,
        "model": m.model,
        "layers": m.layers,
        "num_layers": m.num_layers,
        "kv_dtype": m.kv_dtype,
        "tokens_per_block": m.tokens_per_block,
        "slope_bytes_per_token": m.slope_bytes_per_token,
        "block_bytes": m.block_bytes,
        "fixed_bytes": m.fixed_bytes,
        "window_bytes": m.window_bytes,
        "state_bytes_per_seq": m.state_bytes_per_seq,
        "cached_states": m.cached_states,
        "state_bytes_per_checkpoint": m.state_bytes_per_checkpoint,
        "max_batch_size": m.max_batch_size,
        "window_groups": [asdict(g) for g in m.window_groups],
    }
    for t in (m.gpu, m.host, m.disk):
        out[f"{t.tier}_bytes"] = t.bytes
        out[f"{t.tier}_blocks"] = t.blocks
        out[f"{t.tier}_tokens"] = t.tokens
        out[f"{t.tier}_padding_bytes"] = t.padding_bytes
    return out
