"""Metrics, tables, plots and the Chrome trace of a simulated iteration.

`summary` and `format_table` are cheap to import; `write_report` imports
matplotlib only when called (a `shardsim run --json` never pays for them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.report.summary import format_table, summary

__all__ = ["summary", "format_table", "write_report"]


def write_report(result: Any, out_dir: str | Path) -> list[Path]:
    """Write summary.csv, summary.md, trace.json, timeline.png, breakdown.png, memory.png,
    report.html."""
    # imported when a report is written: matplotlib and plotly load only then
    from simulator.report.files import write_report as _write

    return _write(result, out_dir)
