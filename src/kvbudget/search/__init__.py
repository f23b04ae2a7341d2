"""``kvbudget sweep`` (:func:`kvbudget.sweep`): the best deployment for a model and a
workload, searched over GPUs, layouts, KV dtypes, engines and batch sizes.

Module map (data flows down; nothing here is imported by the planner or the simulator)::

    space.py     SweepSpace (the axes), SweepConfig (one point), the valid layouts
    settings.py  SweepSettings: space, objective, replay, SLO, prices (one frozen value)
    prices.py    the user's price-per-GPU-hour CSV
    task.py      evaluate_shard(settings, config x replica): the one pure task;
                 combine(): a configuration's row from its replicas' outcomes
    row.py       SweepRow, TrafficMetrics; which columns are exact, which modelled
    run.py       where tasks run: this process, a process pool, Ray tasks
    rank.py      score, ranking, the Pareto front
    driver.py    sweep(): enumerate, run, rank; SweepResult and its JSON
    render.py    the rich table
    html.py      one self-contained HTML report (matplotlib, the ``report`` extra)
"""

from kvbudget.search.driver import SWEEP_SCHEMA_VERSION, SweepResult, sweep
from kvbudget.search.row import EXACT_COLUMNS, MODELLED_COLUMNS, SweepRow, TrafficMetrics
from kvbudget.search.settings import Slo, SweepSettings, TrafficSettings
from kvbudget.search.space import SweepConfig, SweepSpace, enumerate_configs

__all__ = [
    "EXACT_COLUMNS",
    "MODELLED_COLUMNS",
    "SWEEP_SCHEMA_VERSION",
    "Slo",
    "SweepConfig",
    "SweepResult",
    "SweepRow",
    "SweepSettings",
    "SweepSpace",
    "TrafficMetrics",
    "TrafficSettings",
    "enumerate_configs",
    "sweep",
]
