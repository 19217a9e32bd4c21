"""Speed benchmark: `verify` time against data-parallel devices (issue 13).

The tiny transformer of scenarios/tiny-cpu.yaml, data parallel on 16 to 2048 numpy devices
(tensor=1, pipeline=1, one sequence per device and micro-batch), verified in-process. Prints
the wall time per device count, the growth exponent between successive counts
(log(t2/t1) / log(n2/n1): 1 is linear, n log n shows as slightly above 1), the process's
CPU time (on a shared machine the wall time also counts other processes' turns), and how the
time splits between the sharded run on the n devices (`sharded_s`) and the single-device
reference runs it is compared with (`one_dev_s`: the whole global batch, and its first
micro-batch). The reference computes as much as all devices together, so it grows linearly
with n too and bounds how fast verify can be.

Target (issue 13): 1024 devices in <= 10 s, growth no worse than n log n. The last lines
fit the growth exponent by least squares over all counts (wall and CPU time) next to the
exponent n log n itself fits over the same counts. The machine is shared: each row shows
the 1-minute load average when it started; `cpu_s` (user + system time of this process)
is the figure a loaded machine distorts least. Transformers are verified in float64
(numeric.cases) on one BLAS thread.

What 10 s at 1024 devices asks: each device runs 2 micro-batches of 32 tokens through a
model of about 114k multiply-adds per token (2 layers of hidden 64, FFN 256, 4 heads,
vocabulary 128), forward and backward (3x the forward), and the single-device reference
computes the same again plus the first micro-batch's forward: about 95 MFLOP of matrix
products per device, 97 GFLOP at 1024 devices. This machine's float64 GEMM on one thread
runs at about 15 GFLOP/s (numpy matmul of 65536x64 by 64x256, idle), so the products
alone take about 6.5 s before any elementwise pass, collective or comparison; the
elementwise kernels move several GB more. Run:

    python benchmarks/verify_speed.py [--min N] [--max N]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator.numeric.verify import verify_scenario  # noqa: E402
from simulator.scenario import parse_scenario  # noqa: E402
from simulator.yamlio import read_yaml_file  # noqa: E402


def scenario(devices: int):
    data = read_yaml_file(REPO / "scenarios" / "tiny-cpu.yaml")
    sets = [f"cluster.nodes={devices}", "cluster.devices_per_node=1",
            f"parallel.data={devices}", "parallel.tensor=1", "parallel.pipeline=1",
            "training.micro_batch_size=1", f"training.global_batch_size={2 * devices}"]
    return parse_scenario(data, f"tiny-cpu dp={devices}", sets)


def _children_cpu() -> float:
    """User + system seconds of this process's finished children (the forked reference)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return (sum((a - mx) * (b - my) for a, b in zip(lx, ly))
            / sum((a - mx) ** 2 for a in lx))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=2048, help="largest device count (power of 2)")
    ap.add_argument("--min", type=int, default=16, help="smallest device count (power of 2)")
    args = ap.parse_args()
    print(f"{'devices':>8} {'verify_s':>9} {'growth':>7} {'cpu_s':>7} {'child_s':>8} "
          f"{'sharded_s':>10} {'one_dev_s':>10} {'wait_s':>7} {'load':>5}  ok")
    rows: list[tuple[int, float, float]] = []
    n = args.min
    while n <= args.max:
        load = os.getloadavg()[0]
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        res = verify_scenario(scenario(n))
        dt, own, child = (time.perf_counter() - t0, time.process_time() - c0,
                          _children_cpu() - k0)
        cpu = own + child
        growth = (f"{math.log(dt / rows[-1][1]) / math.log(n / rows[-1][0]):7.2f}"
                  if rows else " " * 7)
        ph = res.phases_s
        print(f"{n:>8} {dt:>9.2f} {growth} {cpu:>7.2f} {child:>8.2f} {ph['sharded']:>10.2f} "
              f"{ph['reference']:>10.2f} {ph['waited']:>7.2f} {load:>5.1f}  {res.ok}",
              flush=True)
        rows.append((n, dt, cpu))
        n *= 2
    if len(rows) > 1:
        ns = [float(r[0]) for r in rows]
        print(f"fitted growth exponent over {rows[0][0]}..{rows[-1][0]} devices: "
              f"wall {_slope(ns, [r[1] for r in rows]):.2f}, "
              f"cpu {_slope(ns, [r[2] for r in rows]):.2f}; "
              f"n log n fits {_slope(ns, [x * math.log(x) for x in ns]):.2f}")


if __name__ == "__main__":
    main()
