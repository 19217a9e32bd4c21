"""The results table of a sweep: a Parquet journal that survives a kill, the final table,
the summary and the plot of the swept keys against iteration time and memory.

Layout of a sweep folder:
    sweep.json            what was swept (a resumed sweep must match it)
    rows/part-NNNNNN.parquet  rows as they finish, each file written whole then renamed
                          (os.replace is atomic), so a kill loses at most the rows not yet
                          flushed, which `--resume` evaluates again: nothing lost, nothing twice
    sweep.parquet, sweep.csv  every row, sorted by index (rewritten at the end of each run)
    sweep.png             iteration time and peak memory against the swept keys
    report.html           the comparison table and the plot on one offline page
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.errors import InputError

__all__ = ["ROW_METRICS", "SweepJournal", "row_schema", "read_rows", "plot_sweep",
           "write_final"]

# Metric columns of a row (floats; None when the configuration failed), after `index`,
# `config`, one column per grid key, `status` and `error`.
ROW_METRICS: tuple[str, ...] = (
    "iteration_time_s", "samples_per_s", "tokens_per_s", "tflops_per_device", "mfu",
    "peak_memory_bytes", "capacity_bytes", "compute_s", "recompute_s", "comm_exposed_s",
    "bubble_s", "offload_exposed_s", "optimizer_s", "comm_bytes_per_device")


def row_schema(keys: Sequence[str]) -> Any:
    """The Arrow schema of a row: fixed, so that every part file concatenates."""
    import pyarrow as pa

    fields = [pa.field("index", pa.int64()), pa.field("config", pa.string())]
    fields += [pa.field(k, pa.string()) for k in keys]
    fields += [pa.field("status", pa.string()), pa.field("error", pa.string())]
    fields += [pa.field(m, pa.float64()) for m in ROW_METRICS]
    return pa.schema(fields)


def read_rows(folder: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    """Every row flushed to `folder/rows`, sorted by index."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for part in sorted((folder / "rows").glob("part-*.parquet")):
        rows += pq.read_table(part, schema=row_schema(keys)).to_pylist()
    return sorted(rows, key=lambda r: r["index"])


class SweepJournal:
    """Appends rows to `folder/rows/` in part files: the first row at once (a killed sweep
    has kept something from its first second), then every `flush_s` seconds and on close.
    Opening checks the folder against the sweep's manifest."""

    def __init__(self, folder: Path, manifest: dict[str, Any], keys: Sequence[str],
                 resume: bool, flush_s: float = 0.5) -> None:
        self.folder, self.keys, self.flush_s = folder, tuple(keys), flush_s
        self.pending: list[dict[str, Any]] = []
        self.last = -math.inf  # the first row is written as soon as it is done
        self.done = self._open(manifest, resume)
        self.parts = len(list((folder / "rows").glob("part-*.parquet")))

    def _open(self, manifest: dict[str, Any], resume: bool) -> set[int]:
        mfile = self.folder / "sweep.json"
        if mfile.is_file():
            if not resume:
                raise InputError("--out", str(self.folder), "the folder already holds a sweep; "
                                 "pass --resume to continue it, or choose another --out")
            if json.loads(mfile.read_text()) != manifest:
                raise InputError("--resume", str(self.folder), "the folder holds a different "
                                 "sweep (scenario, grid, --set or fidelity differ); allowed: "
                                 f"the sweep of {mfile}")
        (self.folder / "rows").mkdir(parents=True, exist_ok=True)
        mfile.write_text(json.dumps(manifest, indent=2) + "\n")
        return {r["index"] for r in read_rows(self.folder, self.keys)}

    def add(self, row: dict[str, Any]) -> None:
        self.pending.append(row)
        if time.monotonic() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.last = time.monotonic()
        if not self.pending:
            return
        table = pa.Table.from_pylist(self.pending, schema=row_schema(self.keys))
        final = self.folder / "rows" / f"part-{self.parts:06d}.parquet"
        tmp = final.with_name(f".tmp-{os.getpid()}-{final.name}")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        self.parts += 1
        self.done.update(r["index"] for r in self.pending)
        self.pending = []


def write_final(folder: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    """sweep.parquet and sweep.csv of every flushed row; returns the rows."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rows = read_rows(folder, keys)
    table = pa.Table.from_pylist(rows, schema=row_schema(keys))
    pq.write_table(table, folder / "sweep.parquet")
    pcsv.write_csv(table, folder / "sweep.csv")
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
