"""Report figures (matplotlib, Agg backend, imported only when a report is written):
timeline.png (a lane per pipeline stage and stream kind), breakdown.png, memory.png.
Legends sit outside the axes: they never hide the end of the iteration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.report.allocator import reserved_line_bytes
from simulator.report.interactive import PHASE_COLORS
from simulator.report.lanes import timeline_lanes
from simulator.report.metrics import BREAKDOWN_KEYS, CATEGORIES, memory_timeline

__all__ = ["plot_timeline", "plot_breakdown", "plot_memory"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_timeline(result: Any, path: Path) -> None:
    """One lane per (pipeline stage, stream kind) (`report.lanes`), whatever the number of
    devices; the legend above the axes, the end of the iteration dashed."""
    plt = _pyplot()
    lanes = timeline_lanes(result.plan, result.trace)
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.32 * len(lanes)))
    for row, lane in enumerate(lanes):
        by_phase: dict[str, list[tuple[float, float]]] = {}
        for sp in lane.spans:
            by_phase.setdefault(sp.phase, []).append((sp.start, sp.end - sp.start))
        for phase, spans in sorted(by_phase.items()):
            ax.broken_barh(spans, (row - 0.35, 0.7), color=PHASE_COLORS.get(phase, "k"))
    ax.set_yticks(range(len(lanes)), [lane.label for lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    end = result.iteration_time_s
    ax.axvline(end, color="k", linestyle="--", linewidth=1)
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_xlabel(f"time (s); the iteration ends at {end:.4g} s (dashed line)")
    stages = len({lane.stage for lane in lanes})
    ax.set_title(f"{result.scenario.name}: {len(lanes)} lanes, {stages} pipeline stage(s) x "
                 f"{len(lanes) // max(stages, 1)} stream kind(s) of "
                 f"{result.plan.total_devices} devices\n(each stage drawn from its device "
                 "that finishes last)", fontsize="medium", pad=28)
    phases = [p for p in PHASE_COLORS if any(sp.phase == p for lane in lanes
                                             for sp in lane.spans)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS[p]) for p in phases]
    ax.legend(handles, phases, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(phases),
              fontsize="small", frameon=False, borderaxespad=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_breakdown(result: Any, path: Path) -> None:
    """The iteration time of the slowest device split by BREAKDOWN_KEYS."""
    plt = _pyplot()
    parts = dict(result.breakdown_s)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh(list(BREAKDOWN_KEYS), [parts[k] for k in BREAKDOWN_KEYS], color="#4C72B0")
    ax.set_xlabel("seconds per iteration")
    ax.set_title(f"breakdown on device {result.slowest_device}: "
                 f"{result.iteration_time_s:.4g} s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_memory(result: Any, path: Path) -> None:
    """The allocation timeline of the device with the highest peak, stacked by category."""
    plt = _pyplot()
    device = result.memory.device
    times, states = memory_timeline(result.plan, result.trace, device)
    fig, ax = plt.subplots(figsize=(10, 4))
    ys = [[s[c] / 1e9 for s in states] for c in CATEGORIES]
    ax.stackplot(times, ys, labels=list(CATEGORIES), step="post")
    ax.axhline(result.capacity_bytes / 1e9, color="k", linestyle="--", label="capacity")
    reserved = reserved_line_bytes(result)
    if reserved is not None:
        ax.axhline(reserved / 1e9, color="0.4", linestyle=":", label="reserved at the peak")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GB")
    ax.set_title(f"memory of device {device}: peak {result.memory.peak_bytes / 1e9:.2f} GB",
                 pad=34)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, fontsize="small",
              frameon=False, borderaxespad=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
