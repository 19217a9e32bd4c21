"""Predicted vs published peak memory per device (issue 24 item 1's memory validation set).

Each row of benchmarks/data/memory/memory_runs.csv is one published measured peak that names its
full configuration: a base case under benchmarks/data/memory/ (its header cites the source
and the counter) plus `--set` overrides (`;`-separated) for the row. The counter decides
what it is compared with:

- `max_memory_reserved` (torch's caching allocator, reserved segments): `reserved_peak_bytes`
  where shardsim models it, else `allocated_peak_bytes` (said in the `compared` column: the
  allocator's caching and fragmentation are then part of the error);
- `max_memory_allocated`: `allocated_peak_bytes` (tensors only);
- `nvidia-smi`: `peak_bytes` (adds the CUDA context and the collective library's buffers).

It prints per row the measured and predicted GiB, the signed error `100 * (predicted /
measured - 1)`, what the row uses that shardsim does not model, then per source the median
and worst absolute error (issue 24's target: median <= 3%, none worse than 8%). It measures
and never asserts: the exit status is always 0.

    python -m benchmarks.memory_accuracy [--json]      (repo root)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["MemRow", "COMPARED", "load_rows", "evaluate", "by_source", "main"]

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "memory" / "memory_runs.csv"
CASES = ROOT / "data" / "memory"
GIB = 2**30
# counter -> the run --json memory fields it is compared with, first modelled one wins
COMPARED = {"max_memory_reserved": ("reserved_peak_bytes", "allocated_peak_bytes"),
            "max_memory_allocated": ("allocated_peak_bytes",),
            "nvidia-smi": ("peak_bytes",)}


@dataclass(frozen=True)
class MemRow:
    """One published peak next to the prediction."""

    id: str
    source: str
    counter: str
    compared: str
    measured_gib: float
    predicted_gib: float
    error_pct: float
    not_modelled: str


def load_rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, r in enumerate(rows, start=2):
        if r["counter"] not in COMPARED:
            raise ValueError(f"{path}:{i}: counter {r['counter']!r} (expected one of "
                             f"{', '.join(COMPARED)})")
    return rows


def _memory(scenario: str, sets: str) -> dict[str, object]:
    from simulator import load_scenario, simulate
    from simulator.report import summary

    overrides = [s for s in sets.split(";") if s]
    return summary(simulate(load_scenario(str(CASES / f"{scenario}.yaml"), overrides)))[
        "memory"]


def evaluate(row: dict[str, str]) -> MemRow:
    """Simulate one row and compare the field its counter names."""
    memory = _memory(row["scenario"], row["sets"])
    field = next(f for f in COMPARED[row["counter"]] if memory.get(f) is not None)
    predicted = float(memory[field]) / GIB  # type: ignore[arg-type]
    measured = float(row["measured_gib"])
    return MemRow(row["id"], row["source"], row["counter"], field, measured, predicted,
                  100.0 * (predicted / measured - 1.0), row["not_modelled"])


def by_source(rows: Sequence[MemRow]) -> dict[str, dict[str, float]]:
    """Per source: runs, median and worst absolute error in percent."""
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r.source, []).append(abs(r.error_pct))
    return {s: {"runs": len(v), "median_abs_pct": statistics.median(v),
                "worst_abs_pct": max(v)} for s, v in sorted(out.items())}


def _print(rows: Sequence[MemRow]) -> None:
    head = (f"{'id':<24} {'counter':<21} {'compared with':<21} {'measured GiB':>12} "
            f"{'pred GiB':>9} {'error %':>8}  not modelled")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.id:<24} {r.counter:<21} {r.compared:<21} {r.measured_gib:>12.1f} "
              f"{r.predicted_gib:>9.1f} {r.error_pct:>+8.1f}  {r.not_modelled or '-'}")
    print("\nper source (target: median <= 3%, none worse than 8%):")
    for name, s in by_source(rows).items():
        print(f"  {name}: median {s['median_abs_pct']:.1f}%, worst {s['worst_abs_pct']:.1f}% "
              f"over {s['runs']:.0f} runs")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    rows = [evaluate(r) for r in load_rows()]
    if args.json:
        print(json.dumps({"runs": [asdict(r) for r in rows], "by_source": by_source(rows)}))
    else:
        _print(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
