"""Measured vs modelled collective bus bandwidth, over every public nccl-tests figure we cite.

The measurements are the CSV files of benchmarks/data/ (each starts with comment lines that give
its source, the system, the command and how each figure was read): one 8 x A100 node
(stas00/ml-engineering), 8 x H100 / H200 nodes with and without NVLink SHARP (NVIDIA/nccl #1455,
#2140, nccl-tests #212, #272), 2-6 of the 8 H100 of one node across sizes, algorithms and
protocols (waynehacking8/nccl-collectives-bench), 8 x B300 (nccl #2140, priced on b300-sxm), two
nodes of 8 x H100 over 8 x 200 Gb/s GPUDirect-TCPXO (GCP A3 Mega) and over 8 x 400 Gb/s
InfiniBand (Nebius). Each row names the hardware profile, its `--set`-style overrides, the
collective, the ranks, the algorithm (and, where the file has the column, the protocol) the
measurement forced (`auto` where NCCL chose), where given the host's launch floor of the harness
(one thread driving several GPUs launches no faster than that; the model's time is raised to it)
and whether the profile's own figure was read from that row (`calibration: yes`, not a
prediction).

The model is `collective_choice`, the function `run` and `shardsim comm` use. For every row the
script prints the measured and modelled busbw, the algorithm the model priced and the error;
then the mean absolute error (MAPE) per file and over all predictions, and the median and worst
error of every predicted point from 1 MiB up (issue 24's target: 10% and 20%). For the A100
node, which the a100 profiles carry as a measured curve (so 0% by construction), it also prints
the model alone (the profile without its curve), which is what profiles without a measured curve
get.

    python -m benchmarks.comm_accuracy [CSV ...]          (from the repository root)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulator.config.hardware import load_profile
from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.collectives import busbw_factor, collective_choice
from simulator.cost.specs import GroupSpec

DATA = Path(__file__).resolve().parent / "data"


def _profile(name: str, overrides: str, curve: bool = True) -> HardwareProfile:
    hw = load_profile(name, [o for o in overrides.split(";") if o])
    if curve:
        return hw
    intra = hw.intra_node.model_copy(update={"allreduce_busbw_GBps": None})
    return hw.model_copy(update={"intra_node": intra})


def _busbw(rec: object, hw: HardwareProfile) -> tuple[str, float]:
    """(algorithm/protocol, busbw GB/s) the model gives for one measured row."""
    n, per_node, size = int(rec.num_gpus), int(rec.devices_per_node), float(rec.message_bytes)
    group = GroupSpec(size=n, stride=1, devices_per_node=min(per_node, n))
    protocol = str(getattr(rec, "protocol", "auto") or "auto")
    choice = collective_choice(rec.collective, size, group, hw, rec.algorithm, protocol)
    floor = getattr(rec, "host_floor_us", "")
    seconds = max(choice.time_s, float(floor) * 1e-6) if floor not in ("", None) else \
        choice.time_s
    busbw = busbw_factor(rec.collective, n) * size / seconds / 1e9
    return f"{choice.algorithm}/{choice.protocol}", busbw


def compare(csv: Path) -> pd.DataFrame:
    """One row per measurement: measured and modelled busbw (GB/s), the error (%)."""
    table = pd.read_csv(csv, comment="#", keep_default_na=False)
    rows = []
    for rec in table.itertuples():
        hw = _profile(rec.profile, str(rec.overrides))
        priced, model = _busbw(rec, hw)
        asked = rec.algorithm
        if str(getattr(rec, "protocol", "auto") or "auto") != "auto":
            asked += f"/{rec.protocol}"
        row = {"gpus": rec.num_gpus, "bytes": int(rec.message_bytes),
               "asked": asked, "priced": priced,
               "measured_busbw": float(rec.busbw_GBps), "model_busbw": model,
               "error_pct": 100 * (model / float(rec.busbw_GBps) - 1),
               "calibration": rec.calibration == "yes"}
        if hw.intra_node.allreduce_busbw_GBps:
            _, alpha_beta = _busbw(rec, _profile(rec.profile, str(rec.overrides), False))
            row["alpha_beta_busbw"] = alpha_beta
            row["alpha_beta_error_pct"] = 100 * (alpha_beta / float(rec.busbw_GBps) - 1)
        rows.append(row)
    return pd.DataFrame(rows)


def _summary(label: str, table: pd.DataFrame) -> str:
    predicted = table[~table["calibration"]]
    line = f"{label}: "
    if len(predicted):
        line += (f"MAPE busbw {predicted['error_pct'].abs().mean():.1f}% over "
                 f"{len(predicted)} predicted points")
    else:
        line += "no predicted points"
    if "alpha_beta_error_pct" in table:
        line += (f"; alpha-beta alone {table['alpha_beta_error_pct'].abs().mean():.1f}% over "
                 f"{len(table)} (>= 256 MiB: "
                 f"{table[table['bytes'] >= 2**28]['alpha_beta_error_pct'].abs().mean():.1f}%)")
    calibrated = int(table["calibration"].sum())
    return line + (f"; {calibrated} calibration points (not predictions)" if calibrated else "")


def _spread(label: str, table: pd.DataFrame) -> str:
    """Median and worst absolute error of the predicted points of `table`."""
    predicted = table[~table["calibration"]]["error_pct"].abs()
    if not len(predicted):
        return f"{label}: no predicted points"
    return (f"{label}: median {predicted.median():.1f}%, worst {predicted.max():.1f}% over "
            f"{len(predicted)} predicted points (target: median <= 10%, worst <= 20%)")


def main(argv: list[str]) -> None:
    files = [Path(a) for a in argv[1:]] or sorted(DATA.glob("*.csv"))
    tables = []
    for csv in files:
        table = compare(csv)
        table["file"] = csv.name
        tables.append(table)
        print(f"\n== {csv.name}")
        print(table.drop(columns=["file"]).to_string(index=False,
                                                     float_format=lambda x: f"{x:.2f}"))
        print(_summary(csv.name, table))
    everything = pd.concat(tables, ignore_index=True)
    everything = everything.drop(columns=[c for c in everything if c.startswith("alpha_beta")])
    print()
    for label, (lo, hi) in RANGES.items():
        part = everything[(everything["bytes"] >= lo) & (everything["bytes"] < hi)]
        print(_summary(f"all files, {label}", part))
    from_1mib = everything[everything["bytes"] >= 2**20]
    print(_spread("from 1 MiB up, all files", from_1mib))
    for name in sorted(set(from_1mib["file"])):
        print(_spread(f"  {name}", from_1mib[from_1mib["file"] == name]))
    print(_spread(f"from 1 MiB up, without {TCPXO} (TCP offload, not the profile's InfiniBand)",
                  from_1mib[from_1mib["file"] != TCPXO]))


RANGES = {"all sizes": (0, float("inf")), "< 32 MiB": (0, 2**25),
          "32 MiB - 1 GiB": (2**25, 2**30), ">= 1 GiB": (2**30, float("inf"))}
TCPXO = "nccl_allreduce_h100_a3mega_2node.csv"


if __name__ == "__main__":
    main(sys.argv)
