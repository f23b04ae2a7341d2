"""Where a sweep's tasks run: in this process, on a process pool, or as Ray tasks.

Every backend runs the same pure task, :func:`kvbudget.search.task.evaluate_shard`, once
per configuration x trace shard (:func:`~kvbudget.search.task.shards`: one per DP
replica for the traffic objective), combines each configuration's outcomes into its row
(:func:`~kvbudget.search.task.combine`) and returns the rows in configuration order;
results are equal whatever the backend (the tasks are seeded and independent). No
scheduler of our own: ``concurrent.futures.ProcessPoolExecutor`` or Ray's own
(``ray.remote`` tasks, the settings put in Ray's object store once).

* :func:`run_local`: ``jobs == 1`` in this process, else a pool of ``jobs`` processes.
* :func:`run_ray`: an existing ``ray.init`` is used as it is; otherwise Ray is started
  locally (``address`` None) or joined at ``address`` (``auto``, ``HOST:PORT`` or
  ``ray://HOST:PORT``), which is first probed so that an address nothing answers at
  fails in seconds (Ray itself retries for minutes). The cluster's nodes need kvbudget
  installed (``pip install 'kvbudget[ray]'``).
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.search.row import SweepRow
from kvbudget.search.settings import SweepSettings
from kvbudget.search.space import SweepConfig
from kvbudget.search.task import ShardOutcome, ShardTask, combine, evaluate_shard, shards

Progress = Callable[[int], None]  # called with the number of configurations done
_PROBE_TIMEOUT_S = 5.0


class _Rows:
    """The tasks of ``configs`` and their outcomes as they arrive, by configuration; a
    configuration's row once all its tasks are in (``progress`` told how many are)."""

    def __init__(
        self, settings: SweepSettings, configs: Sequence[SweepConfig], progress: Progress | None
    ) -> None:
        self.settings, self.configs, self.progress = settings, configs, progress
        self.tasks: list[ShardTask] = [t for c in configs for t in shards(settings, c)]
        self._wanted = Counter(t.config.index for t in self.tasks)
        self._parts: dict[int, list[ShardOutcome]] = {c.index: [] for c in configs}
        self._rows: dict[int, SweepRow] = {}

    def add(self, outcome: ShardOutcome) -> None:
        """Take one task's outcome; its configuration's row once it is the last."""
        index = outcome.task.config.index
        parts = self._parts[index]
        parts.append(outcome)
        if len(parts) == self._wanted[index]:
            self._rows[index] = combine(self.settings, parts)
            del self._parts[index]
            if self.progress is not None:
                self.progress(len(self._rows))

    def rows(self) -> tuple[SweepRow, ...]:
        """Every configuration's row, in configuration order (all tasks added)."""
        return tuple(self._rows[c.index] for c in self.configs)


def run_local(
    settings: SweepSettings,
    configs: Sequence[SweepConfig],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
) -> tuple[SweepRow, ...]:
    """Each configuration's row, in order, its tasks over ``jobs`` processes (1: this
    one)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgumentError(f"--jobs must be an integer >= 1, got {jobs!r}")
    gathered = _Rows(settings, configs, progress)
    if jobs == 1 or len(gathered.tasks) <= 1:
        for task in gathered.tasks:
            gathered.add(evaluate_shard(settings, task))
        return gathered.rows()
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(jobs, len(gathered.tasks))) as pool:
        futures = [pool.submit(evaluate_shard, settings, t) for t in gathered.tasks]
        for future in as_completed(futures):
            gathered.add(future.result())
    return gathered.rows()


def run_ray(
    settings: SweepSettings,
    configs: Sequence[SweepConfig],
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    progress: Progress | None = None,
) -> tuple[SweepRow, ...]:
    """Each configuration's row, in order, one Ray task per configuration x trace shard
    (module docstring).
    ``num_cpus`` caps a Ray started here. Raises InvalidArgumentError without Ray or
    when nothing answers at ``address``."""
    ray = _import_ray()
    if not ray.is_initialized():
        if address is not None:
            probe_ray_address(address)
        try:
            ray.init(
                address=address,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="ERROR",
            )
        except ConnectionError as exc:
            raise InvalidArgumentError(
                f"--ray-address {address}: no Ray cluster answered ({exc}); start one "
                "(ray start --head) or give its address"
            ) from None
    gathered = _Rows(settings, configs, progress)
    remote = ray.remote(evaluate_shard)
    shared = ray.put(settings)
    waiting = [remote.remote(shared, t) for t in gathered.tasks]
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1)
        for ref in done:
            gathered.add(ray.get(ref))
    return gathered.rows()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError(
            "--ray needs Ray: pip install 'kvbudget[ray]' (or drop --ray / --ray-address)"
        ) from None
    return ray


def probe_ray_address(address: str) -> None:
    """Raise InvalidArgumentError unless a TCP connection opens to ``address``
    (``HOST:PORT`` or ``ray://HOST:PORT``; ``auto`` is left to Ray, which fails fast
    when it finds no local cluster)."""
    if address == "auto":
        return
    text = address.removeprefix("ray://")
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise InvalidArgumentError(
            f"--ray-address {address!r}: give HOST:PORT, ray://HOST:PORT or auto"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), _PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidArgumentError(
            f"--ray-address {address}: nothing answers there ({reason}); start the "
            "cluster (ray start --head) or fix the address"
        ) from None


__all__ = ["Progress", "probe_ray_address", "run_local", "run_ray"]
