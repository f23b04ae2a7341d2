"""Helpers every engine model shares: units, dtype names, headers, and rendering settings."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvbudget.engines.facts import EngineFacts
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Capacity, Plan

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger

GIB = 1024**3
GB = 10**9


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints (the engines' ``cdiv``)."""
    return -(-a // b)


def stage_note(ledger: Ledger) -> list[str]:
    """A comment when PP stages have different budgets."""
    if ledger.min_stage_gpu_bytes >= ledger.budget.gpu_bytes:
        return []
    return [
        f"# PP stages differ: the KV bytes are the smallest stage budget "
        f"({ledger.min_stage_gpu_bytes}), not the reported last stage's "
        f"({ledger.budget.gpu_bytes})"
    ]


def refuse_unmodelled_family(d: Deployment, engine: str) -> None:
    """InvalidArgumentError when target or draft is a family whose pools the engine model
    of ``engine`` does not build (``Architecture.unmodelled_engines``)."""
    from kvbudget.architectures import architecture_for

    for model in (d.target, d.draft):
        arch = None if model is None else architecture_for(model.model_type)
        if model is not None and arch is not None and engine in arch.unmodelled_engines:
            engines = ("vllm", "sglang", "trtllm", "kvbudget")
            others = [e for e in engines if e not in arch.unmodelled_engines | {engine}]
            reason = arch.unmodelled_reasons.get(engine)
            raise InvalidArgumentError(
                f"--engine {engine} is not modelled for {model.name} (model_type "
                f"{model.model_type!r}{'; ' + reason if reason else ''}); plan it with "
                + " or ".join(f"--engine {e}" for e in others)
            )


def refuse_unmodelled(d: Deployment, engine: str, *, models_indexer: bool = False) -> None:
    """InvalidArgumentError for a deployment the engine models of ``engine`` do not cover:
    a family whose pools that engine model does not build (``Architecture.unmodelled_engines``),
    a sparse-attention indexer cache (unless ``models_indexer``), or a draft at another TP
    size than the target."""
    from kvbudget.layers import MLALayer

    if d.spec.name == "dflash" and engine not in ("vllm", "kvbudget"):
        raise InvalidArgumentError(
            f"--engine {engine} is not modelled for DFlash drafts (its draft pools for "
            "them are not read); plan --spec dflash with --engine vllm or --engine kvbudget"
        )
    refuse_unmodelled_family(d, engine)
    if not models_indexer and any(
        isinstance(x, MLALayer) and x.index_head_dim for x in d.target.layers
    ):
        raise InvalidArgumentError(
            f"--engine {engine} is not modelled for {d.target.name}'s sparse-attention "
            "indexer cache (the engines keep it apart from the MLA latent); plan it with "
            "--engine kvbudget"
        )
    if d.parallel.draft_tp != d.parallel.tp:
        raise InvalidArgumentError(
            f"--engine {engine} is modelled with the draft at the target's tp; plan a "
            "different draft_tp with --engine kvbudget"
        )


def refuse_unchecked_sglang(version: str, checked: str, name: str, family: str) -> None:
    """InvalidArgumentError when ``version`` is not the SGLang release a family's pools
    were read and run against (``checked``)."""
    if version != checked:
        raise InvalidArgumentError(
            f"--engine sglang@{version} is not modelled for {name} ({family}; checked "
            f"against SGLang {checked} only); plan it with --engine sglang@{checked} or "
            "--engine vllm"
        )


def gib_text(num_bytes: int) -> str:
    """GiB with up to 3 decimals, rounded down so the engine never exceeds the plan."""
    thousandths = num_bytes * 1000 // GIB
    whole, frac = divmod(thousandths, 1000)
    return f"{whole}.{frac:03d}".rstrip("0").rstrip(".") if frac else str(whole)


def whole_gb(num_bytes: int) -> int:
    """Whole decimal GB (10^9 B), rounded down."""
    return num_bytes // GB


def kv_dtype_name(kv_dtype: str, facts: EngineFacts) -> str:
    """The engine's name for ``kv_dtype``; InvalidArgumentError when it has none."""
    name = facts.kv_dtype_names.get(kv_dtype)
    if name is None:
        choices = ", ".join(k for k, v in facts.kv_dtype_names.items() if v is not None)
        raise InvalidArgumentError(
            f"{facts.name} has no {kv_dtype} KV cache ({facts.kv_dtype_knob}); "
            f"plan with --kv-dtype one of {choices}"
        )
    return name


def check_block(tpb: int, facts: EngineFacts) -> None:
    """InvalidArgumentError when the engine does not take ``tpb`` tokens per block."""
    if facts.block_power_of_two and (tpb < 2 or tpb & (tpb - 1)):
        raise InvalidArgumentError(
            f"{facts.name} needs {facts.block_knob} to be a power of two > 1, got {tpb}; "
            "change --tokens-per-block"
        )


def header(plan: Plan, comment: str, name: str, version: str) -> list[str]:
    """The first comment lines of every emission: what was planned, for which engine."""
    draft = f" + {plan.draft}" if plan.draft else ""
    return [
        f"{comment} kvbudget plan: {plan.target}{draft}, spec {plan.spec}, "
        f"tp={plan.tp} pp={plan.pp}",
        f"{comment} engine model: {name} {version} (the settings and predictions below are "
        "for this version)",
    ]


def auto_note(kv_dtype: str, facts: EngineFacts, name: str) -> list[str]:
    """A comment when the engine's dtype name is "auto"."""
    if name != "auto":
        return []
    return [
        f"# {facts.kv_dtype_knob} auto keeps the checkpoint's dtype; the plan assumes {kv_dtype}"
    ]


def environment_prefix(settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``NAME=value `` prefix of a command for the ``env.NAME`` settings, and the
    other settings (its flags)."""
    env = {k.removeprefix("env."): v for k, v in settings.items() if k.startswith("env.")}
    prefix = "".join(f"{k}={shlex.quote(str(v))} " for k, v in env.items())
    return prefix, {k: v for k, v in settings.items() if not k.startswith("env.")}


def command_line(head: str, settings: Mapping[str, Any]) -> str:
    """``head`` and one ``--flag value`` line per setting; ``True`` is a bare flag."""
    args = [head]
    for flag, value in settings.items():
        if value is True:
            args.append(flag)
        elif isinstance(value, Mapping):
            args.append(f"{flag} {shlex.quote(json.dumps(dict(value)))}")
        else:
            args.append(f"{flag} {shlex.quote(str(value))}")
    return " \\\n  ".join(args)


def comment_lines(plan: Plan, title: str) -> list[str]:
    """The comments every emission starts with: what was planned, for which engine
    version, what each setting does there, and the predicted start-up lines."""
    engine = plan.engine
    lines = header(plan, "#", title, engine.version) + list(engine.notes)
    # the plan's warnings travel with the settings (a file loses the terminal's stderr)
    lines += [f"# warning: {' '.join(w.split())}" for w in plan.warnings]
    return lines + log_comments(engine.log)


def log_comments(lines: tuple[str, ...]) -> list[str]:
    """The engine's predicted start-up lines as comments."""
    if not lines:
        return []
    return ["# predicted start-up lines:"] + [f"#   {line}" for line in lines]


def engine_capacity(
    d: Deployment,
    *,
    tokens_per_block: int,
    gpu_blocks: int,
    host_blocks: int,
    max_concurrency: int,
    tokens: int | None = None,
    host_tokens: int | None = None,
    disk_blocks: int = 0,
) -> Capacity:
    """An engine's :class:`~kvbudget.plan_types.Capacity`: its own block counts, tokens
    (default: whole blocks) and sequences at once, with the deployment's lengths,
    lookahead, batch and DP groups, which are the same for every engine."""
    return Capacity(
        tokens=gpu_blocks * tokens_per_block if tokens is None else tokens,
        tokens_per_block=tokens_per_block,
        gpu_blocks=gpu_blocks,
        host_blocks=host_blocks,
        disk_blocks=disk_blocks,
        host_tokens=host_blocks * tokens_per_block if host_tokens is None else host_tokens,
        disk_tokens=disk_blocks * tokens_per_block,
        max_seq_len=d.max_seq_len,
        lookahead_tokens=d.lookahead_tokens,
        max_batch_size=d.max_batch_size,
        max_concurrency=max_concurrency,
        kv_groups=d.parallel.kv_groups,
    )
