"""One self-contained HTML page per report: no external resource at all (style, scripts and
figure data inline), so `report.html` opens offline in any browser and can be mailed as one
file.

The figures are interactive (hover for the values, drag to zoom, double-click to reset):
plotly.js figure specs (`report.interactive`) in one JSON block (`<script
id="plot-data" type="application/json">`, keyed by element id) drawn by the plotly.js
bundle inlined in the page. Where plotly is not installed (it is the optional extra
`report`), the figures are the PNGs written beside the page, inlined as base64 data URIs,
and a note at the top of the page (id static-note) says so and what to install.

`run_page(summary, figures, plots)` is the report of one simulated iteration: the summary
table, the time breakdown, the memory timeline, the timeline (a lane per pipeline stage
and stream kind) and the communication table. `sweep_page(rows, keys, figure)` is the
comparison table of a sweep and its plot (every series). Element ids (summary-table,
breakdown-table, memory-table, comm-table, fig-*, plot-data, static-note) are stable:
tests find them in a real browser.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.report.interactive import EXTRA, plotly_js, sweep_figure
from simulator.report.run_config import config_lines
from simulator.report.summary import allocator_view, error_bar, pace_rows

__all__ = ["run_page", "sweep_page", "FIGURES"]

# report figure file -> (element id, section heading)
FIGURES: dict[str, tuple[str, str]] = {
    "breakdown.png": ("fig-breakdown", "Where the iteration time goes"),
    "memory.png": ("fig-memory", "Memory timeline"),
    "timeline.png": ("fig-timeline", "Per-stage timeline"),
}

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .8em;text-align:right;
border-bottom:1px solid #eee}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}.bad{color:#b00;font-weight:bold}.note{color:#666}
.plot{width:100%;border:1px solid #eee}.static{background:#fff6e0;padding:.5em 1em}
"""
_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
_DRAW = ("(function(){var figs=JSON.parse(document.getElementById('plot-data').textContent);"
         "Object.keys(figs).forEach(function(id){Plotly.newPlot(id,figs[id].data,"
         "figs[id].layout,figs[id].config);});})();")


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _table(table_id: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure(fig_id: str, png: Path, alt: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img id="{fig_id}" alt="{_esc(alt)}" src="data:image/png;base64,{data}">'


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` (a name cannot end it)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Figures:
    """The figures of one page: interactive where the plotly.js bundle is installed and the
    figure has its plotly form, else the PNG (with a note at the top of the page where
    plotly is missing), else nothing."""

    def __init__(self) -> None:
        self.js = plotly_js()
        self.plots: dict[str, dict[str, Any]] = {}
        self.static = False

    def figure(self, fig_id: str, heading: str, plot: dict[str, Any] | None,
               png: Path | None) -> str:
        if self.js is not None and plot is not None:
            self.plots[fig_id] = {**plot, "config": _PLOTLY_CONFIG}
            height = plot.get("layout", {}).get("height", 450)
            return (f'<div id="{fig_id}" class="plot" style="height:{int(height)}px" '
                    f'role="img" aria-label="{_esc(heading)}"></div>')
        if png is None or not png.is_file():
            return ""
        self.static = self.static or self.js is None
        return _figure(fig_id, png, heading)

    @property
    def interactive(self) -> bool:
        return self.js is not None

    def note(self) -> str:
        if not self.static:
            return ""
        return ('<p id="static-note" class="note static">Static figures: plotly is not '
                "installed, so the plots below are images without hover or zoom. For "
                f"interactive plots, <code>pip install 'shardsim[{EXTRA}]'</code> and write "
                "the report again.</p>")

    def scripts(self) -> str:
        if not self.plots or self.js is None:
            return ""
        js = re.sub(r"</(script)", r"<\\/\1", self.js, flags=re.I)
        return (f'<script id="plot-data" type="application/json">{_script_json(self.plots)}'
                f"</script><script>{js}</script><script>{_DRAW}</script>")


def _page(title: str, body: str, figs: _Figures | None = None) -> str:
    note, scripts = (figs.note(), figs.scripts()) if figs is not None else ("", "")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}'
            f"</title><style>{_STYLE}</style></head><body><h1>{_esc(title)}</h1>{note}{body}"
            f"{scripts}</body></html>\n")


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def _summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    mem = s["memory"]
    fits = "fits" if mem["fits"] else '<span class="bad">does not fit</span>'
    config = config_lines(s["config"]) if "config" in s else []
    return [("scenario", _esc(s["scenario"])), ("devices", str(s["devices"])),
            *((k, _esc(v)) for k, v in config),
            ("iteration time", f"{s['iteration_time_s']:.4f} s"),
            ("likely range", _esc(error_bar(s.get("uncertainty")))),
            ("throughput", f"{s['samples_per_s']:.3g} samples/s, {s['tokens_per_s']:.4g} "
                           "tokens/s"),
            ("TFLOP/s per device", f"{s['tflops_per_device']:.1f}"),
            ("MFU / HFU", f"{s['mfu']:.1%} / {s['hfu']:.1%}"),
            ("memory peak", f"{_gb(mem['peak_bytes'])} of {_gb(mem['capacity_bytes'])} "
                            f"({fits})"),
            ("allocator view", _esc(allocator_view(mem))),
            ("communication", f"{_gb(s['communication']['bytes_per_device'])} per device"),
            *((k, _esc(v)) for k, v in pace_rows(s)),
            ("simulation", f"{s['simulation']['events']} events"),
            *(("note", _esc(n)) for n in s.get("notes", ()))]


def _share_rows(parts: dict[str, float], total: float, fmt: Any) -> list[tuple[str, ...]]:
    return [(_esc(k), fmt(v), f"{v / total:.1%}" if total > 0 else "-")
            for k, v in parts.items()]


def run_page(s: dict[str, Any], figures: dict[str, Path],
             plots: dict[str, dict[str, Any]] | None = None) -> str:
    """The report of one iteration from its summary dict, the PNGs written beside it and
    the interactive figures (`report.interactive.run_figures`, keyed as the PNGs)."""
    figs = _Figures()
    plots = plots or {}
    t = s["iteration_time_s"]
    mem, comm = s["memory"], s["communication"]
    parts = [("Summary", _table("summary-table", ("metric", "value"), _summary_rows(s)))]
    sections = {
        "breakdown.png": _table("breakdown-table", ("part", "seconds", "share"),
                                _share_rows(s["breakdown_s"], t, lambda v: f"{v:.4f}")),
        "memory.png": _table("memory-table", ("category", "at the peak", "share"),
                             _share_rows(mem["by_category_bytes"], mem["peak_bytes"], _gb)),
        "timeline.png": '<p class="note">One lane per pipeline stage and stream kind '
                        "(compute, pipeline sends, data-parallel communication, offload "
                        "copies), whatever the number of devices: each stage is drawn from "
                        "its device that finishes last; consecutive tasks of one micro-batch "
                        "and phase are one bar." + (" Hover a bar for its task, micro-batch "
                                                    "and times; drag to zoom, double-click "
                                                    "to reset." if figs.interactive and
                                                    "timeline.png" in plots else "") +
                        "</p>",
    }
    for name, extra in sections.items():
        fig_id, heading = FIGURES[name]
        parts.append((heading, extra + figs.figure(fig_id, heading, plots.get(name),
                                                   figures.get(name))))
    comm_rows = _share_rows(comm["by_collective"], comm["bytes_per_device"], _gb)
    parts.append(("Communication per device", _table(
        "comm-table", ("collective", "bytes per iteration", "share"), comm_rows)))
    body = "".join(f"<section><h2>{_esc(h)}</h2>{content}</section>" for h, content in parts)
    return _page(f"shardsim report: {s['scenario']}", body, figs)


def sweep_page(rows: list[dict[str, Any]], keys: Sequence[str], figure: Path | None,
               title: str) -> str:
    """The comparison table of a sweep (every row, fastest first; failures last with their
    message) and its plot."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["iteration_time_s"])
    failed = [r for r in rows if r["status"] != "ok"]
    header = (*keys, "iteration s", "tokens/s", "MFU", "peak GB", "fits")
    table = [(*(_esc(str(r[k])) for k in keys), f"{r['iteration_time_s']:.4g}",
              f"{r['tokens_per_s']:.4g}", f"{r['mfu']:.1%}",
              f"{r['peak_memory_bytes'] / 1e9:.1f}",
              "yes" if r["fits"]
              else '<span class="bad">no</span>') for r in ok]
    body = f"<section><h2>Comparison</h2>{_table('summary-table', header, table)}</section>"
    figs = _Figures()
    shown = figs.figure("fig-sweep", "sweep plot", sweep_figure(rows, keys), figure)
    if shown:
        body += f"<section><h2>Swept keys against time and memory</h2>{shown}</section>"
    if failed:
        body += "<section><h2>Failed configurations</h2>" + _table(
            "failed-table", ("configuration", "error"),
            [(_esc(r["config"]), _esc(r["error"])) for r in failed]) + "</section>"
    return _page(title, body, figs)
