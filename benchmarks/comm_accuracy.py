"""Measured vs modelled all_reduce bus bandwidth on one 8 x A100 NVSwitch node.

Measurement: nccl-tests `all_reduce_perf -b 32k -e 16G -f 2 -g 8` from stas00/ml-engineering
network/README.md (validation/nccl_allreduce_a100.csv). Model: `comm_benchmark`, the function
the engine uses, on the a100-80gb profile. Prints one row per message size and the mean
absolute percentage error (MAPE) of busbw over all sizes and over the ranges we claim.

    python -m benchmarks.comm_accuracy [path/to/nccl_allreduce_a100.csv]   (from the repo root)

Two models are printed. `alpha_beta` is the ring closed form alone (`algorithm="ring"`): one
latency (3.13 us/step, from the 32 KiB time) and one bandwidth (the 16 GiB plateau); it is
exact at both ends and overestimates busbw by 25-97% between ~512 KiB and 128 MiB, where NCCL
pipelines chunks over a growing number of channels (MAPE 3.8% >= 256 MiB, 27% overall).
`engine` is what `run` and `shardsim comm` use: since the a100 profiles carry this very
measurement as `intra_node.allreduce_busbw_GBps`, inside a node it IS the measurement (0% by
construction, not a prediction); the alpha-beta column is the model's own accuracy, which is
what profiles without a measured curve get.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulator.cost.collectives import busbw_factor, collective_time_s, comm_benchmark
from simulator.cost.specs import GroupSpec
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
        n, size = int(rec.num_gpus), float(rec.message_bytes)
        res = comm_benchmark("all_reduce", size, n, n, hw)
        ring = collective_time_s("all_reduce", size, GroupSpec(n, 1, n), hw, "ring")
        ring_busbw = busbw_factor("all_reduce", n) * size / ring / 1e9
        rows.append({"bytes": int(rec.message_bytes), "measured_busbw_GBps": rec.busbw_GBps,
                     "engine_busbw_GBps": res["busbw_GBps"], "alpha_beta_busbw_GBps": ring_busbw,
                     "error_pct": 100 * (ring_busbw / rec.busbw_GBps - 1)})
    return pd.DataFrame(rows)


def main(argv: list[str]) -> None:
    table = compare(Path(argv[1]) if len(argv) > 1 else DEFAULT_CSV)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for label, (lo, hi) in RANGES.items():
        part = table[(table["bytes"] >= lo) & (table["bytes"] <= hi)]
        print(f"alpha-beta MAPE busbw, {label}: {part['error_pct'].abs().mean():.1f}% "
              f"({len(part)} sizes)")


if __name__ == "__main__":
    main(sys.argv)
