"""The inventory language: a model's weight tensors as architectures describe them.

An architecture module (:mod:`kvbudget.architectures`) adds every tensor of its
checkpoint to an :class:`Inventory` through :class:`At` scopes (a module prefix, a place
under pipeline parallelism, a component), with each dimension given as heads of a size so
that tensor parallelism can split it (:meth:`Weight.rank_shape`). Counting
(:mod:`kvbudget.weights.counts`), quantization (:mod:`kvbudget.weights.quantization`)
and per-rank placement (:mod:`kvbudget.weights.placement`) all read the same inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from kvbudget.config_fields import ConfigFields
from kvbudget.layers import per_rank
from kvbudget.model_spec import ModelSpec

Component = Literal[
    "embeddings",
    "lm_head",
    "attention",
    "recurrent",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "routers",
    "norms",
    "eagle3_fc",
    "mtp",
    "vision",
]
Shard = Literal["replicated", "column", "row", "vocab", "padded_vocab"]
# Where a tensor lives under pipeline parallelism: the first stage, the last stage, the
# MTP layers (last stage, only when asked for), or the stage of decoder layer ``int``.
Place = Literal["first", "last", "mtp"] | int
Parts = tuple[tuple[int, int], ...]  # (number of heads, values per head) along one dim

VOCAB_PADDING = 64  # vLLM DEFAULTVOCAB_PADDING_SIZE


@dataclass(frozen=True, kw_only=True)
class Weight:
    """One checkpoint tensor (or ``copies`` identical ones, e.g. experts): ``rows x cols``.

    ``rows`` are output features (vocabulary rows, channels, a vector's length), ``cols``
    input features (1 for a vector). ``out_parts`` / ``in_parts`` give each dim as heads
    of a size, which is how TP splits it (``column`` splits rows, ``row`` columns).
    ``linear`` marks a linear-layer weight that checkpoint quantization may convert;
    ``expert`` a routed-expert weight (kept when MTP layers refile it under ``mtp``).
    ``fixed`` pins the storage (``fp32``, ``int64``) regardless of the model dtype.
    """

    name: str
    component: Component
    place: Place
    out_parts: Parts
    in_parts: Parts = ((1, 1),)
    copies: int = 1
    shard: Shard = "replicated"
    linear: bool = False
    fixed: str | None = None
    is_param: bool = True
    expert: bool = False

    @property
    def rows(self) -> int:
        return sum(n * size for n, size in self.out_parts)

    @property
    def cols(self) -> int:
        return sum(n * size for n, size in self.in_parts)

    @property
    def num_params(self) -> int:
        return self.copies * self.rows * self.cols if self.is_param else 0

    def rank_shape(self, tp: int) -> tuple[int, int]:
        """``(rows, cols)`` of one copy on one of ``tp`` ranks."""
        if self.shard == "column":
            return sum(per_rank(n, tp) * size for n, size in self.out_parts), self.cols
        if self.shard == "row":
            return self.rows, sum(per_rank(n, tp) * size for n, size in self.in_parts)
        if self.shard in ("vocab", "padded_vocab"):
            padded = -(-self.rows // VOCAB_PADDING) * VOCAB_PADDING
            # padded_vocab: a vocab-parallel head built with disable_tp, whole on every rank
            return (padded if self.shard == "padded_vocab" else -(-padded // tp)), self.cols
        return self.rows, self.cols


def parts(size: int | Parts) -> Parts:
    return ((size, 1),) if isinstance(size, int) else size


class Inventory:
    """The tensors of one model, collected by its architecture module."""

    def __init__(self) -> None:
        self.weights: list[Weight] = []

    def at(self, prefix: str, place: Place, component: Component) -> At:
        """A scope adding tensors named ``prefix.<name>``, at ``place``, as ``component``."""
        return At(inv=self, prefix=prefix, place=place, component=component)

    def extend_as_mtp(self, other: Inventory) -> None:
        """Add ``other``'s tensors as MTP weights (component and place ``mtp``)."""
        self.weights += [replace(w, component="mtp", place="mtp") for w in other.weights]


@dataclass(frozen=True, kw_only=True)
class At:
    """Adds tensors under one module prefix, at one place, filed under one component."""

    inv: Inventory
    prefix: str
    place: Place
    component: Component

    def sub(self, name: str, component: Component | None = None) -> At:
        """The scope of child module ``name`` (optionally filed under ``component``)."""
        return replace(self, prefix=self._name(name), component=component or self.component)

    def _name(self, name: str) -> str:
        return ".".join(part for part in (self.prefix, name) if part)

    def tensor(self, name: str, out: int | Parts, inp: int | Parts = 1, **kw: Any) -> None:
        """One tensor of ``out x inp`` (``inp`` 1 for a vector); empty ones are skipped."""
        weight = Weight(
            name=self._name(name),
            component=self.component,
            place=self.place,
            out_parts=parts(out),
            in_parts=parts(inp),
            expert=self.component == "routed_experts",
            **kw,
        )
        if weight.rows * weight.cols:
            self.inv.weights.append(weight)

    def norm(self, name: str, size: int, *, bias: bool = False) -> None:
        """A replicated norm weight (and bias, for a LayerNorm)."""
        self.tensor(name, size)
        if bias:
            self.tensor(f"{name}.bias", size)

    def linear(
        self,
        name: str,
        out: int | Parts,
        inp: int | Parts,
        *,
        shard: Shard,
        bias: bool = False,
        copies: int = 1,
        quantizable: bool = True,
    ) -> None:
        """A linear layer; a column-parallel bias is split like the rows, others replicated."""
        self.tensor(name, out, inp, copies=copies, shard=shard, linear=quantizable)
        if bias:
            bias_shard: Shard = "column" if shard == "column" else "replicated"
            self.tensor(f"{name}.bias", out, copies=copies, shard=bias_shard)

    def vocab(self, name: str, rows: int, hidden: int) -> None:
        """A vocab-parallel embedding or lm_head."""
        self.tensor(name, rows, hidden, shard="vocab")


class ModelFields(ConfigFields):
    """The config fields of ``model`` (its text config, or ``cfg`` under ``prefix``),
    read to count its weights: a missing field says so."""

    def __init__(
        self, model: ModelSpec, cfg: Mapping[str, Any] | None = None, prefix: str = ""
    ) -> None:
        super().__init__(
            model.config if cfg is None else cfg,
            model.source,
            prefix,
            missing="required to count the weights but missing",
        )
        self.model = model


def top_config(model: ModelSpec) -> Mapping[str, Any]:
    """The checkpoint's top-level config (``raw_config``), else the text config.

    For a multimodal checkpoint the vision tower and any quantization config sit beside
    the text config, at the top level.
    """
    return model.raw_config or model.config


__all__ = [
    "VOCAB_PADDING",
    "At",
    "Component",
    "Inventory",
    "ModelFields",
    "Parts",
    "Place",
    "Shard",
    "Weight",
    "parts",
    "top_config",
]
