"""Sweep throughput: configurations per second for a 200-configuration sweep of
gpt3-175b-1024-a100 on the local process pool (issue 11 target: >= 20 per second on 2
cores), and where one configuration's time goes (parse, lowering, engine, metrics) in a warm
worker. It measures and never asserts: the exit status is always 0.

    python -m benchmarks.sweep_speed [--workers N]        (from the repo root)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import tempfile
import time
from pathlib import Path

from simulator.config.resources import resolve_yaml
from simulator.planner.sweep import sweep_into
from simulator.planner.sweep_eval import evaluate
from simulator.planner.sweep_exec import make_executor
from simulator.planner.sweep_spec import SweepSpec, expand, parse_grid

SCENARIO = "gpt3-175b-1024-a100"
# 5 x 5 x 2 x 2 x 2 = 200 configurations, all of 1024 devices (global batch 1536, data 8).
GRID = ("training.micro_batch_size=1,2,3,4,6", "parallel.comm_fusion.bucket_mb=10,25,50,100,200",
        "parallel.overlap.grad_reduce=true,false", "parallel.schedule=gpipe,1f1b",
        "parallel.sequence_parallel=false,true")
STAGES = {"parse + validate": ("scenario/load.py", "parse_scenario"),
          "program": ("schedule/model_program.py", "transformer_program"),
          "lowering": ("schedule/lowering.py", "lower"),
          "engine (SimPy)": ("engine/core.py", "run"),
          "steady-state check": ("engine/steady.py", "splice"),
          "metrics": ("simulator/simulation/simulate.py", "_measure"),
          "extension": ("simulator/simulation/simulate.py", "_extend")}


def _spec() -> SweepSpec:
    path = resolve_yaml(SCENARIO, "scenarios")
    return SweepSpec(str(path), f"scenarios/{SCENARIO}.yaml", parse_grid(GRID))


def _where(spec: SweepSpec, n: int = 10) -> None:
    """Profile n configurations in this process after a warm-up, by stage."""
    configs = expand(spec)
    evaluate(spec, configs[0])
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    for c in configs[1:n + 1]:
        evaluate(spec, c)
    prof.disable()
    wall = (time.perf_counter() - start) / n
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    print(f"one configuration, warm, in-process: {wall * 1e3:.0f} ms (profiled)")
    for label, (file, func) in STAGES.items():
        cum = sum(v[3] for k, v in stats.items() if k[0].endswith(file) and k[2] == func)
        print(f"  {label:<18} {cum / n * 1e3:7.1f} ms  ({cum / total:5.1%} of profiled time)"
              if total else "")


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the pool's workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    spec = _spec()
    workers = args.workers or len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    last_row: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        cpu, start = _cpu_s(), time.perf_counter()
        rows = sweep_into(spec, Path(tmp) / "sweep", make_executor("local", None, workers),
                          on_row=lambda row: last_row.append(time.perf_counter()))
        wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"{SCENARIO}: {len(rows)} configurations ({ok} ran, {len(rows) - ok} rejected) "
          f"in {wall:.1f} s: {len(rows) / wall:.2f} configurations per second")
    # the machine may be shared: the CPU time says what idle cores would reach
    per = cpu / len(rows)
    print(f"  rows in {last_row[-1] - start:.1f} s, then table, plot and report in "
          f"{start + wall - last_row[-1]:.1f} s; load average before {load:.2f}")
    print(f"  CPU {cpu:.1f} s (workers and this process): {per * 1e3:.0f} ms per "
          f"configuration, {workers / per:.1f} configurations per second on {workers} "
          f"idle cores")
    _where(spec)


if __name__ == "__main__":
    main()
