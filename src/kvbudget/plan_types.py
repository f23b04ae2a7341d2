"""The immutable result of planning: per rank, per manager, per tier.

These are the values the cache builds its pools from (``SpecDecodeCache.from_plan``) and
that ``kvbudget plan --json`` prints. All sizes are integers: bytes, blocks or tokens,
per rank unless a name says ``node``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
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
    """What an engine's pools hold on one rank, computed once by its engine model.

    * ``tokens``: GPU tokens of the growing layers, as the engine counts them (kvbudget:
      the tokens every manager holds in whole blocks; vLLM: its logged "GPU KV cache
      size"; SGLang: ``max_total_num_tokens``; TensorRT-LLM: the full-length pool of the
      binding manager).
    * ``gpu_blocks``, ``host_blocks``, ``disk_blocks``: blocks of ``tokens_per_block``
      per tier; under kvbudget the count every manager's pool holds (the one count
      :class:`~kvbudget.SpecDecodeCache` builds its pools from; a manager with no
      growing layer holds them too, at 0 bytes each; with no growing layer at all the
      GPU count is ``max_batch_size x ceil(max_seq_len / block)``).
    * ``max_concurrency``: sequences of ``max_seq_len`` (+ lookahead) running at once,
      capped at ``max_batch_size``; ``max_seq_len_at_batch``: the longest sequence at the
      full batch (None where the engine model does not say).
    * ``lookahead_tokens``: unverified draft tokens per sequence (the deployment's
      ``max_draft_len``, 0 without speculation).
    """

    tokens: int
    tokens_per_block: int
    gpu_blocks: int
    host_blocks: int
    disk_blocks: int
    host_tokens: int
    disk_tokens: int
    max_seq_len: int
    lookahead_tokens: int
    max_batch_size: int
    max_concurrency: int
    max_seq_len_at_batch: int | None = None
    kv_groups: int = 1  # data-parallel groups, each holding its own sequences (--dp)

    @property
    def total_tokens(self) -> int:
        """GPU tokens of the whole deployment: ``tokens`` in each of ``kv_groups``."""
        return self.tokens * self.kv_groups

    @property
    def total_concurrency(self) -> int:
        """Sequences of the whole deployment: ``max_concurrency`` per DP group."""
        return self.max_concurrency * self.kv_groups

    def to_dict(self) -> dict[str, Any]:
        """The capacity as plain data, with the deployment totals."""
        return {
            **asdict(self),
            "total_tokens": self.total_tokens,
            "total_concurrency": self.total_concurrency,
        }


@dataclass(frozen=True, kw_only=True)
class StagePlan:
    """One pipeline stage of a rank: its GPU KV budget, weights and common blocks."""

    pp_stage: int
    gpu_bytes: int
    weights_bytes: int | None
    fixed_bytes: int
    blocks: int
    tp_ranks: str = "all"  # which TP ranks of the stage: "all", or e.g. "0" and "1-3"


PoolRole = Literal["target", "draft", "target+draft"]
PoolKind = Literal["kv", "window", "chunked", "state", "checkpoint", "hybrid"]


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """One pool an engine allocates on one rank, in one tier.

    * ``role``: whose layers it caches; ``"target+draft"`` for a pool the engine shares
      between both (vLLM's one block pool).
    * ``kind``: ``kv`` (full-length attention or MLA), ``window`` (sliding-window layers,
      ``window_tokens`` long), ``chunked`` (chunked local attention, ``window_tokens`` a
      chunk), ``state`` (recurrent-state slots), ``checkpoint`` (recurrent states kept
      at block boundaries for prefix reuse), ``hybrid`` (one pool whose blocks serve
      several of those, vLLM's hybrid groups).
    * ``blocks`` of ``tokens_per_block`` tokens (state pools: slots, one per sequence);
      ``bytes``: what the engine allocates for it; ``tokens``: the tokens it holds for
      requests of the plan's ``max_seq_len`` (for a window or state pool: the tokens of
      the sequences its blocks serve, 0 when it holds no token of its own);
      ``padding_bytes``: the part of ``bytes`` no block uses; ``reserved_blocks``: blocks
      the engine holds back and never gives a request (vLLM's null block);
      ``name``: the engine's own word for it.
    """

    role: PoolRole
    kind: PoolKind
    tier: Tier
    tokens_per_block: int
    blocks: int
    bytes: int
    tokens: int
    window_tokens: int | None = None
    padding_bytes: int = 0  # bytes of ``bytes`` no block uses
    reserved_blocks: int = 0  # of ``blocks``, held back by the engine (vLLM's null block)
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The pool as plain data (one entry of the ``"engine"."pools"`` list)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class EngineSource:
    """Where an engine model's facts were read: repository, the release or commit, and
    the files its sizing follows."""

    repository: str
    ref: str  # a release ("v0.33.0", a PyPI wheel) or a commit
    files: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EnginePlan:
    """What one engine (model name and version) allocates for a deployment, whole.

    Every engine model returns this one shape; tables, JSON, ``--emit``, the cache and
    the simulator read it, and nothing downstream recomputes a figure in it.

    * ``pools``: every pool the engine allocates (:class:`PoolPlan`), per role, kind and
      tier; ``capacity``: what they hold, computed by the engine model from its pools
      once (it is the plan's ``capacity``).
    * ``settings``: flag or YAML key -> value, exactly as :func:`kvbudget.emit` writes it
      (empty for kvbudget's own cache, which has no flags); a key ``env.NAME`` is an
      environment variable the engine's process needs (the command's prefix, or the
      ``export`` the comments name), so the settings alone reproduce the launch.
    * ``log``: the engine's predicted start-up lines about its KV cache, verbatim;
      ``notes``: what each setting does there (the emitted comments); ``warnings``: what
      the deployer must know; ``refusals``: why the engine would refuse to start with
      these settings (in the engine's words where it prints them; empty when it starts).
    * ``detail``: the engine's own figures beyond the pools (vLLM's KV cache groups,
      TensorRT-LLM's window shares, SGLang's profiled budget), JSON-ready.
    """

    name: str
    version: str
    source: EngineSource
    pools: tuple[PoolPlan, ...]
    capacity: Capacity
    settings: Mapping[str, Any]
    log: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``name@version``, as ``--engine`` takes it."""
        return f"{self.name}@{self.version}"

    def pool_bytes(self, tier: Tier) -> int:
        """Bytes of every pool of ``tier`` together."""
        return sum(p.bytes for p in self.pools if p.tier == tier)

    def to_dict(self) -> dict[str, Any]:
        """The engine plan as plain data (the ``"engine"`` object of schema 3)."""
        return {
            "name": self.name,
            "version": self.version,
            "source": {
                "repository": self.source.repository,
                "ref": self.source.ref,
                "files": list(self.source.files),
            },
            "pools": [p.to_dict() for p in self.pools],
            "capacity": self.capacity.to_dict(),
            "settings": _plain(dict(self.settings)),
            "log": list(self.log),
            "notes": [note.removeprefix("# ") for note in self.notes],
            "warnings": list(self.warnings),
            "refusals": list(self.refusals),
            "detail": _plain(self.detail),
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
    """A complete KV plan for one rank of a speculative-decoding deployment.

    ``budget``, ``managers`` and ``stages`` are kvbudget's ledger: the budget per rank
    and its split between the roles (ledger rules 3 and 4, per role geometry); ``engine``
    is what the chosen engine allocates from it, and ``capacity`` is the engine's.
    """

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
    engine: EnginePlan
    stages: tuple[StagePlan, ...] = ()
    warnings: tuple[str, ...] = ()
    vocab_size: int | None = None  # the target's: token ids are in [0, vocab_size)
    spec_reason: str | None = None  # why spec="auto" chose ``spec``; None when given
    target_path: str | None = None  # absolute folder of a local target config
    draft_path: str | None = None  # absolute folder of a local draft config
    draft_tp: int | None = None  # the draft's TP size when not ``tp``
    dp: int = 1  # data-parallel groups (each its own sequences)
    dp_attention: bool = False  # the dp groups split the tp ranks' attention
    ep: int = 1  # expert-parallel size
    target_revision: str | None = None  # the Hub commit the target resolved to
    draft_revision: str | None = None  # the Hub commit the draft resolved to
    # where each role's weights figure comes from: "safetensors headers", "inventory"
    # (counted from the config) or "given (--weights-bytes)"
    weights_source: Mapping[str, str] = field(default_factory=dict)

    @property
    def capacity(self) -> Capacity:
        """What the plan holds: the engine's capacity (:attr:`EnginePlan.capacity`)."""
        return self.engine.capacity

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
        """The plan as plain data (schema 3); every size an integer.

        Schema 2 added the top-level ``"engine"`` object; schema 3 made it the whole
        engine plan (:meth:`EnginePlan.to_dict`: pools, capacity, settings, log, notes,
        warnings, refusals, detail), and ``"capacity"`` is the engine's. Schema 3 also
        carries ``"target_revision"``/``"draft_revision"`` (the Hub commit sha a Hub id
        resolved to, else null) and ``"weights_source"`` (role -> where its weights
        figure comes from), added later as new keys.
        """
        b = self.budget
        return {
            "schema": SCHEMA_VERSION,
            "target": self.target,
            "draft": self.draft,
            "target_path": self.target_path,
            "draft_path": self.draft_path,
            "target_revision": self.target_revision,
            "draft_revision": self.draft_revision,
            "weights_source": dict(self.weights_source),
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
            "capacity": self.capacity.to_dict(),
            "stages": [asdict(stage) for stage in self.stages],
            "warnings": list(self.warnings),
            "engine": self.engine.to_dict(),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)


SCHEMA_VERSION = 3


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
        out[f"{t.tier}_bytes"] = t.bytes  # the role's share of the tier's budget
    return out
