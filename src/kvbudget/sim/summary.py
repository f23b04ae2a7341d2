"""The summary table of a simulation: one column per policy, one row per metric."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvbudget.commands.terminal import printable
from kvbudget.sim.metrics import Percentiles, PolicyMetrics
from kvbudget.sim.simulation import SimulationResult
from kvbudget.units import format_bytes


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def _pct(p: Percentiles) -> str:
    return f"{_ms(p.p50)} / {_ms(p.p90)} / {_ms(p.p99)}"


def _pinned(m: PolicyMetrics) -> str:
    text = f"{format_bytes(m.pinned_host_bytes)} of {format_bytes(m.host_budget_bytes)}"
    if m.host_budget_bytes and m.pinned_host_bytes > m.host_budget_bytes:
        text += f" ({m.pinned_host_bytes / m.host_budget_bytes:g}x)"
    return text


def _node(m: PolicyMetrics) -> str:
    text = format_bytes(m.node_pinned_host_bytes)
    if m.node_host_memory_bytes is not None:
        text += f" of {format_bytes(m.node_host_memory_bytes)}"
        if m.node_pinned_host_bytes > m.node_host_memory_bytes:
            text += " (over!)"
    return text


def _not_finished(m: PolicyMetrics) -> str:
    if not m.not_finished:
        return "0"
    return ", ".join(f"{n} {reason}" for reason, n in m.not_finished.items())


ROWS: tuple[tuple[str, Callable[[PolicyMetrics], str]], ...] = (
    ("GPU / host blocks", lambda m: f"{m.gpu_blocks:,} / {m.host_blocks:,}"),
    ("pinned host per rank (of budget)", _pinned),
    ("pinned host per node", _node),
    ("GPU bytes over the draft's share", lambda m: format_bytes(m.gpu_overcommit_bytes)),
    ("completed / requests", lambda m: f"{m.completed:,} / {m.requests:,}"),
    ("not finished", _not_finished),
    ("preempted requests", lambda m: f"{m.preempted_requests:,}"),
    ("preemptions: swap / recompute", lambda m: f"{m.swapped_out:,} / {m.recomputed:,}"),
    ("max queued / max running", lambda m: f"{m.max_waiting:,} / {m.max_running:,}"),
    (
        "prefix-hit tokens: GPU / host",
        lambda m: f"{m.hit_tokens_by_tier['gpu']:,} / {m.hit_tokens_by_tier['host']:,}",
    ),
    (
        "hit rate (of prompt tokens)",
        lambda m: f"{m.hit_tokens / m.prompt_tokens:.3f}" if m.prompt_tokens else "-",
    ),
    (
        "host traffic: out / in",
        lambda m: (
            f"{format_bytes(m.host_offloaded_bytes)} / {format_bytes(m.host_onboarded_bytes)}"
        ),
    ),
    ("TTFT p50 / p90 / p99 (ms)", lambda m: _pct(m.ttft_s)),
    ("TPOT p50 / p90 / p99 (ms)", lambda m: _pct(m.tpot_s)),
    ("output tokens/s", lambda m: f"{m.output_tokens_per_s:,.0f}"),
    ("makespan (s)", lambda m: f"{m.makespan_s:,.1f}"),
)


def summary_table(result: SimulationResult) -> Table:
    """The comparison table (rows of :data:`ROWS`, a column per policy)."""
    plan = result.plan
    r = result.roofline
    title = (
        f"{plan.target} + {plan.draft or plan.spec} on {r.rates.name}, tp {plan.tp}: "
        f"{result.policies[0].requests if result.policies else 0:,} requests"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("metric (per rank)", overflow="fold")
    for m in result.policies:
        table.add_column(m.policy, justify="right", overflow="fold")
    for label, cell in ROWS:
        table.add_row(label, *(cell(m) for m in result.policies))
    return table


def print_summary(result: SimulationResult, console: Console) -> None:
    """The table, then the settings, each policy's notes and the plan's warnings."""
    console.print(summary_table(result))
    cfg = result.config
    k = result.roofline.draft_len
    console.print(
        f"acceptance {cfg.acceptance.describe()} (mean {cfg.acceptance.expected_accepted(k):.2f} "
        f"of {k} drafts accepted per step), rate scale "
        f"{result.rate_scale:g}, seed {cfg.seed}; step times from the roofline of "
        f"{result.roofline.rates.source} (lower bounds: see `kvbudget simulate --help`)"
    )
    for m in result.policies:
        for note in m.notes:
            console.print(f"[bold]{m.policy}[/bold]: {note}")
    for w in result.plan.warnings:  # as `kvbudget plan` prints them; --json has them too
        console.print(Text(f"warning: {printable(w)}", style="yellow"))
    if result.plan.budget.host_bytes == 0:
        console.print(
            "host budget 0: kvbudget, doubled-host and no-host are the same plan; pass "
            "--host-budget to compare host tiers"
        )
