"""``kvbudget sweep``: search GPUs, layouts, KV dtypes, engines and batch sizes for the
best deployment (:func:`kvbudget.sweep`, :mod:`kvbudget.search`).

Axis flags take comma-separated lists, and integer ones ranges (``--gpu-count 1-8``,
``--tp 1,2,4``); the plan flags of the same names (``--gpu``, ``--engine``, ...) name
one value each in ``kvbudget plan``. Bad input is one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

SWEEP_HELP = (
    "Search deployments: every GPU preset x GPU count x valid TP/PP/DP/EP layout x KV "
    "dtype x engine x batch size (x draft) is planned, ranked and its Pareto front "
    "marked.\n\n"
    "--objective capacity: sequences of --max-seq-len held at once per GPU, exact (the "
    "engine models' Capacity). --objective traffic: the trace replayed through `kvbudget "
    "simulate` on each plan, output tokens/s per GPU among those meeting --slo-ttft / "
    "--slo-tpot (roofline step times: a lower bound, tokens/s an upper bound). "
    "--prices FILE.csv (gpu,price_per_gpu_hour; yours, none shipped) ranks per price.\n\n"
    "Every row carries the `kvbudget plan ...` command that reproduces it (--json). Runs on "
    "a process pool (--jobs) or as Ray tasks (--ray, --ray-address; pip install "
    "'kvbudget\\[ray]'): the rows are the same."  # \[: not rich markup
)

_Opt = typer.Option


def sweep_command(
    target: Annotated[str, _Opt(metavar="MODEL", help="Target model (as kvbudget plan).")] = (
        "meta-llama/Llama-3.1-8B-Instruct"
    ),
    draft: Annotated[
        str,
        _Opt(
            metavar="LIST",
            help="Draft candidates (default: the speculation mode's own); each is paired "
            "with every --spec that takes a draft.",
        ),
    ] = "default",
    spec: Annotated[str, _Opt(metavar="LIST", help="Speculation modes (auto, none, ...).")] = (
        "auto"
    ),
    gpu: Annotated[str, _Opt(metavar="LIST", help="GPU presets (`kvbudget gpus`).")] = "H200",
    gpu_count: Annotated[
        str, _Opt(metavar="LIST", help="GPU counts of a deployment: 1,2,4,8 or 1-8.")
    ] = "1",
    tp: Annotated[str, _Opt(metavar="LIST", help="TP sizes (default: any divisor).")] = "any",
    pp: Annotated[str, _Opt(metavar="LIST", help="PP sizes.")] = "1",
    dp: Annotated[str, _Opt(metavar="LIST", help="DP sizes (default: any divisor).")] = "any",
    ep: Annotated[str, _Opt(metavar="LIST", help="Expert-parallel sizes.")] = "1",
    dp_attention: Annotated[
        str,
        _Opt(
            metavar="LIST",
            help="Data-parallel attention: off, on or off,on (--dp groups inside --tp; "
            "MoE targets only).",
        ),
    ] = "off",
    kv_dtype: Annotated[str, _Opt(metavar="LIST", help="KV dtypes (auto, fp8, ...).")] = "auto",
    engine: Annotated[
        str,
        _Opt(metavar="LIST", help="Engines, NAME or NAME@VERSION (`kvbudget engines`), or all."),
    ] = "kvbudget",
    max_batch_size: Annotated[str, _Opt(metavar="LIST", help="Max batch sizes.")] = "256",
    max_seq_len: Annotated[
        int | None, _Opt(metavar="TOKENS", help="Sequence length (default: the target's).")
    ] = None,
    max_draft_len: Annotated[int, _Opt(metavar="K", help="Draft tokens per step.")] = 3,
    host_budget: Annotated[str, _Opt(metavar="BYTES", help="Host KV budget per rank.")] = "0",
    tokens_per_block: Annotated[int, _Opt(metavar="N", help="Tokens per KV block.")] = 32,
    gpus_per_node: Annotated[
        int | None, _Opt(metavar="N", help="Ranks per node (default: all ranks, at most 8).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int, _Opt(metavar="N", help="Tokens per scheduler step.")
    ] = 8192,
    objective: Annotated[str, _Opt(metavar="OBJ", help="capacity or traffic.")] = "capacity",
    trace: Annotated[
        str | None, _Opt(metavar="PATH", help="Trace (traffic; default: the shipped Azure one).")
    ] = None,
    limit: Annotated[int, _Opt(metavar="N", help="Requests replayed per configuration.")] = 2000,
    rate_scale: Annotated[float, _Opt(metavar="X", help="Divide arrival times by X.")] = 1.0,
    acceptance: Annotated[str, _Opt(metavar="RATE[,RATE..]", help="Draft acceptance.")] = "0.7",
    seed: Annotated[int, _Opt(metavar="N", help="Seed of prefixes and acceptance.")] = 0,
    policy: Annotated[
        str, _Opt(metavar="NAME", help="Simulator policy each row is replayed with.")
    ] = "kvbudget",
    dp_router: Annotated[
        str,
        _Opt(
            metavar="ROUTER",
            help="How requests reach a row's --dp replicas (each replayed with its own "
            "cache): round-robin, least-loaded or prefix.",
        ),
    ] = "round-robin",
    slo_ttft: Annotated[float | None, _Opt(metavar="S", help="TTFT limit, seconds.")] = None,
    slo_tpot: Annotated[float | None, _Opt(metavar="S", help="TPOT limit, seconds.")] = None,
    slo_percentile: Annotated[str, _Opt(metavar="P", help="p50, p90 or p99.")] = "p99",
    prices: Annotated[
        str | None, _Opt(metavar="FILE", help="CSV gpu,price_per_gpu_hour (your prices).")
    ] = None,
    jobs: Annotated[int, _Opt(metavar="N", help="Worker processes (default: the CPU count).")] = 0,
    ray: Annotated[bool, _Opt("--ray", help="Run the tasks on Ray (a local one).")] = False,
    ray_address: Annotated[
        str | None, _Opt(metavar="ADDR", help="Join the Ray cluster at ADDR (implies --ray).")
    ] = None,
    top: Annotated[int, _Opt(metavar="N", help="Rows shown in the table.")] = 20,
    json_out: Annotated[bool, _Opt("--json", help="Print every row as JSON.")] = False,
    html: Annotated[
        str | None, _Opt(metavar="FILE", help="Write an HTML report (needs matplotlib).")
    ] = None,
) -> None:
    from kvbudget.cli import _raise, _run
    from kvbudget.errors import InvalidArgumentError
    from kvbudget.search import Slo, SweepSpace, TrafficSettings, sweep
    from kvbudget.sim.trace import replayable_trace

    if top < 0:  # checked before the sweep runs, not after it
        _run(_raise(InvalidArgumentError(f"--top must be an integer >= 0, got {top}")))
    space = _run(
        lambda: SweepSpace(
            target=target,
            drafts=tuple(None if d == "default" else d for d in _strings("--draft", draft)),
            specs=_strings("--spec", spec),
            gpus=_strings("--gpu", gpu),
            gpu_counts=_ints("--gpu-count", gpu_count),
            tp=None if tp == "any" else _ints("--tp", tp),
            pp=_ints("--pp", pp),
            dp=None if dp == "any" else _ints("--dp", dp),
            ep=_ints("--ep", ep),
            dp_attention=_switches("--dp-attention", dp_attention),
            kv_dtypes=_strings("--kv-dtype", kv_dtype),
            engines=_engines(engine),
            max_batch_sizes=_ints("--max-batch-size", max_batch_size),
            max_seq_len=max_seq_len,
            max_draft_len=max_draft_len,
            host_budget=host_budget,
            tokens_per_block=tokens_per_block,
            gpus_per_node=gpus_per_node,
            max_num_batched_tokens=max_num_batched_tokens,
        )
    )
    if html is not None:
        from kvbudget.commands.simulate import _check_output

        _run(lambda: _check_output("--html", Path(html), False))
    workers = jobs or (os.cpu_count() or 1)
    with contextlib.ExitStack() as stack:
        read_path = None
        if trace is not None and objective == "traffic":
            # a trace from a pipe is read once, into a copy every task and --html read
            copy = _run(lambda: stack.enter_context(replayable_trace(trace)))
            read_path = str(copy)
        traffic = TrafficSettings(
            trace=trace,
            read_path=read_path,
            limit=limit,
            rate_scale=rate_scale,
            acceptance=acceptance,
            seed=seed,
            policies=(policy,),
            dp_router=dp_router,
        )

        def go(progress: Callable[[int], None] | None) -> Any:
            return sweep(
                space,
                objective=objective,  # type: ignore[arg-type]
                traffic=traffic,
                slo=Slo(percentile=slo_percentile, ttft_s=slo_ttft, tpot_s=slo_tpot),
                prices=prices,
                jobs=workers,
                ray=ray,
                ray_address=ray_address,
                progress=progress,
            )

        result = _run(lambda: _with_progress(go))
        _report(result, json_out=json_out, html=html, top=top, guard=_run)


sweep_command.__doc__ = SWEEP_HELP


def _report(
    result: Any, *, json_out: bool, html: str | None, top: int, guard: Callable[..., Any]
) -> None:
    """Print the table or the JSON, write the HTML report."""
    if json_out:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        from rich.console import Console

        from kvbudget.search.render import print_sweep

        print_sweep(result, Console(), top=top)
    if html is not None:
        from kvbudget.search.html import write_html

        out = guard(lambda: write_html(result, Path(html)))
        if not json_out:
            typer.echo(f"wrote {out}")
    sys.stdout.flush()


def _with_progress(go: Callable[[Callable[[int], None] | None], Any]) -> Any:
    """``go(progress)`` with a progress bar on a terminal's stderr (never on stdout,
    which --json owns), else ``go(None)``."""
    from kvbudget.commands.simulate import stderr_progress

    bar = stderr_progress("configurations")
    if bar is None:
        return go(None)
    with bar:
        task = bar.add_task("sweep", total=None)

        def update(done: int) -> None:
            bar.update(task, completed=done)

        return go(update)


def _strings(flag: str, text: str) -> tuple[str, ...]:
    """A comma-separated list, each item stripped; raises InvalidArgumentError when empty."""
    from kvbudget.errors import InvalidArgumentError

    items = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not items:
        raise InvalidArgumentError(f"{flag} needs at least one value, got {text!r}")
    return items


def _ints(flag: str, text: str) -> tuple[int, ...]:
    """``1,2,4`` or ``1-8`` (inclusive) or both; raises InvalidArgumentError."""
    from kvbudget.errors import InvalidArgumentError

    out: list[int] = []
    for item in _strings(flag, text):
        low, sep, high = item.partition("-")
        try:
            first, last = (int(low), int(high)) if sep else (int(item), int(item))
        except ValueError:
            raise InvalidArgumentError(
                f"{flag} takes integers and ranges (1,2,4 or 1-8), got {item!r}"
            ) from None
        if first < 1 or last < first:
            raise InvalidArgumentError(f"{flag}: {item!r} is not a range of integers >= 1")
        out += range(first, last + 1)
    return tuple(dict.fromkeys(out))


def _switches(flag: str, text: str) -> tuple[bool, ...]:
    """``off``, ``on`` or both, as a list; raises InvalidArgumentError."""
    from kvbudget.errors import InvalidArgumentError

    values = {"off": False, "on": True}
    items = _strings(flag, text)
    unknown = [i for i in items if i not in values]
    if unknown:
        raise InvalidArgumentError(f"{flag} takes off, on or off,on, got {text!r}")
    return tuple(values[i] for i in items)


def _engines(text: str) -> tuple[str, ...]:
    """``all``: every engine model; else the listed ones."""
    if text.strip() == "all":
        from kvbudget.engines import ENGINE_MODELS

        return tuple(m.id for m in ENGINE_MODELS)
    return _strings("--engine", text)


__all__ = ["SWEEP_HELP", "sweep_command"]
