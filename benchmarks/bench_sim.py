"""How fast ``kvbudget simulate`` replays requests, and whether its memory stays flat.

Usage::

    python benchmarks/bench_sim.py                         # 10^5 requests, policy kvbudget
    python benchmarks/bench_sim.py --policies all --jobs 2 # all five policies, 2 processes
    python benchmarks/bench_sim.py --requests 20000        # a smaller run (memory check)
    python benchmarks/bench_sim.py --requests 5000 --profile
    python benchmarks/bench_sim.py --requests 5000 --profile --profile-sort cumulative

Workload: the shipped Azure LLM inference trace (conversation, 2023; 19,366 requests in
one hour; CC-BY 4.0) tiled end to end until ``--requests`` (each lap shifted by the
trace's duration plus one second, indices renumbered), streamed, with the default
synthetic prefixes (seed 0); the default plan (``kvbudget.plan()``: Llama-3.1-8B-Instruct
+ EAGLE3 on one H200) unless budgets are given; acceptance 0.7 per token, K = 3.

Prints per policy, for the step-by-step loop with the engine's cache
(``ReplayConfig(fast_forward=False, counted_cache=False)``, the baseline) and the fast
path (the default: :mod:`kvbudget.sim.fast_decode` and, where the plan fits it,
:mod:`kvbudget.sim.counted_cache`) run in this same process: requests, simulated
steps, wall and CPU seconds of the replay, requests/s (wall and CPU), the fast path's
ratio to the baseline, whether their metrics are identical, and the process's peak
resident memory (``ru_maxrss``: run two sizes in separate processes to see whether it
grows). CPU seconds are the steadier figure on a
shared machine. ``--no-baseline`` runs the fast path alone; ``--repeat R`` replays each
R times and reports the fastest (as ``timeit`` does: other processes only add time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import time
from collections.abc import Iterator
from dataclasses import replace

import kvbudget
from kvbudget.sim import POLICIES, AcceptanceModel, ReplayConfig, policy_plans, replay
from kvbudget.sim.roofline import gpu_rates, roofline_for
from kvbudget.sim.trace import PrefixSynthesis, TraceRequest, default_trace_path, read_trace


def trace_duration_s() -> float:
    """The shipped trace's last arrival, seconds (read once, before any timing)."""
    duration = 0.0
    for last in read_trace(default_trace_path(), prefixes=PrefixSynthesis(share=0.0)):
        duration = last.arrival_s
    return duration


def tiled(
    requests: int,
    synth: PrefixSynthesis,
    rate_scale: float = 1.0,
    duration: float | None = None,
) -> Iterator[TraceRequest]:
    """The shipped trace, lap after lap, until ``requests`` requests, arrivals divided by
    ``rate_scale``; laps ``duration`` + 1 s apart (default: :func:`trace_duration_s`)."""
    path = default_trace_path()
    if duration is None:
        duration = trace_duration_s()
    lap, count = 0, 0
    while True:
        shift = lap * (duration + 1.0)
        for r in read_trace(path, prefixes=replace(synth, seed=synth.seed + lap)):
            if count >= requests:
                return
            yield TraceRequest(
                index=count,
                arrival_s=(r.arrival_s + shift) / rate_scale,
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens,
                prefix_group=r.prefix_group,
                prefix_tokens=r.prefix_tokens,
            )
            count += 1
        lap += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--policies", default="kvbudget", help="comma list, or 'all'")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (all policies)")
    parser.add_argument("--kv-budget", default=None)
    parser.add_argument("--host-budget", default="0")
    parser.add_argument("--max-seq-len", type=int, default=None)
    parser.add_argument("--rate-scale", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the first policy")
    parser.add_argument(
        "--profile-sort", default="tottime", help="pstats order: tottime, cumulative, ..."
    )
    parser.add_argument("--no-baseline", action="store_true", help="the fast path alone")
    parser.add_argument(
        "--repeat", type=int, default=1, help="replays of each, the fastest reported (as timeit)"
    )
    args = parser.parse_args(argv)

    plan = kvbudget.plan(
        kv_budget=args.kv_budget, host_budget=args.host_budget, max_seq_len=args.max_seq_len
    )
    names = POLICIES if args.policies == "all" else tuple(args.policies.split(","))
    roof = roofline_for(plan, gpu_rates(plan.budget.gpu_name or "H200"))
    config = ReplayConfig(acceptance=AcceptanceModel(rates=(0.7,)))
    synth = PrefixSynthesis()

    variants = policy_plans(plan, names)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        replay(variants[0], tiled(args.requests, synth, args.rate_scale), roof, config)
        profiler.disable()
        pstats.Stats(profiler).sort_stats(args.profile_sort).print_stats(18)
        return 0
    print(
        f"plan: {plan.target} + {plan.draft}, {plan.capacity.gpu_blocks:,} GPU blocks, "
        f"{plan.capacity.host_blocks:,} host blocks; {args.requests:,} requests "
        f"(the Azure conversation trace tiled), rate scale {args.rate_scale:g}"
    )
    configs = [("fast path", config)]
    if not args.no_baseline:
        baseline = replace(config, fast_forward=False, counted_cache=False)
        configs.insert(0, ("step by step", baseline))
    jobs = [(v, args, roof, c) for v in variants for _, c in configs]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_timed, jobs))
        wall = time.perf_counter() - start
        print(f"{len(jobs)} replays in {args.jobs} processes: {wall:.1f} s wall")
    else:
        results = [_timed(job) for job in jobs]
    for i in range(0, len(results), len(configs)):
        runs = results[i : i + len(configs)]
        for (label, _), (name, w, cpu, steps, done, _) in zip(configs, runs, strict=True):
            print(f"{label:>12} " + _line(name, args.requests, steps, w, cpu, done))
        if len(runs) == 2:
            (_, w0, c0, *_, m0), (_, w1, c1, *_, m1) = runs
            same = "identical" if m0 == m1 else "DIFFERENT"
            print(f"{'':>12} fast path: {w0 / w1:.2f}x wall, {c0 / c1:.2f}x CPU; metrics {same}")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of this process: {peak_mib:,.0f} MiB")
    return 0


def _timed(
    job: tuple[object, argparse.Namespace, object, ReplayConfig],
) -> tuple[str, float, float, int, int, dict[str, object]]:
    """The fastest of ``--repeat`` replays (wall and CPU seconds each the least seen:
    other processes on a shared machine only ever add time); every repeat's metrics
    must be the same."""
    runs = [_timed_once(job) for _ in range(max(1, job[1].repeat))]
    for other in runs[1:]:
        assert other[3:] == runs[0][3:], "a repeated replay gave other metrics"
    name, _, _, steps, done, metrics = runs[0]
    wall = min(r[1] for r in runs)
    cpu = min(r[2] for r in runs)
    return name, wall, cpu, steps, done, metrics


def _timed_once(
    job: tuple[object, argparse.Namespace, object, ReplayConfig],
) -> tuple[str, float, float, int, int, dict[str, object]]:
    variant, args, roof, config = job
    synth = PrefixSynthesis()
    stream = tiled(args.requests, synth, args.rate_scale, trace_duration_s())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    m = replay(variant, stream, roof, config)  # type: ignore[arg-type]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return m.policy, wall, cpu, m.steps, m.completed, m.to_dict()


def _line(name: str, requests: int, steps: int, wall: float, cpu: float, done: int) -> str:
    return (
        f"{name:>22}: {requests:,} requests ({done:,} completed), {steps:,} steps, "
        f"{wall:6.2f} s wall ({requests / wall:7,.0f} req/s), {cpu:6.2f} s CPU "
        f"({requests / cpu:7,.0f} req/s)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
