"""Measured vs modelled all_reduce bus bandwidth on one 8 x A100 NVSwitch node.

Measurement: nccl-tests `all_reduce_perf -b 32k -e 16G -f 2 -g 8` from stas00/ml-engineering
network/README.md (validation/nccl_allreduce_a100.csv). Model: `comm_benchmark`, the function
the engine uses, on the a100-80gb profile. Prints one row per message size and the mean
absolute percentage error (MAPE) of busbw over all sizes and over the ranges we claim.

    python -m benchmarks.comm_accuracy [path/to/nccl_allreduce_a100.csv]   (from the repo root)

Result (a100-80gb profile): busbw MAPE 3.8% for messages >= 256 MiB, 14% for <= 256 KiB, 27%
over all 20 sizes. The alpha-beta ring has one latency (3.13 us/step, from the 32 KiB time)
and one bandwidth (the 16 GiB plateau), so it is exact at both ends and overestimates busbw
between ~512 KiB and 128 MiB, where NCCL switches protocols (LL / LL128 / Simple) and
channel counts; we claim accuracy for bandwidth-bound messages (>= 256 MiB), which is where
gradient buckets and large tensor-parallel all-reduces live.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulator.cost.collectives import comm_benchmark
from simulator.hardware import load_profile

DEFAULT_CSV = Path("/work/shared/validation/nccl_allreduce_a100.csv")
RANGES = {"all sizes (32 KiB - 16 GiB)": (0, float("inf")),
          "latency-bound (<= 256 KiB)": (0, 256 * 1024),
          "bandwidth-bound (>= 256 MiB)": (256 * 2**20, float("inf"))}


def compare(csv: Path) -> pd.DataFrame:
    """One row per measured size: measured and modelled busbw (GB/s) and the error (%)."""
    hw = load_profile("a100-80gb")
    measured = pd.read_csv(csv)
    rows = []
    for rec in measured.itertuples():
        res = comm_benchmark("all_reduce", float(rec.message_bytes), int(rec.num_gpus),
                             int(rec.num_gpus), hw)
        rows.append({"bytes": int(rec.message_bytes), "measured_busbw_GBps": rec.busbw_GBps,
                     "model_busbw_GBps": res["busbw_GBps"], "model_time_us": res["time_s"] * 1e6,
                     "error_pct": 100 * (res["busbw_GBps"] / rec.busbw_GBps - 1)})
    return pd.DataFrame(rows)


def main(argv: list[str]) -> None:
    table = compare(Path(argv[1]) if len(argv) > 1 else DEFAULT_CSV)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for label, (lo, hi) in RANGES.items():
        part = table[(table["bytes"] >= lo) & (table["bytes"] <= hi)]
        print(f"MAPE busbw, {label}: {part['error_pct'].abs().mean():.1f}% ({len(part)} sizes)")


if __name__ == "__main__":
    main(sys.argv)
