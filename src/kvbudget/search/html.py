"""One self-contained HTML report of a sweep (no script, no external resource; the plot
a base64 PNG, matplotlib from the ``report`` extra).

Sections: the settings and which columns are exact or modelled; the Pareto plot (score
against GPUs, the front marked); the front's rows with their reproduce commands; the
winner's policies side by side (the winner replayed through every simulator policy:
:func:`compare_policies`); the warnings of the front's and the refused plans; the
configurations that did not run, with their reasons.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.search.driver import COLUMN_NOTE, SweepResult
from kvbudget.search.rank import score

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1300px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
code { font-size: 12px; }
img { max-width: 100%; border: 1px solid #eee; }
"""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgumentError(
            "--html needs matplotlib: pip install 'kvbudget[report]' (or drop --html)"
        ) from None
    return plt


def score_label(result: SweepResult) -> str:
    """What the score axis means, in words."""
    s = result.settings
    if s.objective == "capacity":
        return "-(price an hour per sequence)" if s.prices else "sequences per GPU [exact]"
    return "-(price per million tokens)" if s.prices else "output tokens/s per GPU [roofline]"


def pareto_png(result: SweepResult) -> bytes:
    """The Pareto plot: every row that ran, score against GPUs, the front in red."""
    plt = _pyplot()
    s = result.settings
    fig, ax = plt.subplots(figsize=(8, 5))
    for status, colour, marker in (("ok", "#999999", "o"), ("slo", "#e69f00", "x")):
        pts = [(r.gpus, score(r, s)) for r in result.rows if r.status == status]
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:
            label = "meets the SLO" if status == "ok" else "misses the SLO"
            ax.scatter(*zip(*pts, strict=True), c=colour, marker=marker, label=label)
    front = sorted((r.gpus, score(r, s)) for r in result.rows if r.config.index in result.front)
    if front:
        ax.plot(*zip(*front, strict=True), "o-", c="#d62728", label="Pareto front")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(score_label(result))
    ax.set_title(f"{s.space.target}: {s.objective}")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def compare_policies(result: SweepResult) -> Any:
    """The winner replayed through every simulator policy (a ``SimulationResult``), or
    None without a winner. Raises what planning or the simulator raises."""
    from kvbudget.deployment import resolve_deployment
    from kvbudget.planner import build_plan
    from kvbudget.search.task import simulate_plan
    from kvbudget.sim import POLICIES

    winner = result.winner
    if winner is None:
        return None
    s = result.settings
    plan = build_plan(resolve_deployment(**winner.config.plan_kwargs(s.space)))  # type: ignore[arg-type]
    return simulate_plan(plan, s, winner.config.dp, POLICIES)


def _policy_table(sim: Any) -> str:
    e = html.escape
    rows: tuple[tuple[str, Callable[[Any], str]], ...] = (
        ("output tokens/s", lambda m: f"{m.output_tokens_per_s:.1f}"),
        ("completed / requests", lambda m: f"{m.completed} / {m.requests}"),
        ("TTFT p50 / p99 s", lambda m: f"{m.ttft_s.p50 or 0:.4g} / {m.ttft_s.p99 or 0:.4g}"),
        ("TPOT p50 / p99 s", lambda m: f"{m.tpot_s.p50 or 0:.4g} / {m.tpot_s.p99 or 0:.4g}"),
        ("preemptions", lambda m: str(m.preemptions)),
        ("prompt tokens from cache", lambda m: f"{m.hit_tokens:,}"),
        ("GPU blocks", lambda m: f"{m.gpu_blocks:,}"),
    )
    head = "".join(f"<th>{e(m.policy)}</th>" for m in sim.policies)
    body = "".join(
        f"<tr><td>{e(label)}</td>"
        + "".join(f"<td>{e(cell(m))}</td>" for m in sim.policies)
        + "</tr>"
        for label, cell in rows
    )
    return f'<table id="policies"><tr><th>metric</th>{head}</tr>{body}</table>'


def _warnings_table(result: SweepResult) -> str:
    """Each warning of the front's plans and of the refused plans, once, with the
    configurations it holds for (as ``kvbudget plan`` prints them beside its output)."""
    e = html.escape
    shown = [r for r in result.rows if r.config.index in result.front or r.status == "infeasible"]
    holders: dict[str, list[str]] = {}
    for row in shown:
        for w in row.warnings:
            holders.setdefault(w, []).append(row.config.label())
    if not holders:
        return "<p>none</p>"
    body = "".join(
        f"<tr><td>{e(w)}</td><td>{e('; '.join(labels))}</td></tr>" for w, labels in holders.items()
    )
    return f'<table id="warnings"><tr><th>warning</th><th>configurations</th></tr>{body}</table>'


def render_html(result: SweepResult, policies: Any = None) -> str:
    """The report as one string; ``policies``: :func:`compare_policies`' result (None:
    the section says there is no winner). Raises InvalidArgumentError without matplotlib."""
    e = html.escape
    s = result.settings
    png = base64.b64encode(pareto_png(result)).decode()
    front = [r for r in result.rows if r.config.index in result.front]
    front_rows = "".join(
        f"<tr><td>{e(r.config.label())}</td><td>{score(r, s):.6g}</td>"
        f"<td>{r.seqs_total}</td><td><code>{e(r.command)}</code></td></tr>"
        for r in front
    )
    refused = "".join(
        f"<tr><td>{e(r.status)}</td><td>{e(r.config.label())}</td><td>{e(r.reason or '')}</td></tr>"
        for r in result.rows
        if r.status in ("infeasible", "invalid", "slo")
    )
    winner = result.winner
    compared = (
        "<p>no configuration meets the objective's limits: nothing to compare</p>"
        if winner is None or policies is None
        else f"<p>{e(winner.config.label())}</p>{_policy_table(policies)}"
    )
    counts = ", ".join(f"{v} {k}" for k, v in result.counts().items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>kvbudget sweep: {e(s.space.target)}</title><style>{_STYLE}</style></head>
<body>
<h1>kvbudget sweep</h1>
<p>{e(s.space.target)}, objective {e(s.objective)}: {e(counts)}.</p>
<p>{e(COLUMN_NOTE)}</p>
<h2>Pareto front</h2>
<img id="pareto" alt="Pareto plot" src="data:image/png;base64,{png}">
<table id="front"><tr><th>configuration</th><th>{e(score_label(result))}</th>
<th>sequences [exact]</th><th>reproduce</th></tr>{front_rows}</table>
<h2>The winner's policies side by side (roofline)</h2>
{compared}
<h2>Warnings of these plans</h2>
{_warnings_table(result)}
<h2>Not ranked</h2>
<table id="refused"><tr><th>status</th><th>configuration</th><th>why</th></tr>{refused}</table>
</body></html>
"""


def write_html(result: SweepResult, path: Path) -> Path:
    """Replay the winner's policies and write :func:`render_html` to ``path``."""
    text = render_html(result, compare_policies(result))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


__all__ = ["compare_policies", "pareto_png", "render_html", "write_html"]
