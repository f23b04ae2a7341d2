"""The sweep's Ray backend on a local Ray instance (``ray.init`` on this machine): the
same rows as one process. Skipped without the ``ray`` extra."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kvbudget
from kvbudget.search import SweepSpace, TrafficSettings, sweep

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    # workers import kvbudget from where this process does
    src = str(Path(kvbudget.__file__).resolve().parents[1])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, old) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.mark.parametrize("router", ["round-robin", "prefix"])
def test_ray_tasks_give_the_rows_of_one_process(local_ray: Any, router: str) -> None:
    """One Ray task per configuration x DP replica: the dp=2 rows are two tasks each,
    merged as in one process."""
    space = SweepSpace(
        gpu_counts=(1, 2),
        engines=("kvbudget", "vllm"),
        kv_dtypes=("auto", "fp8"),
        max_seq_len=16384,
    )
    traffic = TrafficSettings(limit=40, rate_scale=4.0, dp_router=router)
    one = sweep(space, objective="traffic", traffic=traffic, jobs=1)
    on_ray = sweep(space, objective="traffic", traffic=traffic, ray=True)
    assert on_ray.backend == "ray"
    assert on_ray.rows == one.rows and on_ray.front == one.front
    assert len(one.rows) == 2 * 2 * 3  # engines x dtypes x (1 GPU, tp2, dp2)
    dp_rows = [r for r in one.rows if r.config.dp == 2]
    assert len(dp_rows) == 4
    assert all(r.traffic is not None and r.traffic.replicas == 2 for r in dp_rows)
    assert all(r.traffic.requests == 40 for r in dp_rows if r.traffic is not None)


def test_the_cli_with_ray_prints_the_rows_of_one_process(local_ray: Any) -> None:
    import json

    from typer.testing import CliRunner

    from kvbudget.cli import app

    args = ["sweep", "--gpu-count", "1,2", "--engine", "kvbudget,sglang", "--json"]
    args += ["--max-seq-len", "32768"]
    one = CliRunner().invoke(app, [*args, "--jobs", "1"])
    on_ray = CliRunner().invoke(app, [*args, "--ray"])
    assert one.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    a, b = json.loads(one.stdout), json.loads(on_ray.stdout)
    assert (a["backend"], b["backend"]) == ("local", "ray")
    assert a["rows"] == b["rows"] and len(a["rows"]) == 2 * 3
