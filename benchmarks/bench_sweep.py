"""How fast ``kvbudget sweep`` runs its configurations: one process (the baseline), a
process pool of ``--jobs`` workers, and Ray tasks on a local Ray of ``--jobs`` CPUs.

Usage::

    python benchmarks/bench_sweep.py                       # both objectives, every backend
    python benchmarks/bench_sweep.py --objective traffic --limit 1000 --jobs 4
    python benchmarks/bench_sweep.py --no-ray

Spaces (Llama-3.1-8B-Instruct + its EAGLE3 head, max_seq_len 32,768):

* capacity: H200, H100, A100-80GB, L40S x 1, 2, 4, 8 GPUs (every tp x dp) x auto/fp8 KV
  x kvbudget, vLLM, SGLang, TensorRT-LLM x batch 128/256: 640 configurations.
* traffic: H200, H100 x 1, 2 GPUs (every tp x dp) x auto/fp8 x kvbudget, vLLM: 24
  configurations, each replaying the first ``--limit`` requests of the shipped Azure
  trace (policy kvbudget, seed 0): 32 tasks, a dp=2 layout's two replicas apart.

Prints, per objective and backend: wall seconds, milliseconds per configuration, the
speed-up against the one-process run of the same objective in this run, and whether
the rows are equal to the baseline's. Ray's start (``ray.init``) is timed apart.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from kvbudget.search import SweepSettings, SweepSpace, TrafficSettings, enumerate_configs, sweep
from kvbudget.search.task import shards

CAPACITY = SweepSpace(
    gpus=("h200", "h100", "a100-80gb", "l40s"),
    gpu_counts=(1, 2, 4, 8),
    kv_dtypes=("auto", "fp8"),
    engines=("kvbudget", "vllm", "sglang", "trtllm"),
    max_batch_sizes=(128, 256),
    max_seq_len=32768,
)
TRAFFIC = SweepSpace(
    gpus=("h200", "h100"),
    gpu_counts=(1, 2),
    kv_dtypes=("auto", "fp8"),
    engines=("kvbudget", "vllm"),
    max_seq_len=32768,
)


def _timed(objective: str, space: SweepSpace, limit: int, **backend: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = sweep(
        space,
        objective=objective,  # type: ignore[arg-type]
        traffic=TrafficSettings(limit=limit),
        **backend,
    )
    return result, time.perf_counter() - start


def _line(name: str, wall_s: float, configs: int, base_s: float, same: bool | None) -> None:
    equal = "-" if same is None else ("yes" if same else "NO")
    print(
        f"  {name:<12} {wall_s:8.2f} s  {1000 * wall_s / configs:8.1f} ms/config  "
        f"x{base_s / wall_s:5.2f} vs 1 process  same rows: {equal}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--objective", choices=("capacity", "traffic", "both"), default="both")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, default=500, help="requests per replay")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args(argv)
    ray: Any = None
    if not args.no_ray:
        try:
            import ray
        except ImportError:
            print("ray is not installed (pip install 'kvbudget[ray]'): no Ray runs")
    if ray is not None:
        start = time.perf_counter()
        ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (local, {args.jobs} CPUs): {time.perf_counter() - start:.2f} s")
    print(f"CPUs: {os.cpu_count()}; --jobs {args.jobs}")
    objectives = ("capacity", "traffic") if args.objective == "both" else (args.objective,)
    for objective in objectives:
        space = CAPACITY if objective == "capacity" else TRAFFIC
        base, base_s = _timed(objective, space, args.limit, jobs=1)
        configs = len(base.rows)
        extra = f", {args.limit} requests each" if objective == "traffic" else ""
        settings = SweepSettings(space=space, objective=objective).checked()  # type: ignore[arg-type]
        tasks = sum(len(shards(settings, c)) for c in enumerate_configs(settings.space))
        extra += f", {tasks} tasks"
        print(f"{objective}: {configs} configurations{extra} ({base.counts()})")
        _line("1 process", base_s, configs, base_s, None)
        pool, pool_s = _timed(objective, space, args.limit, jobs=args.jobs)
        _line(f"pool {args.jobs}", pool_s, configs, base_s, pool.rows == base.rows)
        if ray is not None:
            on_ray, ray_s = _timed(objective, space, args.limit, ray=True)
            _line("ray", ray_s, configs, base_s, on_ray.rows == base.rows)
    if ray is not None:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
