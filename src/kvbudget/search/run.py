"""Where a sweep's tasks run: in this process, on a process pool, or as Ray tasks.

Every backend runs the same pure task, :func:`kvbudget.search.task.evaluate`, once per
configuration, and returns the rows in configuration order; results are equal whatever
the backend (the tasks are seeded and independent). No scheduler of our own:
``concurrent.futures.ProcessPoolExecutor`` or Ray's own (``ray.remote`` tasks, the
settings put in Ray's object store once).

* :func:`run_local`: ``jobs == 1`` in this process, else a pool of ``jobs`` processes.
* :func:`run_ray`: an existing ``ray.init`` is used as it is; otherwise Ray is started
  locally (``address`` None) or joined at ``address`` (``auto``, ``HOST:PORT`` or
  ``ray://HOST:PORT``), which is first probed so that an address nothing answers at
  fails in seconds (Ray itself retries for minutes). The cluster's nodes need kvbudget
  installed (``pip install 'kvbudget[ray]'``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.search.row import SweepRow
from kvbudget.search.settings import SweepSettings
from kvbudget.search.space import SweepConfig
from kvbudget.search.task import evaluate

Progress = Callable[[int], None]  # called with the number of configurations done
_PROBE_TIMEOUT_S = 5.0


def run_local(
    settings: SweepSettings,
    configs: Sequence[SweepConfig],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
) -> tuple[SweepRow, ...]:
    """Each configuration's row, in order, over ``jobs`` processes (1: this one)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgumentError(f"--jobs must be an integer >= 1, got {jobs!r}")
    rows: dict[int, SweepRow] = {}
    if jobs == 1 or len(configs) <= 1:
        for config in configs:
            rows[config.index] = evaluate(settings, config)
            if progress is not None:
                progress(len(rows))
        return tuple(rows[c.index] for c in configs)
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(jobs, len(configs))) as pool:
        futures = {pool.submit(evaluate, settings, c): c.index for c in configs}
        for future in as_completed(futures):
            rows[futures[future]] = future.result()
            if progress is not None:
                progress(len(rows))
    return tuple(rows[c.index] for c in configs)


def run_ray(
    settings: SweepSettings,
    configs: Sequence[SweepConfig],
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    progress: Progress | None = None,
) -> tuple[SweepRow, ...]:
    """Each configuration's row, in order, one Ray task each (module docstring).
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
    task = ray.remote(evaluate)
    shared = ray.put(settings)
    pending = {task.remote(shared, c): c.index for c in configs}
    rows: dict[int, SweepRow] = {}
    waiting = list(pending)
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1)
        for ref in done:
            rows[pending[ref]] = ray.get(ref)
        if progress is not None:
            progress(len(rows))
    return tuple(rows[c.index] for c in configs)


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
