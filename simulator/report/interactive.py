"""The interactive figures of report.html: plotly.js figure specs (plain dicts: `data` and
`layout`) built from a SimResult or a sweep's rows, drawn in the page by the plotly.js
bundle inlined in it (`plotly_js`), so that hover shows the values and drag zooms with
no network. plotly (the optional extra `report`, in `dev` too) is read only for its
bundle file, never imported; without it the page falls back to the PNGs and says so.

Legends sit above the plotting area, never over the data (the end of the iteration
included); the timeline has one lane per pipeline stage and stream kind
(`report.lanes`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.report.allocator import reserved_line_bytes
from simulator.report.lanes import timeline_lanes
from simulator.report.metrics import BREAKDOWN_KEYS, CATEGORIES, memory_timeline

__all__ = ["plotly_js", "run_figures", "sweep_figure", "PHASE_COLORS", "EXTRA"]

EXTRA = "report"  # the optional dependency that carries plotly.js: pip install 'shardsim[report]'
PHASE_COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "recompute": "#DD8452",
                "optimizer": "#8172B3", "comm": "#C44E52", "offload": "#937860",
                "nvme": "#DA8BC3"}
_CATEGORY_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860",
                    "#DA8BC3")
# 20 distinguishable series colours (d3's category10, then its lighter tones)
_SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78",
                  "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
                  "#dbdb8d", "#9edae5")
_LEGEND_ABOVE = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02,
                 "yanchor": "bottom"}


def plotly_js() -> str | None:
    """The plotly.js bundle of the installed plotly package (its `package_data`), read
    without importing plotly; None where plotly is not installed."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def _r(value: float) -> float:
    """A figure value with 7 significant digits (the page stays small; hover shows 4-6)."""
    return float(f"{value:.7g}")


def _layout(title: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 15}},
            "legend": _LEGEND_ABOVE, "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
            "hovermode": "closest", "template": None, "plot_bgcolor": "#fff",
            "paper_bgcolor": "#fff", **more}


def timeline_figure(result: Any) -> dict[str, Any]:
    """One horizontal bar per span, one lane per (stage, stream kind), one legend entry per
    phase; a dashed line at the end of the iteration."""
    lanes = timeline_lanes(result.plan, result.trace)
    labels = [lane.label for lane in lanes]
    traces: dict[str, dict[str, list[Any]]] = {}
    for lane in lanes:
        for sp in lane.spans:
            t = traces.setdefault(sp.phase, {"x": [], "y": [], "base": [], "customdata": []})
            t["x"].append(_r(sp.end - sp.start))
            t["base"].append(_r(sp.start))
            t["y"].append(lane.label)
            t["customdata"].append([sp.name, sp.micro if sp.micro >= 0 else "-", sp.tasks,
                                    _r(sp.end), lane.device, _r(sp.comm_s)])
    data = [{"type": "bar", "orientation": "h", "name": phase,
             "marker": {"color": PHASE_COLORS.get(phase, "#333")}, **t,
             "hovertemplate": "%{y} (device %{customdata[4]})<br>%{customdata[0]}, "
             "micro-batch %{customdata[1]}, %{customdata[2]} task(s)<br>"
             "%{base:.6g} s to %{customdata[3]:.6g} s: %{x:.4g} s"
             "<br>tensor-parallel comm inside: %{customdata[5]:.4g} s<extra>%{fullData.name}"
             "</extra>"}
            for phase, t in sorted(traces.items(), key=lambda kv: list(PHASE_COLORS).index(
                kv[0]) if kv[0] in PHASE_COLORS else len(PHASE_COLORS))]
    end = result.iteration_time_s
    stages = len({lane.stage for lane in lanes})
    kinds = len({lane.stream for lane in lanes})
    title = (f"{len(lanes)} lanes: {stages} pipeline stage(s) x {kinds} stream kind(s), of "
             f"{result.plan.total_devices} devices; each stage drawn from its device that "
             "finishes last")
    layout = _layout(title, barmode="overlay", bargap=0.25,
                     height=160 + 26 * max(len(lanes), 1),
                     xaxis={"title": {"text": f"time (s); the iteration ends at {end:.4g} s "
                                               "(dashed line)"},
                            "range": [0, _r(end * 1.01)], "zeroline": False,
                            "showgrid": True, "gridcolor": "#eee"},
                     yaxis={"type": "category", "categoryorder": "array",
                            "categoryarray": labels, "autorange": "reversed",
                            "automargin": True},
                     shapes=[{"type": "line", "xref": "x", "yref": "paper", "x0": _r(end),
                              "x1": _r(end), "y0": 0, "y1": 1,
                              "line": {"dash": "dash", "color": "#000", "width": 1}}])
    return {"data": data, "layout": layout}


def breakdown_figure(result: Any) -> dict[str, Any]:
    parts = dict(result.breakdown_s)
    total = result.iteration_time_s
    values = [parts[k] for k in BREAKDOWN_KEYS]
    shares = [f"{v / total:.1%}" if total > 0 else "-" for v in values]
    data = [{"type": "bar", "orientation": "h", "name": "seconds", "y": list(BREAKDOWN_KEYS),
             "x": [_r(v) for v in values], "customdata": shares,
             "marker": {"color": "#4C72B0"},
             "hovertemplate": "%{y}: %{x:.6g} s (%{customdata})<extra></extra>"}]
    layout = _layout(f"breakdown on device {result.slowest_device}: {total:.4g} s",
                     height=300, showlegend=False,
                     xaxis={"title": {"text": "seconds per iteration"}, "rangemode": "tozero"},
                     yaxis={"autorange": "reversed", "automargin": True})
    return {"data": data, "layout": layout}


def memory_figure(result: Any) -> dict[str, Any]:
    """The allocation timeline of the device with the highest peak, stacked by category
    (steps); the capacity as a dashed line where it is on the scale of the peak."""
    device = result.memory.device
    times, states = memory_timeline(result.plan, result.trace, device)
    keep: dict[float, dict[str, float]] = {}
    for when, state in zip(times, states):
        keep[when] = state  # the state after every change at that time
    xs = [_r(t) for t in keep]
    data: list[dict[str, Any]] = []
    for i, cat in enumerate(CATEGORIES):
        ys = [_r(s[cat] / 1e9) for s in keep.values()]
        if any(ys):
            data.append({"type": "scatter", "mode": "lines", "name": cat, "x": xs, "y": ys,
                         "stackgroup": "memory", "line": {"shape": "hv", "width": 0.5,
                                                          "color": _CATEGORY_COLORS[i % 7]},
                         "hovertemplate": f"{cat}: %{{y:.4g}} GB<extra></extra>"})
    peak, capacity = result.memory.peak_bytes / 1e9, result.capacity_bytes / 1e9
    end = _r(max(max(xs, default=0.0), result.iteration_time_s))
    title = f"memory of device {device}: peak {peak:.4g} GB of {capacity:.4g} GB"
    if capacity <= 4 * peak:
        data.append({"type": "scatter", "mode": "lines", "name": "capacity",
                     "x": [0, end], "y": [_r(capacity)] * 2,
                     "line": {"dash": "dash", "color": "#000", "width": 1},
                     "hovertemplate": "capacity: %{y:.4g} GB<extra></extra>"})
    else:
        title += " (the capacity is off the scale)"
    reserved = reserved_line_bytes(result)
    if reserved is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "reserved at the peak",
                     "x": [0, end], "y": [_r(reserved / 1e9)] * 2,
                     "line": {"dash": "dot", "color": "#666", "width": 1},
                     "hovertemplate": "reserved at the peak: %{y:.4g} GB<extra></extra>"})
    layout = _layout(title, height=420, hovermode="x unified", hoverdistance=-1,
                     xaxis={"title": {"text": "time (s)"}, "range": [0, end]},
                     yaxis={"title": {"text": "GB"}, "rangemode": "tozero"})
    return {"data": data, "layout": layout}


def run_figures(result: Any) -> dict[str, dict[str, Any]]:
    """The figures of a run's report, keyed as their PNGs (report.html.FIGURES)."""
    return {"breakdown.png": breakdown_figure(result), "memory.png": memory_figure(result),
            "timeline.png": timeline_figure(result)}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def sweep_figure(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any] | None:
    """Iteration time (top) and peak memory (bottom) against the first swept key, one
    line per combination of the other keys, every one of them (a click on the legend
    hides or shows one); None when no configuration ran."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok or not keys:
        return None
    x_key, rest = keys[0], list(keys[1:])
    numeric = all(_number(r[x_key]) is not None for r in ok)
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        lines.setdefault(" ".join(f"{k}={r[k]}" for k in rest) or "all", []).append(r)
    data: list[dict[str, Any]] = []
    for i, (label, group) in enumerate(lines.items()):
        xs = [_number(r[x_key]) if numeric else str(r[x_key]) for r in group]
        color = _SERIES_COLORS[i % len(_SERIES_COLORS)]  # the same in both panels
        common = {"type": "scatter", "mode": "lines+markers", "name": label,
                  "legendgroup": f"s{i}", "x": xs, "line": {"color": color},
                  "marker": {"color": color},
                  "customdata": [[r["config"], "yes" if r["fits"] else "no"] for r in group]}
        data.append({**common, "y": [_r(r["iteration_time_s"]) for r in group],
                     "hovertemplate": "%{customdata[0]}<br>iteration %{y:.6g} s"
                     "<extra></extra>"})
        data.append({**common, "y": [_r(r["peak_memory_bytes"] / 1e9) for r in group],
                     "yaxis": "y2", "showlegend": False,
                     "hovertemplate": "%{customdata[0]}<br>peak %{y:.4g} GB, fits: "
                     "%{customdata[1]}<extra></extra>"})
    capacity = ok[0]["capacity_bytes"] / 1e9
    if capacity <= 4 * max(r["peak_memory_bytes"] for r in ok) / 1e9:
        if numeric:
            values = [v for v in (_number(r[x_key]) for r in ok) if v is not None]
            span: list[Any] = [min(values), max(values)]
        else:
            order = list(dict.fromkeys(str(r[x_key]) for r in ok))
            span = [order[0], order[-1]]
        data.append({"type": "scatter", "mode": "lines", "name": "capacity", "x": span,
                     "y": [_r(capacity)] * 2, "yaxis": "y2",
                     "line": {"dash": "dash", "color": "#000", "width": 1},
                     "hovertemplate": "capacity: %{y:.4g} GB<extra></extra>"})
    xaxis: dict[str, Any] = {"title": {"text": x_key}, "anchor": "y2"}
    if not numeric:
        xaxis.update(type="category", categoryorder="array",
                     categoryarray=list(dict.fromkeys(str(r[x_key]) for r in rows)))
    layout = _layout(f"sweep of {', '.join(keys)}: {len(ok)} of {len(rows)} configurations "
                     f"ran, {len(lines)} series", height=640 + 18 * min(len(lines), 40),
                     xaxis=xaxis,
                     yaxis={"title": {"text": "iteration time (s)"}, "domain": [0.55, 1]},
                     yaxis2={"title": {"text": "peak memory (GB)"}, "domain": [0, 0.45]})
    return {"data": data, "layout": layout}
