"""`shardsim calibrate` on published measurements (docs/calibrate.md; issue 27).

Calibrates a profile from the three nccl-tests logs of tests/data/calibrate/ (4 x H100 of one
HGX node: all_reduce, all_gather, reduce_scatter from 8 B to 8 GiB) and the H200 GEMM sweep,
on the h100-sxm base, writes it to a temporary folder, and prints the command's own output,
then `shardsim comm` on the written profile beside the logged busbw for a few sizes of each
log, and the median and worst error of `comm` over every logged point on the base and on the
written profile.

    python -m benchmarks.calibrate_example          (from the repository root)
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.config.measurements import read_nccl_log

DATA = "tests/data/calibrate"
LOGS = [f"{DATA}/h100_4gpu_{c}.txt" for c in ("all_reduce", "all_gather", "reduce_scatter")]
SHOWN = (32 << 10, 1 << 20, 64 << 20, 8 << 30)


def _errors(hardware: str) -> list[float]:
    out = []
    for log in map(read_nccl_log, LOGS):
        for p in log.points:
            res = api.comm(log.collective, p.nbytes, log.ranks, hardware, 4)
            out.append(100 * abs(res["algbw_GBps"] / (p.nbytes / p.time_us / 1e3) - 1))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "h100-calibrated.yaml"
        args = ["calibrate", *LOGS, "--gemm", f"{DATA}/h200_gemm_sweep.csv", "--base",
                "h100-sxm", "--out", str(out)]
        result = CliRunner().invoke(app, args)
        shown = " ".join(a if a != str(out) else "h100-calibrated.yaml" for a in args)
        print(f"# from the repository root:\n# shardsim {shown}")
        print(result.stdout.replace(str(out), "h100-calibrated.yaml").rstrip())
        print(f"\n{'log':<30} {'bytes':>11} {'logged busbw':>12} {'comm busbw':>11}")
        for log in map(read_nccl_log, LOGS):
            for p in (p for p in log.points if p.nbytes in SHOWN):
                res = api.comm(log.collective, p.nbytes, log.ranks, str(out), 4)
                print(f"{Path(log.source).name:<30} {p.nbytes:>11} {p.busbw_GBps:>12.2f} "
                      f"{res['busbw_GBps']:>11.2f}")
        print()
        for label, hardware in (("h100-sxm (base)", "h100-sxm"), ("written", str(out))):
            errors = _errors(hardware)
            print(f"comm on {label:<16}: median error {statistics.median(errors):5.1f}%, "
                  f"worst {max(errors):6.1f}% over {len(errors)} logged points")


if __name__ == "__main__":
    main()
