"""`write_report(result, out_dir)`: summary.csv, summary.md, trace.json, timeline.png,
breakdown.png, memory.png and report.html (the summary with the same figures, interactive
where plotly's bundle is installed, else the PNGs inlined: report.html) in out_dir. The only
writer of files outside the CLI; matplotlib is imported here, when a report is
asked for, never on the simulation path.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from simulator.report.chrome import chrome_trace
from simulator.report.out_folder import replace_folder
from simulator.report.summary import format_table, summary

__all__ = ["write_report", "flatten", "REPORT_FILES"]


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


REPORT_FILES = ("summary.csv", "summary.md", "trace.json", "timeline.png", "breakdown.png",
                "memory.png", "report.html")


def write_report(result: Any, out_dir: str | Path) -> list[Path]:
    """Write the report files of a SimResult into out_dir (created if missing; replaced as
    a whole, so that a kill leaves the old report or the new one: out_folder); returns
    their paths. InputError when out_dir holds files that are not a report's."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_folder(out, REPORT_FILES, lambda folder: _write_files(result, folder))
    return [out / name for name in REPORT_FILES]


def _write_files(result: Any, out: Path) -> None:
    # imported when a report is written: matplotlib and plotly load only then
    from simulator.report.html import run_page
    from simulator.report.interactive import run_figures
    from simulator.report.plots import plot_breakdown, plot_memory, plot_timeline

    s = summary(result)
    paths = [out / n for n in REPORT_FILES]
    row = flatten(s)
    with paths[0].open("w", newline="") as fh:  # one row: the csv module, not pandas
        writer = csv.DictWriter(fh, fieldnames=list(row), lineterminator="\n")
        writer.writeheader()
        writer.writerow(row)
    paths[1].write_text(_markdown(s))
    with paths[2].open("w") as fh:
        json.dump(chrome_trace(result), fh, separators=(",", ":"))
    plot_timeline(result, paths[3])
    plot_breakdown(result, paths[4])
    plot_memory(result, paths[5])
    paths[6].write_text(run_page(s, {p.name: p for p in paths[3:6]}, run_figures(result)),
                        encoding="utf-8")
