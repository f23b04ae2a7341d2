"""One self-contained HTML report of a simulation: no script, no external resource.

Sections: the settings, the summary table (the rows of :mod:`kvbudget.sim.summary`), the
plots (PNG embedded as base64 ``data:`` URLs), each policy's notes, the plan
(``Plan.to_dict()`` as JSON) and the engine flags for each engine. A page that opens
from a file, offline, with nothing for a browser to fetch or run.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from kvbudget.sim.plots import render_plots
from kvbudget.sim.simulation import SimulationResult
from kvbudget.sim.summary import ROWS

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
"""


def render_html(result: SimulationResult) -> str:
    """The report as one HTML string. Raises InvalidArgumentError without matplotlib."""
    e = html.escape
    plan = result.plan
    r = result.roofline
    cfg = result.config
    head = (
        f"{plan.target} + {plan.draft or plan.spec} on {r.rates.name}, tp {plan.tp}, "
        f"{result.policies[0].requests if result.policies else 0:,} requests"
    )
    rows = "".join(
        "<tr><td>"
        + e(label)
        + "</td>"
        + "".join(f"<td>{e(cell(m))}</td>" for m in result.policies)
        + "</tr>"
        for label, cell in ROWS
    )
    header = "".join(f"<th>{e(m.policy)}</th>" for m in result.policies)
    plots = "".join(
        f'<figure><img id="plot-{e(name)}" class="plot" alt="{e(name)} plot" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode()}"></figure>'
        for name, data in render_plots(result).items()
    )
    notes = "".join(
        f"<li><b>{e(m.policy)}</b>: {e(note)}</li>" for m in result.policies for note in m.notes
    )
    flags = "".join(
        f"<h3>{e(engine)}</h3><pre>{e(json.dumps(settings, indent=2))}</pre>"
        for engine, settings in result.engine_flags.items()
    )
    settings = (
        f"trace {e(result.trace_path)}, rate scale {result.rate_scale:g}; acceptance "
        f"{e(cfg.acceptance.describe())} ({cfg.acceptance.expected_accepted(r.draft_len):.2f} "
        f"of {r.draft_len} drafts accepted per step on average), seed {cfg.seed}; roofline: "
        f"{e(r.rates.source)}. Times are roofline lower bounds (peak bandwidth and FLOPs)."
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<link rel="icon" href="data:,">
<title>kvbudget simulate: {e(head)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>kvbudget simulate</h1>
<p>{e(head)}</p>
<p>{settings}</p>
<h2>Policies side by side (per rank)</h2>
<table id="summary"><thead><tr><th>metric</th>{header}</tr></thead><tbody>{rows}</tbody></table>
<ul id="notes">{notes}</ul>
<h2>Plots</h2>
{plots}
<h2>Plan</h2>
<pre id="plan">{e(plan.to_json())}</pre>
<h2>Engine flags</h2>
<div id="engine-flags">{flags or "<p>none given</p>"}</div>
</body>
</html>
"""


def write_html(result: SimulationResult, path: Path) -> Path:
    """Write :func:`render_html` to ``path`` (parent folders created); returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result), encoding="utf-8")
    return path
