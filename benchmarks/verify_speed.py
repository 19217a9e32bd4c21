"""Speed benchmark: `verify` time against data-parallel devices (issue 13).

The tiny transformer of scenarios/tiny-cpu.yaml, data parallel on 16 to 2048 numpy devices
(tensor=1, pipeline=1, one sequence per device and micro-batch, 2 micro-batches), verified
in-process. Prints the wall time per device count, the growth exponent between successive
counts (log(t2/t1) / log(n2/n1): 1 is linear, n log n shows as slightly above 1), the CPU
seconds of this process and of its forked child together (`cpu_s`) and the child's alone
(`child_s`), and how the time splits: `sharded_s`, this process's run of the n devices
(with the first micro-batch's single-device forward, computed op by op beside it and
compared at once, numeric.reference.Streamed); `one_dev_s`, the single-device reference of
the whole global batch, which runs in a forked child on the second CPU meanwhile
(numeric.reference.Beside; `ref` says where it ran: `here`, in this process after the
sharded run, where fork is missing or no second CPU is free when verify starts, since a
child faults in memory of its own); `wait_s`, how long this process then waited for the
child (or ran the reference). The reference
computes as much as all devices together, so it grows linearly with n too.

Target (issue 13): 1024 devices in <= 10 s, growth no worse than n log n. The last lines
fit the growth exponent by least squares over all counts (wall and CPU time) next to the
exponent n log n itself fits over the same counts. The machine is shared: each row shows
the 1-minute load average when it started; CPU seconds are the figure a loaded machine
distorts least, and on an idle machine the wall time is about the larger of the two
processes' CPU seconds (this process's: `cpu_s - child_s`). Transformers are verified in
float64 (models.cases) on one BLAS thread; nothing is sampled: every device, token,
tensor and element is computed and compared as before.

Where the time goes. Each device runs 2 micro-batches of 32 tokens through a model of
about 114k multiply-adds per token (2 layers of hidden 64, FFN 256, 4 heads, vocabulary
128), forward and backward, and the references compute the same again plus the first
micro-batch's forward: about 97 GFLOP of matrix products at 1024 devices, which this
machine's float64 GEMM on one thread does at 29-37 GFLOP/s (numpy matmul of 32768x64 by
64x256, load ~1), about 3 s. Memory costs as much: this virtual machine faults each first
touched 4 KiB page in at 2-6 us of system time plus the host's own work (numeric.heap), so
verify holds as little as it can: each op's kept inputs and output are freed after its
backward and values the backward reads only the shape of are freed in the forward
(numeric.kept); the first micro-batch's outputs are compared as computed, not kept;
dropout keep-masks are kept as bytes; each parameter's gradient is accumulated as soon as
it is complete; the data-parallel all-reduce is one numpy reduction over the kept stack.

Measured (the base is commit 922f039, run in the same minutes; the machine was shared
with other sessions' test suites; "idle": no other process runnable when the run started,
the 1-minute load average still counting the minutes before):

    1024, idle (03:22 UTC, load avg 2.5-2.8):
      base:                   10.82 s wall, 10.80 CPU s
      this, forked reference:  6.05 s wall, 10.32 CPU s (child 4.54, this process 5.78)
    1024, busy:
      base, load 0.8 (02:16, first run): 32.7 s wall, 22.4 CPU s, 1.58 M page faults,
                                         6.1 GB peak
      base, load 3.8 (03:17):            10.97 s wall, 10.81 CPU s
      this, load 3.9 (03:17), here:       8.79 s wall,  8.62 CPU s (0.65 M faults)
      this, load 5.2-5.5 (03:04), forked: 16.0 s wall, 10.4 CPU s (child 4.5; 0.59 M faults
                                          and 2.4 GB peak here, 0.61 M and 2.4 GB in the
                                          child; base then 17.4 s, 11.1 CPU s)
    whole curve, load 3.5-3.7 (03:17), reference here (wall s / CPU s):
      16: 0.22/0.21    32: 0.32/0.32    64: 0.60/0.60   128: 1.16/1.15
     256: 2.31/2.30   512: 4.64/4.58  1024: 9.02/8.85  2048: 17.67/17.40
    fitted growth exponent 16..2048: wall 0.93, CPU 0.93 (n log n fits 1.20)

Run:

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

from simulator.config.scenario import parse_scenario  # noqa: E402
from simulator.config.yamlio import read_yaml_file  # noqa: E402
from simulator.simulation.verify import verify_scenario  # noqa: E402


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
          f"{'sharded_s':>10} {'one_dev_s':>10} {'wait_s':>7} {'load':>5} {'ref':>5}  ok")
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
              f"{ph['reference']:>10.2f} {ph['waited']:>7.2f} {load:>5.1f} "
              f"{'child' if ph['forked'] else 'here':>5}  {res.ok}",
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
