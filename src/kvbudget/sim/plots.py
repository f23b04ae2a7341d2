"""PNG plots of a simulation (matplotlib, the ``report`` extra; imported inside functions).

* ``concurrency.png``: running and queued requests over simulated time, per policy;
* ``gpu_blocks.png``: GPU blocks used by running requests over time, per policy;
* ``latency.png``: TTFT and TPOT p50/p90/p99 per policy (bars);
* ``host.png``: pinned host bytes against the budget, and host traffic, per policy;
* ``overview.png``: queued requests over time, TTFT p50/p99 and pinned host memory per
  policy, side by side (the README's figure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.simulation import SimulationResult

PLOT_NAMES = ("overview", "concurrency", "gpu_blocks", "latency", "host")
GIB = 2**30


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidArgumentError(
            "plots need matplotlib: pip install 'kvbudget[report]' (or drop --plots/--html)"
        ) from None
    return plt


def render_plots(result: SimulationResult) -> dict[str, bytes]:
    """Each plot of :data:`PLOT_NAMES` as PNG bytes. Raises InvalidArgumentError without
    matplotlib."""
    import io

    plt = _pyplot()
    out: dict[str, bytes] = {}
    for name in PLOT_NAMES:
        fig = _FIGURES[name](plt, result)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        out[name] = buf.getvalue()
    return out


def write_plots(result: SimulationResult, folder: Path) -> list[Path]:
    """Write the PNGs into ``folder`` (created); returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in render_plots(result).items():
        path = folder / f"{name}.png"
        path.write_bytes(data)
        paths.append(path)
    return paths


def _concurrency(plt: Any, result: SimulationResult) -> Any:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for m in result.policies:
        s = m.series
        top.plot(s["time_s"], s["running"], label=m.policy, linewidth=1)
        bottom.plot(s["time_s"], s["waiting"], label=m.policy, linewidth=1)
    top.set_ylabel("running requests")
    bottom.set_ylabel("queued requests")
    bottom.set_xlabel("simulated time (s)")
    top.legend(fontsize=8)
    top.set_title("Concurrency over time")
    return fig


def _gpu_blocks(plt: Any, result: SimulationResult) -> Any:
    fig, ax = plt.subplots(figsize=(9, 4))
    for m in result.policies:
        s = m.series
        share = [u / m.gpu_blocks if m.gpu_blocks else 0.0 for u in s["gpu_used_blocks"]]
        ax.plot(s["time_s"], share, label=f"{m.policy} ({m.gpu_blocks:,} blocks)", linewidth=1)
    ax.set_ylabel("GPU blocks held by requests (share)")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("GPU block occupancy")
    return fig


def _latency(plt: Any, result: SimulationResult) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [m.policy for m in result.policies]
    x = range(len(names))
    for ax, attr, title in ((axes[0], "ttft_s", "TTFT"), (axes[1], "tpot_s", "TPOT")):
        for j, q in enumerate(("p50", "p90", "p99")):
            values = [(getattr(getattr(m, attr), q) or 0.0) * 1000 for m in result.policies]
            ax.bar([i + (j - 1) * 0.27 for i in x], values, width=0.27, label=q)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(f"{title} percentiles")
        ax.legend(fontsize=8)
    return fig


def _host(plt: Any, result: SimulationResult) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [m.policy for m in result.policies]
    x = list(range(len(names)))
    axes[0].bar(x, [m.pinned_host_bytes / GIB for m in result.policies], label="pinned")
    budget = result.plan.budget.host_bytes / GIB
    axes[0].axhline(budget, color="black", linestyle="--", label="host budget")
    axes[0].set_ylabel("GiB per rank")
    axes[0].set_title("Pinned host memory")
    axes[0].legend(fontsize=8)
    axes[1].bar(x, [m.host_traffic_bytes / GIB for m in result.policies])
    axes[1].set_ylabel("GiB moved (offload + onboard)")
    axes[1].set_title("Host traffic")
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    return fig


def _overview(plt: Any, result: SimulationResult) -> Any:
    fig, (queue, ttft, host) = plt.subplots(1, 3, figsize=(15, 4.2))
    names = [m.policy for m in result.policies]
    x = list(range(len(names)))
    for m in result.policies:
        queue.plot(m.series["time_s"], m.series["waiting"], label=m.policy, linewidth=1)
    queue.set_xlabel("simulated time (s)")
    queue.set_ylabel("queued requests")
    queue.set_title("Queue over time")
    queue.legend(fontsize=8)
    for j, q in enumerate(("p50", "p99")):
        values = [(getattr(m.ttft_s, q) or 0.0) for m in result.policies]
        ttft.bar([i + (j - 0.5) * 0.4 for i in x], values, width=0.4, label=q)
    ttft.set_ylabel("seconds")
    ttft.set_title("Time to first token")
    ttft.legend(fontsize=8)
    host.bar(x, [m.node_pinned_host_bytes / GIB for m in result.policies], label="pinned")
    node_memory = result.plan.budget.host_memory_bytes
    if node_memory is not None:
        host.axhline(node_memory / GIB, color="red", linestyle=":", label="node host memory")
    budget = result.plan.budget.node_host_bytes / GIB
    host.axhline(budget, color="black", linestyle="--", label="host budget")
    host.set_ylabel("GiB per node")
    host.set_title("Pinned host memory")
    host.legend(fontsize=8)
    for ax in (ttft, host):
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    fig.tight_layout()
    return fig


_FIGURES = {
    "overview": _overview,
    "concurrency": _concurrency,
    "gpu_blocks": _gpu_blocks,
    "latency": _latency,
    "host": _host,
}
