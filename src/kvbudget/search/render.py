"""The sweep's table (rich): the ranked rows, the front marked ``*``, then the
configurations that did not run with their reasons.

Column headers say which figures are exact (``[exact]``: the engine models' Capacity)
and which are modelled (``[roofline]``: tokens/s an upper bound, TTFT/TPOT lower
bounds).
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from kvbudget.commands.terminal import printable
from kvbudget.search.driver import COLUMN_NOTE, SweepResult
from kvbudget.search.row import SweepRow
from kvbudget.units import format_bytes


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _ranked_table(result: SweepResult, top: int) -> Table:
    s = result.settings
    traffic = s.objective == "traffic"
    pct = s.slo.percentile
    shown = [r for r in result.rows if r.status in ("ok", "slo")][:top]
    title = f"kvbudget sweep: {s.space.target}, objective {s.objective} ({result.backend})"
    table = Table(title=title, caption=COLUMN_NOTE, caption_justify="left")
    heads = ["#", "front", "configuration (GPU x n tp pp dp ep kv engine batch spec)"]
    heads += ["seqs/GPU\n(exact)", "seqs\n(exact)", "tokens/rank\n(exact)", "KV/rank\n(exact)"]
    if traffic:
        heads += ["tok/s/GPU\n(roofline)", f"TTFT {pct} s\n(roofline)", f"TPOT {pct} s\n(roofline)"]
    if s.prices:
        heads += ["price/Mtok" if traffic else "price/seq-hour"]
    why = any(r.reason for r in shown)
    if why:
        heads += ["why"]
    for head in heads:
        table.add_column(head, overflow="fold", justify="left" if "config" in head else "right")
    for rank, row in enumerate(shown, 1):
        cap = row.capacity or {}
        cells = [
            str(rank),
            "*" if row.config.index in result.front else "",
            row.config.label(),
            _num(row.seqs_per_gpu),
            str(row.seqs_total),
            f"{cap.get('tokens', 0):,}",
            format_bytes(row.gpu_kv_bytes_per_rank or 0),
        ]
        if traffic:
            t = row.traffic
            cells += [
                _num(t.output_tokens_per_s_per_gpu if t else None),
                _num(t.ttft_s.get(pct) if t else None),
                _num(t.tpot_s.get(pct) if t else None),
            ]
        if s.prices:
            cells += [_num(row.cost_per_mtok if traffic else row.price_per_seq_hour)]
        if why:
            cells += [row.reason or ""]
        table.add_row(*cells)
    return table


def _refused_table(rows: list[SweepRow], top: int) -> Table:
    table = Table(title=f"not run: {len(rows)} configuration(s), the reason each")
    for head in ("status", "configuration", "why"):
        table.add_column(head, overflow="fold")
    for row in rows[:top]:
        table.add_row(row.status, row.config.label(), row.reason or "")
    return table


def _warning_lines(result: SweepResult, top: int) -> list[Text]:
    """The plans' warnings of the rows shown (as ``kvbudget plan`` prints them), each
    once with the ranks it holds for; --json has them per row."""
    shown = [r for r in result.rows if r.status in ("ok", "slo")][:top]
    ranks: dict[str, list[int]] = {}
    for rank, row in enumerate(shown, 1):
        for w in row.warnings:
            ranks.setdefault(w, []).append(rank)
    return [
        Text(f"warning (#{', #'.join(map(str, r))}): {printable(w)}", style="yellow")
        for w, r in ranks.items()
    ]


def render_sweep(result: SweepResult, *, top: int = 20) -> Group:
    """The ranked table (the first ``top`` rows that ran) and the ones that did not."""
    parts: list[Table | Text] = [_ranked_table(result, top)]
    refused = [r for r in result.rows if r.status in ("infeasible", "invalid")]
    if refused:
        parts.append(_refused_table(refused, top))
    parts.extend(_warning_lines(result, top))
    counts = result.counts()
    hidden = counts["ok"] + counts["slo"] - min(top, counts["ok"] + counts["slo"])
    hidden += max(0, len(refused) - top)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    more = f" ({hidden} row(s) not shown: --top, or --json for all)" if hidden else ""
    parts.append(Text(f"{summary}; {result.wall_s:.2f} s{more}"))
    return Group(*parts)


def print_sweep(result: SweepResult, console: Console, *, top: int = 20) -> None:
    """Print :func:`render_sweep` on ``console``."""
    console.print(render_sweep(result, top=top))


__all__ = ["print_sweep", "render_sweep"]
