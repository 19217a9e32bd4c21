"""One self-contained HTML page per report: the figures inlined as base64 PNG data URIs, the
style inline, no script and no external resource, so `report.html` opens offline in any
browser and can be mailed as one file.

`run_page(summary, figures)` is the report of one simulated iteration: the summary table,
the time breakdown, the memory timeline, the per-stage timeline and the communication
table. `sweep_page(rows, keys, figure)` is the comparison table of a sweep and its plot.
Element ids (summary-table, breakdown-table, memory-table, comm-table, fig-*) are stable:
tests find them in a real browser.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.report.run_config import config_lines
from simulator.report.summary import error_bar, pace_rows

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
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _table(table_id: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure(fig_id: str, png: Path, alt: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img id="{fig_id}" alt="{_esc(alt)}" src="data:image/png;base64,{data}">'


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}'
            f"</title><style>{_STYLE}</style></head><body><h1>{_esc(title)}</h1>{body}"
            "</body></html>\n")


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
            ("communication", f"{_gb(s['communication']['bytes_per_device'])} per device"),
            *((k, _esc(v)) for k, v in pace_rows(s)),
            ("simulation", f"{s['simulation']['events']} events"),
            *(("note", _esc(n)) for n in s.get("notes", ()))]


def _share_rows(parts: dict[str, float], total: float, fmt: Any) -> list[tuple[str, ...]]:
    return [(_esc(k), fmt(v), f"{v / total:.1%}" if total > 0 else "-")
            for k, v in parts.items()]


def run_page(s: dict[str, Any], figures: dict[str, Path]) -> str:
    """The report of one iteration from its summary dict and the PNGs written beside it."""
    t = s["iteration_time_s"]
    mem, comm = s["memory"], s["communication"]
    parts = [("Summary", _table("summary-table", ("metric", "value"), _summary_rows(s)))]
    sections = {
        "breakdown.png": _table("breakdown-table", ("part", "seconds", "share"),
                                _share_rows(s["breakdown_s"], t, lambda v: f"{v:.4f}")),
        "memory.png": _table("memory-table", ("category", "at the peak", "share"),
                             _share_rows(mem["by_category_bytes"], mem["peak_bytes"], _gb)),
        "timeline.png": '<p class="note">One row per simulated device (one per pipeline '
                        "stage unless --fidelity full): compute (thick) and communication "
                        "(thin) streams.</p>",
    }
    for name, extra in sections.items():
        fig_id, heading = FIGURES[name]
        img = _figure(fig_id, figures[name], heading) if name in figures else ""
        parts.append((heading, extra + img))
    comm_rows = _share_rows(comm["by_collective"], comm["bytes_per_device"], _gb)
    parts.append(("Communication per device", _table(
        "comm-table", ("collective", "bytes per iteration", "share"), comm_rows)))
    body = "".join(f"<section><h2>{_esc(h)}</h2>{content}</section>" for h, content in parts)
    return _page(f"shardsim report: {s['scenario']}", body)


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
    if figure is not None and figure.is_file():
        body += (f"<section><h2>Swept keys against time and memory</h2>"
                 f"{_figure('fig-sweep', figure, 'sweep plot')}</section>")
    if failed:
        body += "<section><h2>Failed configurations</h2>" + _table(
            "failed-table", ("configuration", "error"),
            [(_esc(r["config"]), _esc(r["error"])) for r in failed]) + "</section>"
    return _page(title, body)
