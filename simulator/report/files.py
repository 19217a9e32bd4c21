"""`write_report(result, out_dir)`: summary.csv, summary.md, trace.json, timeline.png,
breakdown.png, memory.png and report.html (the page that inlines them) in out_dir. The only
writer of files outside the CLI; pandas and matplotlib are imported here, when a report is
asked for, never on the simulation path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.report.chrome import chrome_trace
from simulator.report.html import run_page
from simulator.report.plots import plot_breakdown, plot_memory, plot_timeline
from simulator.report.summary import format_table, summary

__all__ = ["write_report", "flatten"]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'memory': {'fits': True}} -> {'memory.fits': True}."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _markdown(s: dict[str, Any]) -> str:
    lines = [f"# {s['scenario']}", "", "```", format_table(s), "```", "",
             "| key | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in flatten(s).items()]
    return "\n".join(lines) + "\n"


def write_report(result: Any, out_dir: str | Path) -> list[Path]:
    """Write the report files of a SimResult into out_dir (created if missing); returns
    their paths."""
    import pandas as pd


    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = summary(result)
    paths = [out / n for n in ("summary.csv", "summary.md", "trace.json", "timeline.png",
                               "breakdown.png", "memory.png")]
    pd.DataFrame([flatten(s)]).to_csv(paths[0], index=False)
    paths[1].write_text(_markdown(s))
    with paths[2].open("w") as fh:
        json.dump(chrome_trace(result), fh, separators=(",", ":"))
    plot_timeline(result, paths[3])
    plot_breakdown(result, paths[4])
    plot_memory(result, paths[5])

    page = out / "report.html"
    page.write_text(run_page(s, {p.name: p for p in paths[3:6]}), encoding="utf-8")
    return [*paths, page]
