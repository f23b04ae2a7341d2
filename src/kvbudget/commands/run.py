"""``kvbudget run``: the reference speculative-decoding engine on tiny models, offline.

Without ``--target`` it writes tiny demo checkpoints to a temporary directory
(:mod:`kvbudget.engine.demo`: a 4-layer target, a noisy-copy draft, an EAGLE3 head) and
runs on them; with ``--target`` (and ``--draft``) it loads local checkpoint directories
or configs (random weights). It plans the cache with :func:`kvbudget.plan`, generates
for ``--requests`` prompts (random tokens from ``--seed``, the first ``--shared-prefix``
of them common to all) with a progress bar on stderr, then prints a table of what the
engine did and the cache's bytes per role and tier, or ``--json``.

torch and the engine are imported inside the command: the CLI starts without them, and a
missing torch is one error line saying to install the torch extra.
"""

from __future__ import annotations

import json
import random
import tempfile
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from kvbudget.errors import InvalidArgumentError


def _require_torch() -> None:
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        raise InvalidArgumentError(
            "kvbudget run needs torch and safetensors: install the torch extra "
            "(pip install 'kvbudget[torch]'; for the CPU build first pip install torch==2.13.0)"
        ) from None


def _prompts(num: int, length: int, shared: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(vocab) for _ in range(min(shared, length))]
    return [
        prefix + [rng.randrange(vocab) for _ in range(length - len(prefix))] for _ in range(num)
    ]


def run_command(
    target: Annotated[
        str | None,
        typer.Option(
            metavar="DIR",
            help="Target checkpoint directory or config.json (default: tiny demo models "
            "written to a temporary directory).",
        ),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="Draft model or EAGLE3 head (with --target)."),
    ] = None,
    spec: Annotated[
        str, typer.Option(metavar="MODE", help="Speculation: none, draft-target or eagle3.")
    ] = "draft-target",
    requests: Annotated[int, typer.Option(min=1, help="Number of prompts.")] = 16,
    prompt_len: Annotated[int, typer.Option(min=1, help="Tokens per prompt.")] = 24,
    shared_prefix: Annotated[
        int, typer.Option(min=0, help="Leading prompt tokens common to every prompt.")
    ] = 12,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens to generate each.")] = 32,
    temperature: Annotated[
        float,
        typer.Option(min=0.0, help="Below 1e-5 (0 too): greedy; else rejection sampling."),
    ] = 0.0,
    kv_budget: Annotated[
        str, typer.Option(metavar="BYTES", help="GPU (device) KV budget.")
    ] = "256KiB",
    host_budget: Annotated[
        str, typer.Option(metavar="BYTES", help="Host tier budget (offload, swap).")
    ] = "256KiB",
    tokens_per_block: Annotated[int, typer.Option(min=1, help="Tokens per block.")] = 4,
    max_batch_size: Annotated[int, typer.Option(min=1, help="Most running requests.")] = 8,
    max_seq_len: Annotated[int, typer.Option(min=2, help="Longest sequence.")] = 128,
    max_draft_len: Annotated[int, typer.Option(min=1, help="Draft tokens per step.")] = 3,
    draft_noise: Annotated[
        float,
        typer.Option(min=0.0, help="Demo draft: relative noise on the target's weights."),
    ] = 0.02,
    preempt: Annotated[
        str, typer.Option(metavar="MODE", help="Preemption: swap or recompute.")
    ] = "swap",
    device: Annotated[str, typer.Option(help="Torch device: cpu or cuda.")] = "cpu",
    seed: Annotated[int, typer.Option(help="Seed of weights, prompts and sampling.")] = 0,
    threads: Annotated[
        int,
        typer.Option(
            min=1, help="CPU threads for torch (1 suits tiny models and shared machines)."
        ),
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Generate with the reference speculative-decoding engine on tiny models (offline)."""
    from kvbudget.cli import _run

    settings = RunSettings(
        target=target,
        draft=draft,
        spec=spec,
        requests=requests,
        prompt_len=prompt_len,
        shared_prefix=shared_prefix,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        kv_budget=kv_budget,
        host_budget=host_budget,
        tokens_per_block=tokens_per_block,
        max_batch_size=max_batch_size,
        max_seq_len=max_seq_len,
        max_draft_len=max_draft_len,
        draft_noise=draft_noise,
        preempt=preempt,
        device=device,
        seed=seed,
        threads=threads,
    )
    _run(settings.check)
    with tempfile.TemporaryDirectory(prefix="kvbudget-run-") as tmp:
        result = _run(lambda: _generate(tmp, settings, progress=not as_json))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        _print(result)


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The options of one ``kvbudget run``."""

    target: str | None
    draft: str | None
    spec: str
    requests: int
    prompt_len: int
    shared_prefix: int
    max_new_tokens: int
    temperature: float
    kv_budget: str
    host_budget: str
    tokens_per_block: int
    max_batch_size: int
    max_seq_len: int
    max_draft_len: int
    draft_noise: float
    preempt: str
    device: str
    seed: int
    threads: int = 1

    def check(self) -> None:
        """Raise InvalidArgumentError for an inconsistent combination, a bad size, or no
        torch."""
        from kvbudget.units import parse_bytes

        parse_bytes(self.kv_budget, name="kv_budget")  # before any model is written
        parse_bytes(self.host_budget, name="host_budget")
        _require_torch()  # before anything of kvbudget.engine is imported
        from kvbudget.engine.config import SPECS

        if self.spec not in SPECS:
            raise InvalidArgumentError(
                f"--spec must be one of {', '.join(SPECS)}, got {self.spec!r}"
            )
        if self.preempt not in ("swap", "recompute"):
            raise InvalidArgumentError(f"--preempt must be swap or recompute, got {self.preempt!r}")
        if self.target is None and self.draft is not None:
            raise InvalidArgumentError("--draft needs --target (the demo builds both)")
        if self.target is not None and (self.draft is None) != (self.spec == "none"):
            want = "no --draft" if self.spec == "none" else "--draft"
            raise InvalidArgumentError(f"--spec {self.spec} with --target needs {want}")
        if self.prompt_len > self.max_seq_len:
            raise InvalidArgumentError(
                f"--prompt-len {self.prompt_len} exceeds --max-seq-len {self.max_seq_len}"
            )
        import torch

        kind = self.device.split(":", 1)[0]
        if kind not in ("cpu", "cuda"):
            raise InvalidArgumentError(f"--device must be cpu or cuda, got {self.device!r}")
        if kind == "cuda" and not torch.cuda.is_available():
            raise InvalidArgumentError(
                f"--device {self.device}: torch sees no CUDA device (a CPU build of torch, or "
                "no GPU); use --device cpu"
            )


def _generate(tmp: str, s: RunSettings, *, progress: bool) -> dict[str, Any]:
    """Build the models and plan, generate, and return the results as plain data."""
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    import kvbudget
    from kvbudget.engine import Engine, SamplingParams, write_demo_models
    from kvbudget.engine.config import read_decoder_config

    torch.set_num_threads(s.threads)  # this process is the command's own
    target, draft = s.target, s.draft
    if target is None:
        demo = write_demo_models(tmp, seed=s.seed, draft_noise=s.draft_noise)
        target = demo.target
        draft = {"draft-target": demo.draft, "eagle3": demo.eagle3, "none": None}[s.spec]
    plan = kvbudget.plan(
        target=target,
        draft=draft,
        spec=s.spec,
        kv_budget=s.kv_budget,
        host_budget=s.host_budget,
        tokens_per_block=s.tokens_per_block,
        max_batch_size=s.max_batch_size,
        max_seq_len=s.max_seq_len,
        max_draft_len=s.max_draft_len,
    )
    engine = Engine(
        plan,
        target=target,
        draft=draft,
        device=s.device,
        seed=s.seed,
        preempt_mode="swap" if s.preempt == "swap" else "recompute",
    )
    vocab = read_decoder_config(target).vocab_size
    prompts = _prompts(s.requests, s.prompt_len, s.shared_prefix, vocab, s.seed)
    params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
    if progress:
        bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        with bar:
            task = bar.add_task("generating", total=s.requests * s.max_new_tokens)
            outs = engine.generate(prompts, params, on_step=lambda n: bar.advance(task, n))
    else:
        outs = engine.generate(prompts, params)
    stats = engine.stats()
    return {
        "target": plan.target_source,
        "draft": plan.draft_source,
        "spec": plan.spec,
        "device": s.device,
        "threads": s.threads,
        "capacity": {
            "gpu_blocks": plan.capacity.gpu_blocks,
            "host_blocks": plan.capacity.host_blocks,
            "tokens_per_block": plan.tokens_per_block,
            "max_concurrency": plan.capacity.max_concurrency,
        },
        "stats": stats,
        "outputs": [o.token_ids for o in outs],
    }


def _print(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from kvbudget.commands.terminal import markup_safe

    st = result["stats"]
    console = Console()
    # --device is the user's text (checked only up to its first ':')
    title = f"kvbudget run: {result['spec']} on {result['device']}"
    summary = Table(title=markup_safe(title))
    summary.add_column("")
    summary.add_column("value", justify="right")
    rows = [
        ("requests", str(st["requests"])),
        ("generated tokens", str(st["generated_tokens"])),
        ("prefill tokens", str(st["prefill_tokens"])),
        ("steps", str(st["steps"])),
        (
            "acceptance",
            f"{st['acceptance_rate']:.3f} ({st['accepted_tokens']}/{st['proposed_tokens']})",
        ),
        ("tokens/s", f"{st['tokens_per_s']:.1f}"),
        (
            "preemptions",
            f"{st['preemptions']} (swap {st['preemptions_swap']}, "
            f"recompute {st['preemptions_recompute']})",
        ),
        ("offloaded / onboarded blocks", f"{st['offloaded_blocks']} / {st['onboarded_blocks']}"),
        ("prefix-hit tokens", str(st["prefix_hit_tokens"])),
    ]
    for name, value in rows:
        summary.add_row(name, value)
    console.print(summary)
    table = Table(title="cache bytes (measured tensors vs plan)")
    for col in ("role", "tier", "bytes", "plan bytes", "padding"):
        table.add_column(col, justify="left" if col in ("role", "tier") else "right")
    for role, tiers in st["storage"].items():
        for tier, b in tiers.items():
            table.add_row(
                role, tier, f"{b['bytes']:,}", f"{b['plan_bytes']:,}", f"{b['padding_bytes']:,}"
            )
    console.print(table)
