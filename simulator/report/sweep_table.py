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

from simulator.report.sweep_journal import (
    ROW_METRICS,
    Columns,
    atomic_write,
    read_rows,
    row_schema,
    writing,
)

__all__ = ["ROW_METRICS", "plot_sweep", "write_final", "rows_frame"]

PANDAS_MISSING = ("a sweep as a DataFrame needs pandas, which a plain install of shardsim "
                  "leaves out: install the dev extra (pip install 'shardsim[dev]') or pandas "
                  "itself (pip install pandas); `simulator.api.sweep` gives the rows as "
                  "dicts without it")


def rows_frame(rows: list[dict[str, Any]], columns: Columns) -> Any:
    """The rows of a sweep as a pandas DataFrame indexed by configuration index, its
    columns typed as sweep.parquet's: each grid key int64, float64, bool or string (as
    `--set` reads every value of the key), `config`, `status` and `error` strings, the
    metrics float64 (NaN where the configuration failed) and `fits` pandas' nullable
    boolean (NA where it failed). ImportError naming the extra without pandas."""
    try:
        import pandas  # noqa: F401  (to_pandas needs it)
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=row_schema(columns))
    frame = table.to_pandas()
    frame["fits"] = frame["fits"].astype("boolean")
    return frame.set_index("index")


def write_final(folder: Path, columns: Columns) -> list[dict[str, Any]]:
    """sweep.parquet and sweep.csv of every flushed row; returns the rows."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rows = read_rows(folder, columns)
    table = pa.Table.from_pylist(rows, schema=row_schema(columns))
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


MAX_SERIES = 12  # lines a legend can still tell apart


def best_series(lines: dict[str, list[dict[str, Any]]]) -> tuple[list[str], str]:
    """The labels of the series to draw, and a note when some are left out: all of them up
    to MAX_SERIES, else the MAX_SERIES with the fastest iteration, in their grid order."""
    if len(lines) <= MAX_SERIES:
        return list(lines), ""
    fastest = sorted(lines, key=lambda k: min(r["iteration_time_s"] for r in lines[k]))
    kept = set(fastest[:MAX_SERIES])
    return ([k for k in lines if k in kept],
            f"; the {MAX_SERIES} fastest of {len(lines)} series shown (sweep.csv has all)")


def plot_sweep(rows: list[dict[str, Any]], keys: Sequence[str], path: Path) -> None:
    """Iteration time (top) and peak memory (bottom) against the first swept key, one line
    per combination of the other keys (the MAX_SERIES fastest where there are more, as the
    title says); failed rows are left out."""
    # imported when a report is written: matplotlib and plotly load only then
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
    shown, note = best_series(lines)
    for label in shown:
        group = lines[label]
        xs = [_number(r[x_key]) if numeric else order.index(r[x_key]) for r in group]
        ax_t.plot(xs, [r["iteration_time_s"] for r in group], "o-", label=label or None)
        ax_m.plot(xs, [r["peak_memory_bytes"] / 1e9 for r in group], "o-")
    if ok:
        ax_m.axhline(ok[0]["capacity_bytes"] / 1e9, color="k", linestyle="--",
                     label="capacity")
        ax_m.legend(loc="best", fontsize="small")
    if not numeric:
        ax_m.set_xticks(range(len(order)), [str(o) for o in order])
    ax_t.set_ylabel("iteration time (s)")
    ax_m.set_ylabel("peak memory (GB)")
    ax_m.set_xlabel(x_key)
    ax_t.set_title(f"sweep of {', '.join(keys)}: {len(ok)} of {len(rows)} configurations "
                   f"ran{note}", fontsize="medium")
    if rest and lines:
        ax_t.legend(loc="best", fontsize="x-small")
    fig.tight_layout()
    try:
        with writing(path.parent, path.name):
            atomic_write(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    finally:
        plt.close(fig)
