"""Report figures (matplotlib, Agg backend, imported only when a report is written):
timeline.png (Gantt of the compute streams), breakdown.png, memory.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.report.metrics import BREAKDOWN_KEYS, CATEGORIES, memory_timeline

__all__ = ["plot_timeline", "plot_breakdown", "plot_memory"]

_COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "recompute": "#DD8452",
           "optimizer": "#8172B3", "comm": "#C44E52", "offload": "#937860"}
_MAX_ROWS = 64  # devices drawn in the Gantt chart


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rows(plan: Any) -> list[int]:
    """At most _MAX_ROWS devices: the first device of every pipeline stage, then the others
    in order, drawn in device order."""
    first: dict[int, int] = {}
    for d, stage in zip(plan.devices, plan.stage_of):
        first.setdefault(stage, d)
    picked = list(first.values())[:_MAX_ROWS]
    rest = [d for d in plan.devices if d not in set(picked)]
    return sorted(picked + rest[: _MAX_ROWS - len(picked)])


def plot_timeline(result: Any, path: Path) -> None:
    """One row per simulated device (compute stream above, communication below)."""
    plt = _pyplot()
    plan, trace = result.plan, result.trace
    devices = _rows(plan)
    row = {d: i for i, d in enumerate(devices)}
    bars: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
    for task in plan.tasks:
        if task.device in row and task.duration_s > 0:
            key = (task.device, task.phase, task.stream == "compute")
            bars.setdefault(key, []).append(
                (trace.start[task.tid], trace.end[task.tid] - trace.start[task.tid]))
    fig, ax = plt.subplots(figsize=(12, 1 + 0.35 * len(devices)))
    for (device, phase, on_compute), spans in sorted(bars.items()):
        y = row[device] + (0.0 if on_compute else 0.42)
        ax.broken_barh(spans, (y, 0.4 if on_compute else 0.2), color=_COLORS.get(phase, "k"))
    ax.set_yticks([i + 0.3 for i in range(len(devices))], [f"dev {d}" for d in devices])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    shown = (f"all {len(devices)} simulated devices" if len(devices) == len(plan.devices)
             else f"{len(devices)} of {len(plan.devices)} simulated devices (first of each "
             f"pipeline stage, then in order; {len(plan.devices) - len(devices)} left out)")
    ax.set_title(f"{result.scenario.name}: compute (thick) and communication (thin)\n"
                 f"{shown}", fontsize="medium")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    ax.legend(handles, list(_COLORS), loc="upper right", fontsize="small")
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
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GB")
    ax.set_title(f"memory of device {device}: peak {result.memory.peak_bytes / 1e9:.2f} GB")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
