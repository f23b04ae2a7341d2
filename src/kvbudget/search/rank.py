"""Ranking a sweep's rows and marking its Pareto front.

The score (:func:`score`) of a row is the objective's figure, oriented so that larger
is better:

=============  ==========================  ===================================
objective      without prices              with prices
=============  ==========================  ===================================
capacity       sequences per GPU (exact)   -(price an hour per sequence held)
traffic        output tokens/s per GPU     -(price per million output tokens)
=============  ==========================  ===================================

The front is over the ``ok`` rows, in the dimensions of :func:`dimensions` (each
larger-is-better): the score, fewer GPUs, and for traffic a lower TTFT at the SLO's
percentile. A row is on the front when no other row is at least as good in every
dimension and better in one. Ranks: ``ok`` rows by score (then fewer GPUs, then
enumeration order), then ``slo`` rows likewise, then ``infeasible`` and ``invalid`` in
enumeration order.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.search.row import SweepRow
from kvbudget.search.settings import SweepSettings

_STATUS_ORDER = {"ok": 0, "slo": 1, "infeasible": 2, "invalid": 3}


def score(row: SweepRow, settings: SweepSettings) -> float | None:
    """The row's objective figure, larger better (module table); None without one."""
    priced = bool(settings.prices)
    if settings.objective == "capacity":
        if priced:
            cost = row.price_per_seq_hour
            return None if cost is None else -cost
        return row.seqs_per_gpu
    if priced:
        cost = row.cost_per_mtok
        return None if cost is None else -cost
    return None if row.traffic is None else row.traffic.output_tokens_per_s_per_gpu


def dimensions(row: SweepRow, settings: SweepSettings) -> tuple[float, ...] | None:
    """The row's front dimensions, each larger better; None when it has no score."""
    s = score(row, settings)
    if s is None:
        return None
    dims: tuple[float, ...] = (s, -float(row.gpus))
    if settings.objective == "traffic" and row.traffic is not None:
        ttft = row.traffic.ttft_s.get(settings.slo.percentile)
        dims += (-(ttft if ttft is not None else float("inf")),)
    return dims


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


def pareto_front(rows: Sequence[SweepRow], settings: SweepSettings) -> frozenset[int]:
    """Configuration indices of the ``ok`` rows on the front (module docstring)."""
    points = {
        r.config.index: d
        for r in rows
        if r.status == "ok" and (d := dimensions(r, settings)) is not None
    }
    return frozenset(
        i for i, d in points.items() if not any(_dominates(o, d) for o in points.values())
    )


def ranked(rows: Sequence[SweepRow], settings: SweepSettings) -> tuple[SweepRow, ...]:
    """``rows`` in rank order (module docstring). Pure."""

    def key(row: SweepRow) -> tuple[int, float, int, int]:
        s = score(row, settings) if row.status in ("ok", "slo") else None
        return (
            _STATUS_ORDER[row.status],
            -s if s is not None else float("inf"),
            row.gpus if s is not None else 0,
            row.config.index,
        )

    return tuple(sorted(rows, key=key))


__all__ = ["dimensions", "pareto_front", "ranked", "score"]
