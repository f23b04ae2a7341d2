"""``kvbudget.sweep(...)``: every configuration of a space, planned (and replayed),
ranked, with the Pareto front; :class:`SweepResult` and its ``--json`` document::

    {"schema": 1, "kind": "kvbudget-sweep", "objective", "backend",
     "columns": {"exact": [...], "modelled": [...], "note"},
     "space": {...}, "traffic": {...} | null, "slo": {...}, "prices": {gpu: price},
     "counts": {"configurations", "ok", "slo", "infeasible", "invalid"},
     "rows": [{"rank", "front", "score", <SweepRow.to_dict()>}, ...]}
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.search.prices import read_prices
from kvbudget.search.rank import pareto_front, ranked, score
from kvbudget.search.row import EXACT_COLUMNS, MODELLED_COLUMNS, SweepRow
from kvbudget.search.run import Progress, run_local, run_ray
from kvbudget.search.settings import Objective, Slo, SweepSettings, TrafficSettings
from kvbudget.search.space import SweepConfig, SweepSpace, enumerate_configs

SWEEP_SCHEMA_VERSION = 1
COLUMN_NOTE = (
    "exact: sequences, tokens and KV bytes from the engine models' Capacity (what "
    "`kvbudget plan` prints); modelled: tokens/s, TTFT, TPOT from the simulator's "
    "roofline, a lower bound on step time (tokens/s an upper bound, TTFT/TPOT lower bounds)"
)


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """A sweep's rows in rank order, the configuration indices on the Pareto front,
    and where it ran (``backend``: ``local``, ``pool N`` or ``ray``) in ``wall_s``."""

    settings: SweepSettings
    rows: tuple[SweepRow, ...]
    front: frozenset[int]
    backend: str
    wall_s: float

    @property
    def winner(self) -> SweepRow | None:
        """The first-ranked ``ok`` row, or None when none is."""
        return next((r for r in self.rows if r.status == "ok"), None)

    def counts(self) -> dict[str, int]:
        """Rows by status, and all of them."""
        out = {"configurations": len(self.rows)}
        for status in ("ok", "slo", "infeasible", "invalid"):
            out[status] = sum(r.status == status for r in self.rows)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (module docstring)."""
        s = self.settings
        return {
            "schema": SWEEP_SCHEMA_VERSION,
            "kind": "kvbudget-sweep",
            "objective": s.objective,
            "backend": self.backend,
            "columns": {
                "exact": list(EXACT_COLUMNS),
                "modelled": list(MODELLED_COLUMNS),
                "note": COLUMN_NOTE,
            },
            "space": asdict(s.space),
            "traffic": _traffic_dict(s.traffic) if s.objective == "traffic" else None,
            "slo": asdict(s.slo),
            "prices": dict(s.prices),
            "counts": self.counts(),
            "rows": [
                {
                    "rank": rank,
                    "front": row.config.index in self.front,
                    "score": score(row, s) if row.status in ("ok", "slo") else None,
                    **row.to_dict(),
                }
                for rank, row in enumerate(self.rows, 1)
            ],
        }


def sweep(
    space: SweepSpace | None = None,
    *,
    objective: Objective = "capacity",
    traffic: TrafficSettings | None = None,
    slo: Slo | None = None,
    prices: str | Path | Mapping[str, float] | None = None,
    jobs: int = 1,
    ray: bool = False,
    ray_address: str | None = None,
    progress: Progress | None = None,
    **axes: Any,
) -> SweepResult:
    """Plan every configuration of ``space`` (or of a :class:`SweepSpace` built from
    ``axes``: ``target=``, ``gpus=``, ``gpu_counts=``, ``engines=``, ...), replay the
    trace through each for the traffic objective, rank the rows and mark the front.

    ``prices``: a CSV path (:func:`~kvbudget.search.prices.read_prices`) or a mapping of
    GPU to price per GPU-hour. Runs in this process (``jobs`` 1), a pool of ``jobs``
    processes, or as Ray tasks (``ray``, or ``ray_address``); the rows are the same.
    ``progress(done)`` is called as configurations finish.

    Raises InvalidArgumentError (an empty space, an unknown GPU, engine or policy, a bad
    price file, SLO or replay setting (checked for either objective), Ray missing or not
    answering), ConfigError (an unknown model), OSError (an unreadable trace or price
    file).
    """
    if space is None:
        space = SweepSpace(**_tupled(axes))
    elif axes:
        raise InvalidArgumentError(f"pass a SweepSpace or its fields, not both: {sorted(axes)}")
    table = read_prices(prices) if isinstance(prices, (str, Path)) else dict(prices or {})
    settings = SweepSettings(
        space=space,
        objective=objective,
        traffic=traffic or TrafficSettings(),
        slo=slo or Slo(),
        prices=table,
    ).checked()
    configs = runnable(enumerate_configs(settings.space))
    start = time.perf_counter()
    with readable_trace(settings) as readable:
        # checked for the capacity objective too: a bad flag is an error, not ignored
        check_traffic(readable.traffic)
        if ray or ray_address is not None:
            rows = run_ray(readable, configs, address=ray_address, num_cpus=None, progress=progress)
            backend = "ray"
        else:
            rows = run_local(readable, configs, jobs=jobs, progress=progress)
            backend = "local" if jobs == 1 else f"pool {jobs}"
    wall = time.perf_counter() - start
    return SweepResult(
        settings=settings,
        rows=ranked(rows, settings),
        front=pareto_front(rows, settings),
        backend=backend,
        wall_s=wall,
    )


def runnable(configs: tuple[SweepConfig, ...]) -> tuple[SweepConfig, ...]:
    """``configs`` when at least one can be planned; raises InvalidArgumentError for an
    empty space (none at all, or every layout invalid, with the reasons)."""
    if not configs:
        raise InvalidArgumentError(
            "the sweep space holds no configuration: no tp x pp x dp of the --gpu-counts "
            "is in the --tp/--pp/--dp lists; widen them"
        )
    if all(c.problem is not None for c in configs):
        reasons = list(dict.fromkeys(str(c.problem) for c in configs))
        raise InvalidArgumentError(
            f"the sweep space holds no configuration the target can run: "
            f"{'; '.join(reasons[:3])}; change --gpu-counts or the layout lists"
        )
    return configs


def _traffic_dict(traffic: TrafficSettings) -> dict[str, Any]:
    """The traffic settings as the JSON gives them: ``read_path`` (a temporary copy)
    is not a setting of the sweep, only where this run read it from."""
    out = asdict(traffic)
    del out["read_path"]
    return out


@contextmanager
def readable_trace(settings: SweepSettings) -> Iterator[SweepSettings]:
    """``settings`` whose trace every task can read again: a trace given as ``-``, a
    pipe or a FIFO is copied once to a temporary file that lives as long as the block
    (``TrafficSettings.read_path``); the rows' commands keep naming ``trace``. Only the
    traffic objective reads the trace; a ``read_path`` already set is kept."""
    from kvbudget.sim.trace import replayable_trace

    t = settings.traffic
    if settings.objective != "traffic" or t.trace is None or t.read_path is not None:
        yield settings
        return
    with replayable_trace(t.trace) as path:
        yield replace(settings, traffic=replace(t, read_path=str(path)))


def check_traffic(traffic: TrafficSettings) -> None:
    """Fail before any task on a bad replay setting: an unknown policy or DP router, an
    unreadable trace (its first row read), a bad acceptance or rate scale."""
    from kvbudget.sim import POLICIES, AcceptanceModel, read_trace
    from kvbudget.sim.shards import require_router
    from kvbudget.sim.trace import require_rate_scale

    unknown = [p for p in traffic.policies if p not in POLICIES]
    if unknown or not traffic.policies:
        raise InvalidArgumentError(
            f"unknown policies {unknown or traffic.policies}; choose from {', '.join(POLICIES)}"
        )
    require_router(traffic.dp_router)
    require_rate_scale(traffic.rate_scale)
    AcceptanceModel.parse(traffic.acceptance)
    if traffic.limit is not None and traffic.limit < 1:
        raise InvalidArgumentError(f"--limit must be >= 1, got {traffic.limit}")
    next(iter(read_trace(traffic.trace_path(), limit=1)), None)


def _tupled(axes: Mapping[str, Any]) -> dict[str, Any]:
    """Space fields with lists made tuples (a list is not hashable in a frozen value)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in axes.items()}


__all__ = ["COLUMN_NOTE", "SWEEP_SCHEMA_VERSION", "SweepResult", "check_traffic", "sweep"]
