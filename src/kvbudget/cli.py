"""Command line: ``kvbudget plan`` (default), ``simulate``, ``sweep``, ``models``, ``engines``,
``gpus``, ``run``.

User mistakes print one ``error:`` line on stderr and exit with status 2; they never
print a traceback.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from kvbudget.commands.run import run_command
from kvbudget.commands.simulate import SIMULATE_HELP, run_simulate, simulate_options
from kvbudget.commands.sweep import sweep_command
from kvbudget.commands.terminal import printable
from kvbudget.deployment import DEFAULT_MAX_NUM_BATCHED_TOKENS
from kvbudget.engines import ENGINE_MODELS, EngineModel, emit, get_engine_model
from kvbudget.errors import EngineRefusedError, InvalidArgumentError, KvBudgetError
from kvbudget.gpus import get_gpu, list_gpus
from kvbudget.model import list_presets, load_model
from kvbudget.planner import (
    DEFAULT_GPU,
    DEFAULT_HOST_BUDGET,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TARGET,
    EAGLE3_DRAFTS,
    SPEC_MODES,
    plan,
)
from kvbudget.report import print_plan
from kvbudget.units import format_bytes


class _OneLineErrors(TyperGroup):
    """Print command-line parse errors (bad flag, bad number) as one ``error:`` line."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        except typer.TyperException as exc:  # click's ClickException, vendored by typer
            format_message = getattr(exc, "format_message", None)
            text = format_message() if callable(format_message) else str(exc)
            code = getattr(exc, "exit_code", 2)
            hint = " (see --help)" if code == 2 else ""
            typer.echo(f"error: {printable(text)}{hint}", err=True)
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="KV-cache budgets for speculative decoding: plan target + draft caches per rank.",
)

T = TypeVar("T")


def _run(action: Callable[[], T]) -> T:
    """Run ``action``; turn kvbudget and file errors into one line and exit status 2
    (control characters in it, e.g. from a path, shown escaped)."""
    try:
        return action()
    except KvBudgetError as exc:
        for warning in _refused_plan_warnings(exc):
            typer.echo(f"warning: {printable(warning)}", err=True)
        typer.echo(f"error: {printable(_as_flags(str(exc)))}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        line = f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
        typer.echo(f"error: {printable(line)}", err=True)
        raise typer.Exit(2) from None


def _refused_plan_warnings(exc: KvBudgetError) -> tuple[str, ...]:
    """The warnings of the deployment an engine refused (``EngineRefusedError.warnings``),
    printed before the refusal."""
    return exc.warnings if isinstance(exc, EngineRefusedError) else ()


def _as_flags(message: str) -> str:
    """A library message with its parameter names (``memory_fraction must be ...``) as
    the flags a CLI user types (``--memory-fraction must be ...``)."""
    import inspect
    import re

    from kvbudget.planner import plan

    params = list(inspect.signature(plan).parameters)
    long = "|".join(n for n in params if "_" in n)
    # short names (tp, dp, ...) also appear as "tp=8" in prose: only "<name> must"
    short = "|".join(n for n in params if "_" not in n)
    pattern = re.compile(rf"(?<![\w\-.'])(?:({long})(?=[ =:])|({short})(?= must))")
    return pattern.sub(lambda m: "--" + (m.group(1) or m.group(2)).replace("_", "-"), message)


def _raise(exc: Exception) -> Callable[[], None]:
    def action() -> None:
        raise exc

    return action


@app.command("plan")
def plan_command(
    target: Annotated[
        str,
        typer.Option(
            metavar="MODEL",
            help="Target model: preset id (`kvbudget models`), Hugging Face id "
            "(org/name[@revision]: config and safetensors headers, cached) or config path.",
        ),
    ] = (DEFAULT_TARGET),
    draft: Annotated[
        str | None,
        typer.Option(
            metavar="MODEL",
            help="Draft: EAGLE3 head (eagle3; default: the target's preset head) or small model "
            "(draft-target); an id or path as --target takes.",
        ),
    ] = None,
    from_hub: Annotated[
        bool,
        typer.Option(
            "--from-hub",
            help="Read --target and --draft from the Hugging Face Hub even when they are "
            "presets (HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE apply).",
        ),
    ] = False,
    spec: Annotated[
        str,
        typer.Option(
            metavar="MODE",
            help=f"Speculation: auto (an EAGLE3 head preset, else MTP layers, else none), "
            f"{', '.join(SPEC_MODES)}.",
        ),
    ] = "auto",
    kv_budget: Annotated[
        str | None,
        typer.Option(
            metavar="BYTES",
            help="GPU KV budget per rank (e.g. 40GiB), taken as is instead of deriving it "
            "from --gpu memory, weights and the non-KV memory estimate.",
        ),
    ] = None,
    host_budget: Annotated[
        str,
        typer.Option(metavar="BYTES", help="Host (pinned CPU) KV budget per rank (0: no offload)."),
    ] = str(DEFAULT_HOST_BUDGET),
    disk_budget: Annotated[
        str, typer.Option(metavar="BYTES", help="Disk KV budget per rank.")
    ] = "0",
    gpu: Annotated[
        str, typer.Option(metavar="NAME", help="GPU preset (`kvbudget gpus`).")
    ] = DEFAULT_GPU,
    gpu_memory: Annotated[
        str | None, typer.Option(metavar="BYTES", help="GPU memory per device; overrides --gpu.")
    ] = None,
    memory_fraction: Annotated[
        str | None,
        typer.Option(
            metavar="FRACTION",
            help="Share of the memory free after weights and non-KV memory that goes to KV "
            "(TensorRT-LLM free_gpu_memory_fraction semantics; the default, 0.9).",
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        str | None,
        typer.Option(
            metavar="FRACTION",
            help="vLLM's knob: share of total GPU memory for everything; KV gets what "
            "weights and non-KV memory leave of it.",
        ),
    ] = None,
    mem_fraction_static: Annotated[
        str | None,
        typer.Option(
            metavar="FRACTION",
            help="SGLang's knob: share of the memory free before loading that holds weights "
            "and KV pools.",
        ),
    ] = None,
    reserve: Annotated[
        str | None,
        typer.Option(metavar="BYTES", help="All non-KV memory per rank, instead of the estimate."),
    ] = None,
    activation_bytes: Annotated[
        str | None,
        typer.Option(
            metavar="BYTES",
            help="Peak activations of a forward pass (default: estimated from the model "
            "and --max-num-batched-tokens).",
        ),
    ] = None,
    cuda_graph_bytes: Annotated[
        str | None,
        typer.Option(metavar="BYTES", help="CUDA graph pool (default: estimated; 0: eager)."),
    ] = None,
    runtime_bytes: Annotated[
        str | None,
        typer.Option(
            metavar="BYTES", help="Memory outside PyTorch: NCCL, workspaces (default: estimated)."
        ),
    ] = None,
    weights_bytes: Annotated[
        str | None,
        typer.Option(metavar="BYTES", help="Weight bytes per rank; overrides the estimate."),
    ] = None,
    pre_load_bytes: Annotated[
        str | None,
        typer.Option(
            metavar="BYTES",
            help="GPU memory in use before the weights load (CUDA context, NCCL), which "
            "SGLang's computed --mem-fraction-static allows for (default: 2.5GiB).",
        ),
    ] = None,
    kv_dtype: Annotated[
        str,
        typer.Option(
            metavar="DTYPE",
            help="KV dtype: auto (the config's), fp32, bf16, fp16, fp8, int8, nvfp4.",
        ),
    ] = "auto",
    state_dtype: Annotated[
        str, typer.Option(metavar="DTYPE", help="Recurrent (Mamba, delta-net) state dtype.")
    ] = "auto",
    tokens_per_block: Annotated[int, typer.Option(metavar="N", help="Tokens per KV block.")] = 32,
    max_batch_size: Annotated[
        int,
        typer.Option(
            metavar="N", help="Max concurrent sequences (sizes window pools and state slots)."
        ),
    ] = DEFAULT_MAX_BATCH_SIZE,
    cached_states: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help=(
                "Recurrent states kept at block boundaries for prefix reuse (kvbudget's "
                "cache; default: --max-batch-size with prefix caching, 0 turns it off)."
            ),
        ),
    ] = None,
    max_seq_len: Annotated[
        int | None,
        typer.Option(
            metavar="TOKENS", help="Max sequence length (default: the target's context length)."
        ),
    ] = None,
    max_draft_len: Annotated[
        int,
        typer.Option(
            metavar="K", help="Draft tokens per step; each sequence reserves K lookahead slots."
        ),
    ] = 3,
    tp: Annotated[int, typer.Option(metavar="N", help="Tensor parallel size.")] = 1,
    pp: Annotated[int, typer.Option(metavar="N", help="Pipeline parallel size.")] = 1,
    draft_tp: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Draft tensor parallel size, dividing --tp (vLLM draft_tensor_parallel_size; "
            "default --tp). The draft's ranks and the others are planned apart.",
        ),
    ] = None,
    dp: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Data-parallel groups, each holding its own sequences: replicas of tp x pp "
            "ranks, or with --dp-attention the attention groups inside --tp.",
        ),
    ] = 1,
    dp_attention: Annotated[
        bool,
        typer.Option(
            "--dp-attention",
            help="DeepSeek-style data-parallel attention: --dp groups of --tp/--dp ranks "
            "each keep only their own sequences' KV (SGLang --enable-dp-attention).",
        ),
    ] = False,
    ep: Annotated[
        int,
        typer.Option(metavar="N", help="Expert parallel size: routed experts whole, 1/N each."),
    ] = 1,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(metavar="N", help="Ranks per node (default: all ranks, at most 8)."),
    ] = None,
    host_memory: Annotated[
        str | None,
        typer.Option(metavar="BYTES", help="Host memory per node; warns when the ranks pin more."),
    ] = None,
    separate_draft_cache: Annotated[
        bool,
        typer.Option(
            "--separate-draft-cache", help="mtp only: give the MTP layers their own cache manager."
        ),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            metavar="ENGINE",
            help="Whose cache to plan: kvbudget (default: the project's own cache), vllm, "
            "sglang or trtllm (what that engine will really allocate), or NAME@VERSION "
            "(`kvbudget engines` lists them); simulate replays that engine's pools.",
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Tokens per scheduler step (the prefill chunk): vLLM charges each "
            "sliding-window group the tokens in flight; emitted for every engine.",
        ),
    ] = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    async_scheduling: Annotated[
        bool,
        typer.Option(
            "--async-scheduling/--no-async-scheduling",
            help="vLLM: two scheduler steps in flight (its default).",
        ),
    ] = True,
    prefix_caching: Annotated[
        bool,
        typer.Option("--prefix-caching/--no-prefix-caching", help="Block reuse across requests."),
    ] = True,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the plan as JSON (schema 3); the engine's pools, capacity and "
            'settings are in its "engine" object.',
        ),
    ] = False,
    emit_engine: Annotated[
        str | None,
        typer.Option(
            "--emit",
            metavar="ENGINE",
            help="Print the settings that make the engine allocate the plan (implies --engine): "
            "vllm, sglang, trtllm or NAME@VERSION.",
        ),
    ] = None,
) -> None:
    """Plan the KV caches of target + draft per rank across GPU, host and disk.

    Sizes take units (40GiB, 64GB, 512MiB, 4096B); a number without one is bytes only
    when 0 or at least 1 MiB. Every budget is per rank.
    """
    options = dict(locals())
    chosen = _run(lambda: _chosen_engine(engine, emit_engine))
    result = _run(lambda: plan(**_plan_kwargs(options, chosen.id)))
    if json_out:  # with --emit too: the JSON's "engine" object holds the settings
        typer.echo(result.to_json())
    elif emit_engine is not None:
        text = _run(lambda: emit(result))
        for warning in result.warnings:  # the emitted text goes to a file; warnings do not
            typer.echo(f"warning: {warning}", err=True)
        typer.echo(text, nl=False)
    else:
        print_plan(result, Console())


def _chosen_engine(engine: str | None, emit_engine: str | None) -> EngineModel:
    """The engine model ``--engine`` and ``--emit`` name (kvbudget's own by default)."""
    if emit_engine is None:
        return get_engine_model(engine or "kvbudget")
    emitted = get_engine_model(emit_engine)
    if engine is not None and (named := get_engine_model(engine)) is not emitted:
        raise InvalidArgumentError(
            f"--emit {emit_engine} plans for {emitted.id} but --engine {engine} is "
            f"{named.id}; drop --engine {engine}, or name one engine in both"
            + (f" (--emit {named.id})" if named.render is not None else "")
        )
    if emitted.render is None:
        raise InvalidArgumentError(
            f"{emitted.summary} has no settings to emit; --emit one of "
            f"{', '.join(m.id for m in ENGINE_MODELS if m.render is not None)}"
        )
    return emitted


# plan_command's options that shape its output, not the plan
_PLAN_OUTPUT_OPTIONS = ("json_out", "emit_engine", "engine")


def _plan_kwargs(options: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """The :func:`kvbudget.plan` keyword arguments of ``plan_command``'s options."""
    kwargs = {k: v for k, v in options.items() if k not in _PLAN_OUTPUT_OPTIONS}
    kwargs["enable_prefix_caching"] = kwargs.pop("prefix_caching")
    kwargs["engine"] = engine
    return kwargs


def _simulate_command() -> Callable[..., None]:
    """``kvbudget simulate``: ``plan_command``'s plan options (shared declarations: a
    default or help text changed there changes here) followed by
    :func:`kvbudget.commands.simulate.simulate_options`."""
    plan_params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for name, p in inspect.signature(plan_command, eval_str=True).parameters.items()
        if name not in _PLAN_OUTPUT_OPTIONS or name == "engine"
    ]
    sim_params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(simulate_options, eval_str=True).parameters.values()
    ]
    plan_names = frozenset(p.name for p in plan_params)

    def command(**options: Any) -> None:
        plan_options = {k: v for k, v in options.items() if k in plan_names}
        sim = {k: v for k, v in options.items() if k not in plan_names}
        engine = _run(lambda: get_engine_model(plan_options.get("engine") or "kvbudget"))
        run_simulate(_plan_kwargs(plan_options, engine.id), guard=_run, **sim)

    params = plan_params + sim_params
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = SIMULATE_HELP
    return command


app.command("simulate")(_simulate_command())
app.command("sweep")(sweep_command)


@app.command("models")
def models_command(
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the presets as JSON (a list, one object each)."),
    ] = False,
) -> None:
    """List the built-in model presets, their cache layers and default speculation.

    Any other Hugging Face model id also plans: --target org/name[@revision] reads its
    config.json and safetensors headers from the Hub (cached; HF_HUB_OFFLINE=1 plans
    from the cache).
    """
    rows = []
    for name in list_presets():
        spec = _run(lambda n=name: load_model(n))  # type: ignore[misc]
        if spec.is_head:
            default, draft = None, None
        elif name in EAGLE3_DRAFTS:
            default, draft = "eagle3", EAGLE3_DRAFTS[name]
        elif spec.mtp_layers:  # DeepSeek-V4.1's are DSpark stages
            default = "dspark" if spec.model_type == "deepseek_v41" else "mtp"
            draft = None
        else:
            default, draft = "none", None
        rows.append(
            {
                "preset": name,
                "model_type": spec.model_type,
                "layers": spec.describe().split(": ", 1)[1],
                "eagle3_head": spec.is_eagle3,
                "draft_head": "eagle3" if spec.is_eagle3 else "eagle" if spec.is_head else None,
                "default_spec": default,
                "default_draft": draft,
            }
        )
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table()
    for col in ("preset", "layers", "spec auto"):
        table.add_column(col, overflow="fold")  # wrap ids, never cut them
    for row in rows:
        head = "EAGLE3" if row["eagle3_head"] else "EAGLE"
        auto = str(row["default_spec"] or f"({head} head: a --draft)")
        if row["default_draft"]:
            auto = f"{auto}: {row['default_draft']}"
        table.add_row(str(row["preset"]), str(row["layers"]), auto)
    Console().print(table)
    typer.echo(_ANY_HUB_ID)


_ANY_HUB_ID = (
    "Any Hugging Face id also works: --target org/name[@revision] reads its config.json "
    "and safetensors headers from the Hub (cached; HF_HUB_OFFLINE=1 plans from the cache)."
)


@app.command("engines")
def engines_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print the engines as JSON.")] = False,
) -> None:
    """List the engine models: name, version, whether --engine NAME picks it, source."""
    rows = [
        {
            "engine": m.id,
            "name": m.name,
            "version": m.version,
            "default": m.default,
            "emits": m.render is not None,
            "summary": m.summary,
            "repository": m.source.repository,
            "ref": m.source.ref,
            "files": list(m.source.files),
        }
        for m in ENGINE_MODELS
    ]
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table()
    for col in ("--engine", "default for", "repository", "release or commit"):
        table.add_column(col, overflow="fold")
    for m in ENGINE_MODELS:
        table.add_row(m.id, m.name if m.default else "", m.source.repository, m.source.ref)
    Console().print(table)
    typer.echo("--engine NAME picks the default version; --json lists the files each model follows")


@app.command("gpus")
def gpus_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print the presets as JSON.")] = False,
) -> None:
    """List the GPU presets and the bytes each offers."""
    gpus = [get_gpu(short) for short in list_gpus()]
    if json_out:
        typer.echo(
            json.dumps(
                [
                    {
                        "preset": short,
                        "name": g.name,
                        "memory_bytes": g.memory_bytes,
                        "memory_source": g.memory_source,
                    }
                    for short, g in zip(list_gpus(), gpus, strict=True)
                ],
                indent=2,
            )
        )
        return
    table = Table()
    for col in ("preset", "GPU", "bytes", "source"):
        table.add_column(col, overflow="fold", justify="right" if col == "bytes" else "left")
    for short, g in zip(list_gpus(), gpus, strict=True):
        table.add_row(short, g.name, format_bytes(g.memory_bytes), g.memory_source)
    Console().print(table)


app.command("run")(run_command)


def main() -> None:
    """Entry point of the ``kvbudget`` script.

    ``plan`` is the default command: ``kvbudget`` and ``kvbudget --tp 2 ...`` mean
    ``kvbudget plan ...`` (``kvbudget --help`` still lists the commands).
    """
    args = sys.argv[1:]
    if not args or (args[0].startswith("-") and args[0] not in ("--help", "-h")):
        sys.argv.insert(1, "plan")
    app()
