"""``kvbudget simulate``: replay a request trace against the plan and its budget policies.

:func:`simulate_options` declares the simulator's own options; :mod:`kvbudget.cli`
registers the command with the plan's options (the ``kvbudget plan`` declarations,
shared, not copied) in front of these, and calls :func:`run_simulate` with the plan's
keyword arguments. matplotlib is imported only when plots or HTML are asked for.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.progress import Progress

SIMULATE_HELP = (
    "Replay a request trace against the plan and its budget policies, side by side.\n\n"
    "Default: the default plan (as `kvbudget plan`) and the shipped Azure LLM inference "
    "trace (conversation, 2023; CC-BY 4.0). Each policy (kvbudget, doubled-host, "
    "equal-split, target-geometry-draft, no-host) is a variant of the same plan, replayed "
    "through the real metadata-only cache.\n\n"
    "Step times come from a roofline of the GPU preset (weights and KV bytes over memory "
    "bandwidth, FLOPs over the dense BF16 peak, host copies over the host link): lower "
    "bounds, for comparing policies, not for predicting an engine's latency."
)


def simulate_options(
    trace: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Trace: Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or CSV/JSONL of "
            "arrival_s,prompt_tokens,output_tokens[,prefix_group] (default: the shipped "
            "Azure conversation trace).",
        ),
    ] = None,
    policies: Annotated[
        str,
        typer.Option(
            metavar="LIST",
            help="Comma-separated policies to compare, or all (kvbudget, doubled-host, "
            "equal-split, target-geometry-draft, no-host).",
        ),
    ] = "all",
    acceptance: Annotated[
        str,
        typer.Option(
            metavar="RATE[,RATE..]",
            help="Draft acceptance: one rate per token (0.7) or per position (0.8,0.6,0.4).",
        ),
    ] = "0.7",
    rate_scale: Annotated[
        float,
        typer.Option(
            metavar="X",
            help="Divide arrival times by X (2: twice the request rate; 0.001 to 10^6).",
        ),
    ] = 1.0,
    limit: Annotated[
        int | None, typer.Option(metavar="N", help="Replay the first N requests only.")
    ] = None,
    prefix_groups: Annotated[
        int,
        typer.Option(metavar="N", help="Synthetic shared-prefix groups (traces without any)."),
    ] = 8,
    prefix_share: Annotated[
        float,
        typer.Option(metavar="SHARE", help="Share of requests given a synthetic prefix."),
    ] = 0.5,
    prefix_tokens: Annotated[
        int,
        typer.Option(
            metavar="TOKENS", help="Prefix length unit: group g is TOKENS x (1 + g mod 4)."
        ),
    ] = 256,
    seed: Annotated[
        int, typer.Option(metavar="N", help="Seed of prefixes and acceptance draws.")
    ] = 0,
    preempt: Annotated[
        str,
        typer.Option(
            metavar="MODE",
            help="Preemption: auto (swap with a host tier, else recompute), swap, recompute.",
        ),
    ] = "auto",
    peak_tflops: Annotated[
        float | None,
        typer.Option(
            metavar="TFLOPS", help="Dense BF16 peak of the GPU (default: data/gpu_flops.csv)."
        ),
    ] = None,
    sample_steps: Annotated[
        int, typer.Option(metavar="N", help="Steps between samples of the cache's counters.")
    ] = 64,
    jobs: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Replay the policies (and --dp replicas) in N processes (default: the CPU "
            "count, at most one per policy and replica).",
        ),
    ] = 0,
    step_by_step: Annotated[
        bool,
        typer.Option(
            "--step-by-step",
            help="Replay step by step through the engine's cache (the reference; the "
            "default's fast path and counted cache give the same metrics, faster).",
        ),
    ] = False,
    dp_router: Annotated[
        str,
        typer.Option(
            metavar="ROUTER",
            help="How requests reach the --dp replicas, each replayed with its own cache: "
            "round-robin, least-loaded (fewest tokens routed so far) or prefix (a "
            "prefix_group's requests to one replica).",
        ),
    ] = "round-robin",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the plan and per-policy metrics as JSON.")
    ] = False,
    plots: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="Write PNG plots into DIR (needs matplotlib)."),
    ] = None,
    html: Annotated[
        str | None,
        typer.Option(
            metavar="FILE", help="Write one self-contained HTML report (needs matplotlib)."
        ),
    ] = None,
) -> None:
    """The simulator's own options (a signature only; see :func:`run_simulate`)."""


def _checked_options(
    guard: Callable[[Callable[[], Any]], Any],
    *,
    policies: str,
    rate_scale: float,
    prefix_share: float,
    peak_tflops: float | None,
    dp_router: str,
    plots: str | None,
    html: str | None,
) -> tuple[str, ...]:
    """The policy names of ``--policies``, after every option checked before the replay
    (finite numbers, the rate scale, the router, distinct policies, writable outputs);
    a bad one is ``guard``'s ``error:`` line."""
    from kvbudget.cli import _raise
    from kvbudget.errors import InvalidArgumentError
    from kvbudget.sim.policies import POLICIES
    from kvbudget.sim.shards import require_router
    from kvbudget.sim.trace import require_rate_scale

    floats = (("--rate-scale", rate_scale), ("--prefix-share", prefix_share))
    for flag, value in (*floats, ("--peak-tflops", peak_tflops)):
        if value is not None and not math.isfinite(value):
            guard(_raise(InvalidArgumentError(f"{flag} must be a finite number, got {value}")))
    guard(lambda: require_rate_scale(rate_scale))
    guard(lambda: require_router(dp_router))
    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    if policies.strip() == "all":
        names = POLICIES
    if not names or len(set(names)) != len(names):
        guard(
            _raise(
                InvalidArgumentError(
                    f"--policies needs distinct policy names (or all), got {policies!r}; "
                    f"choose from {', '.join(POLICIES)}"
                )
            )
        )
    # output paths are checked before the replay, not after minutes of it
    if plots is not None:
        guard(lambda: _check_output("--plots", Path(plots), True))
    if html is not None:
        guard(lambda: _check_output("--html", Path(html), False))
    return names


def run_simulate(
    plan_kwargs: Mapping[str, Any],
    *,
    guard: Callable[[Callable[[], Any]], Any],
    trace: str | None,
    policies: str,
    acceptance: str,
    rate_scale: float,
    limit: int | None,
    prefix_groups: int,
    prefix_share: float,
    prefix_tokens: int,
    seed: int,
    preempt: str,
    peak_tflops: float | None,
    sample_steps: int,
    jobs: int,
    step_by_step: bool,
    dp_router: str,
    json_out: bool,
    plots: str | None,
    html: str | None,
) -> None:
    """Plan with ``plan_kwargs``, replay every policy, print and write the reports.

    ``guard(action)`` runs ``action`` and turns kvbudget and file errors into one
    ``error:`` line (the CLI's ``_run``).
    """
    from kvbudget.deployment import resolve_deployment
    from kvbudget.planner import build_plan
    from kvbudget.sim.acceptance import AcceptanceModel
    from kvbudget.sim.engine_cache import cache_plan
    from kvbudget.sim.policies import policy_plans
    from kvbudget.sim.simulation import engine_flags_for, simulate
    from kvbudget.sim.trace import (
        PrefixSynthesis,
        default_trace_path,
        read_trace,
        replayable_trace,
    )

    names = _checked_options(
        guard,
        policies=policies,
        rate_scale=rate_scale,
        prefix_share=prefix_share,
        peak_tflops=peak_tflops,
        dp_router=dp_router,
        plots=plots,
        html=html,
    )
    model = guard(lambda: AcceptanceModel.parse(acceptance))
    synth = guard(
        lambda: PrefixSynthesis(
            groups=prefix_groups, share=prefix_share, base_tokens=prefix_tokens, seed=seed
        )
    )
    deployment = guard(lambda: resolve_deployment(**plan_kwargs))
    base = guard(lambda: build_plan(deployment))
    dp = base.capacity.kv_groups  # --dp: one replay per data-parallel group
    # unknown policies and pools the cache cannot replay fail before any replay
    guard(lambda: policy_plans(cache_plan(base), names))
    source = trace if trace is not None else str(default_trace_path())
    flags = guard(lambda: engine_flags_for(deployment))
    with ExitStack() as stack:
        # a pipe (--trace -, a FIFO) is read once, into a file that the count and every
        # policy's replay read
        path = guard(lambda: stack.enter_context(replayable_trace(source)))
        total = guard(
            lambda: sum(1 for _ in read_trace(path, prefixes=synth, limit=limit, name=source))
        )

        def run(progress: Callable[[str, int], None] | None) -> Any:
            return guard(
                lambda: simulate(
                    base,
                    path,
                    policies=names,
                    acceptance=model,
                    rate_scale=rate_scale,
                    limit=limit,
                    prefixes=synth,
                    peak_tflops=peak_tflops,
                    max_num_batched_tokens=deployment.max_num_batched_tokens,
                    preempt=preempt,
                    seed=seed,
                    sample_steps=sample_steps,
                    progress=progress,
                    jobs=jobs or min(len(names) * dp, os.cpu_count() or 1),
                    dp=dp,
                    dp_router=dp_router,
                    engine_flags=flags,
                    trace_name=source,
                    fast_forward=not step_by_step,
                )
            )

        result = _with_progress(run, names, total)
    _report(result, guard=guard, json_out=json_out, plots=plots, html=html)


def _report(
    result: Any,
    *,
    guard: Callable[[Callable[[], Any]], Any],
    json_out: bool,
    plots: str | None,
    html: str | None,
) -> None:
    """Print the simulation ``result`` (JSON or the summary table) and write its plots
    and HTML report."""

    from rich.console import Console

    from kvbudget.sim.summary import print_summary

    if json_out:
        # strict JSON: a NaN or infinity would print as NaN/Infinity, which no parser takes
        typer.echo(guard(lambda: _strict_json(result.to_dict())))
    else:
        print_summary(result, Console())
    if plots is not None:
        from kvbudget.sim.plots import write_plots

        written = guard(lambda: write_plots(result, Path(plots)))
        if not json_out:
            for p in written:
                typer.echo(f"wrote {p}")
    if html is not None:
        from kvbudget.sim.report_html import write_html

        out = guard(lambda: write_html(result, Path(html)))
        if not json_out:
            typer.echo(f"wrote {out}")
    sys.stdout.flush()


def _strict_json(document: Any) -> str:
    """``document`` as indented JSON. Raises InvalidArgumentError when it holds a NaN or
    an infinity (JSON has neither; the inputs that make them are refused before)."""
    import json

    from kvbudget.errors import InvalidArgumentError

    try:
        return json.dumps(document, indent=2, allow_nan=False)
    except ValueError:
        raise InvalidArgumentError(
            "the simulation's JSON would hold a NaN or an infinity, which JSON cannot "
            "write; check --rate-scale, --peak-tflops and --acceptance"
        ) from None


def _with_progress(
    run: Callable[[Callable[[str, int], None] | None], Any], names: tuple[str, ...], total: int
) -> Any:
    """``run(progress)``, with a progress bar per policy (of ``total`` requests) on a
    terminal's stderr, else ``run(None)``."""
    bar = stderr_progress("[progress.description]{task.description}")
    if bar is None:
        return run(None)
    with bar:
        tasks = {n: bar.add_task(n, total=total) for n in names}

        def update(name: str, done: int) -> None:
            bar.update(tasks[name], completed=done)

        return run(update)


def stderr_progress(label: str) -> Progress | None:
    """A transient progress bar (``label``, bar, done of total, time) on stderr when it
    is a terminal (never on stdout, which --json owns), else None."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    stderr = Console(stderr=True)
    if not stderr.is_terminal:
        return None
    return Progress(
        label,
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def _check_output(flag: str, path: Path, is_dir: bool) -> None:
    """Raise InvalidArgumentError when ``path`` cannot be written (a directory for
    ``--plots``, a file for ``--html``)."""
    from kvbudget.errors import InvalidArgumentError

    parent = path if is_dir else path.parent
    if is_dir and path.exists() and not path.is_dir():
        raise InvalidArgumentError(f"{flag} {path}: exists and is not a directory")
    if not is_dir and path.is_dir():
        raise InvalidArgumentError(f"{flag} {path}: is a directory; give a file name")
    existing = parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise InvalidArgumentError(f"{flag} {path}: {existing} is not a writable directory")
