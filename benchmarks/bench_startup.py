"""How long ``kvbudget plan`` takes from a shell, against ``python -c pass``.

Usage::

    python benchmarks/bench_startup.py            # best of 10 runs each
    python benchmarks/bench_startup.py --runs 20

Both commands run as subprocesses with the same interpreter, one after the other, and the
best wall time of each is kept (the minimum is the least disturbed by other work on a
shared machine). The difference is what kvbudget adds: imports, the plan, the table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def best_of(command: list[str], runs: int) -> float:
    """The shortest wall time of ``runs`` runs of ``command`` (output discarded)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    python = sys.executable
    baseline = best_of([python, "-c", "pass"], args.runs)
    plan = best_of([python, "-m", "kvbudget", "plan"], args.runs)
    print(f"python -c pass:  {baseline:.3f} s (best of {args.runs})")
    print(f"kvbudget plan:   {plan:.3f} s (best of {args.runs})")
    print(f"ratio: {plan / baseline:.1f}x; kvbudget adds {plan - baseline:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
