"""The results table of a sweep: the final table, the summary and the plot of the swept keys
against iteration time and memory (the journal of rows is simulator.report.sweep_journal).

Layout of a sweep folder, besides the journal (sweep.json, .lock, rows/):
    sweep.parquet, sweep.csv  every row, sorted by index (rewritten at the end of each run)
    sweep.png             iteration time and peak memory against the swept keys
    report.html           the comparison table and the plot on one offline page
Each is written into a temporary file and renamed into place: a kill leaves the old file
or the new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.report.sweep_journal import atomic_write, read_rows, row_schema, writing

__all__ = ["plot_sweep", "write_final"]


def write_final(folder: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    """sweep.parquet and sweep.csv of every flushed row; returns the rows."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rows = read_rows(folder, keys)
    table = pa.Table.from_pylist(rows, schema=row_schema(keys))
    with writing(folder, "sweep.parquet"):
        atomic_write(folder / "sweep.parquet", lambda f: pq.write_table(table, f))
    with writing(folder, "sweep.csv"):
        atomic_write(folder / "sweep.csv", lambda f: pcsv.write_csv(table, f))
    return rows


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def plot_sweep(rows: list[dict[str, Any]], keys: Sequence[str], path: Path) -> None:
    """Iteration time (top) and peak memory (bottom) against the first swept key, one line
    per combination of the other keys (at most 12 lines); failed rows are left out."""
    from simulator.report.plots import _pyplot

    plt = _pyplot()
    x_key, rest = keys[0], keys[1:]
    ok = [r for r in rows if r["status"] == "ok"]
    numeric = all(_number(r[x_key]) is not None for r in ok)
    order = list(dict.fromkeys(r[x_key] for r in rows))
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        lines.setdefault(" ".join(f"{k}={r[k]}" for k in rest), []).append(r)
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for label, group in list(lines.items())[:12]:
        xs = [_number(r[x_key]) if numeric else order.index(r[x_key]) for r in group]
        ax_t.plot(xs, [r["iteration_time_s"] for r in group], "o-", label=label or None)
        ax_m.plot(xs, [r["peak_memory_bytes"] / 1e9 for r in group], "o-")
    if ok:
        ax_m.axhline(ok[0]["capacity_bytes"] / 1e9, color="k", linestyle="--",
                     label="capacity")
        ax_m.legend(loc="best", fontsize="small")
    if not numeric:
        ax_m.set_xticks(range(len(order)), order)
    ax_t.set_ylabel("iteration time (s)")
    ax_m.set_ylabel("peak memory (GB)")
    ax_m.set_xlabel(x_key)
    ax_t.set_title(f"sweep of {', '.join(keys)}: {len(ok)} of {len(rows)} configurations ran")
    if rest and lines:
        ax_t.legend(loc="best", fontsize="x-small")
    fig.tight_layout()
    try:
        with writing(path.parent, path.name):
            atomic_write(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    finally:
        plt.close(fig)
