"""Speed benchmark: whole-process `shardsim run --json` wall time for GPT-3 175B on 1024
A100-80GB and the 1T model on 3072 A100-80GB (Narayanan et al. 2021, Table 1 rows), with
the event count and the bare SimPy event rate measured in the same run; then events and
wall time against micro-batches per replica for GPT-3 175B (`--set
training.global_batch_size=8*m`), where the steady state of the 1F1B pipeline is simulated
shortened and extended, and against the gradient bucket size, where identical buckets run
as one task (issue 13).

Targets (docs/design.md): 175B <= 1 s, 1T <= 5 s on two cores; 196,608 micro-batches (global
batch 1,572,864) <= 5 s with the same time per added micro-batch as the 1536 run. Run:

    python benchmarks/speed.py [--repeat N] [--micro-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CASES = {
    "gpt3-175b-1024-a100": {"target_s": 1.0, "layers": 96, "hidden": 12288, "heads": 96,
                            "tp": 8, "pp": 16, "dp": 8, "batch": 1536},
    "gpt-1t-3072-a100": {"target_s": 5.0, "layers": 128, "hidden": 25600, "heads": 160,
                         "tp": 8, "pp": 64, "dp": 6, "batch": 3072},
}


def scenario(name: str, c: dict) -> dict:
    devices = c["tp"] * c["pp"] * c["dp"]
    return {
        "name": name, "hardware": "a100-80gb",
        "cluster": {"nodes": devices // 8, "devices_per_node": 8},
        "model": {"type": "transformer", "layers": c["layers"], "hidden_size": c["hidden"],
                  "num_heads": c["heads"], "seq_length": 2048, "vocab_size": 51200,
                  "dtype": "bf16"},
        "training": {"global_batch_size": c["batch"], "micro_batch_size": 1},
        "parallel": {"data": c["dp"], "tensor": c["tp"], "pipeline": c["pp"],
                     "schedule": "1f1b", "recompute": "full"},
    }


def command() -> list[str]:
    exe = shutil.which("shardsim")
    return [exe] if exe else [sys.executable, "-m", "simulator"]


def whole_process(path: Path | str, repeat: int, *sets: str) -> tuple[float, dict]:
    """Best wall time of `shardsim run PATH --json [--set ...]` over `repeat` runs, and its
    output."""
    best, out = float("inf"), {}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [a for kv in sets for a in ("--set", kv)]
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(command() + ["run", str(path), "--json", *args],
                              capture_output=True,
                              text=True, env=env, cwd=REPO, check=False)
        best = min(best, time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"shardsim run failed:\n{proc.stderr}")
        out = json.loads(proc.stdout)
    return best, out


GPT3 = "gpt3-175b-1024-a100"  # data 8, micro-batch 1: global batch = 8 x micro-batches
MICRO_BATCHES = (8, 64, 192, 1536, 196_608, 1_048_576)
DONE_WHEN = (196_608, 5.0)  # micro-batches of global batch 1,572,864; seconds


def added_micro_batch_s(micro: int) -> float:
    """Iteration time that one more micro-batch adds to the `micro` run, both simulated in
    full (every micro-batch): the pipeline's steady period at `micro`."""
    from simulator.api import load_hardware, load_scenario
    from simulator.simulation.simulate import simulate

    times = []
    for m in (micro, micro + 1):
        loaded = load_scenario(GPT3, [f"training.global_batch_size={8 * m}"])
        times.append(simulate(loaded.scenario, load_hardware(loaded), steady=False)
                     .iteration_time_s)
    return times[1] - times[0]


def micro_batch_scaling(repeat: int) -> bool:
    """Events and whole-process wall time against micro-batches per replica (GPT-3 175B);
    past 192, the time each micro-batch adds to the 1536 run (192 micro-batches), which a
    repeating steady state makes the 1536 run's own added time exactly."""
    ref = added_micro_batch_s(192)
    print(f"\n{GPT3}: micro-batches per replica vs events and wall time; the 1536 run "
          f"(192) plus one micro-batch takes {ref:.10f} s more")
    print(f"{'micro-batches':>14} {'events':>7} {'process s':>9} {'simulate s':>10} "
          f"{'iteration s':>13} {'s/micro-batch':>13} {'added s/micro-batch':>19}")
    ok, t192 = True, None
    for m in MICRO_BATCHES:
        wall, out = whole_process(GPT3, repeat, f"training.global_batch_size={8 * m}")
        sim, t = out["simulation"], out["iteration_time_s"]
        t192 = t if m == 192 else t192
        added = (t - t192) / (m - 192) if t192 is not None and m > 192 else None
        print(f"{m:>14,} {sim['events']:>7,} {wall:>9.3f} {sim['wall_s']:>10.3f} {t:>13.3f} "
              f"{t / m:>13.6f} {'-' if added is None else f'{added:.10f}':>19}")
        if m == DONE_WHEN[0]:
            same = added is not None and abs(added - ref) <= 1e-9 * ref
            ok &= wall <= DONE_WHEN[1] and same
            print(f"{'':>14} done-when (global batch {8 * m:,}): {wall:.3f} s (target "
                  f"{DONE_WHEN[1]} s); added time per micro-batch "
                  f"{'equals' if same else 'DIFFERS FROM'} the 1536 run's")
    return ok


BUCKET_MB = (25.0, 1.0, 0.1, 0.01)


def bucket_scaling(repeat: int) -> bool:
    """Events and whole-process wall time against the gradient bucket size (GPT-3 175B,
    192 micro-batches): identical buckets run as one task, cut where a send needs the
    link (issue 13: 0.01 MB buckets took 135 s and 4.4 M events)."""
    print(f"\n{GPT3}: gradient bucket size vs events and wall time")
    print(f"{'bucket MB':>10} {'events':>7} {'process s':>9} {'simulate s':>10} "
          f"{'iteration s':>12} {'comm_exposed s':>14}")
    ok = True
    for mb in BUCKET_MB:
        wall, out = whole_process(GPT3, repeat, f"parallel.comm_fusion.bucket_mb={mb}")
        sim = out["simulation"]
        print(f"{mb:>10g} {sim['events']:>7,} {wall:>9.3f} {sim['wall_s']:>10.3f} "
              f"{out['iteration_time_s']:>12.3f} {out['breakdown_s']['comm_exposed']:>14.3f}")
        ok &= wall <= DONE_WHEN[1]
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--micro-only", action="store_true",
                    help="only the micro-batch and bucket-size scaling of GPT-3 175B")
    args = ap.parse_args()
    from simulator.engine.core import simpy_event_rate

    rate = simpy_event_rate(200_000)
    print(f"cores: {os.cpu_count()}  bare SimPy: {rate:,.0f} events/s")
    ok = True
    if args.micro_only:
        ok = micro_batch_scaling(args.repeat) & bucket_scaling(args.repeat)
        raise SystemExit(0 if ok else 1)
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(scenario(name, case)))
            wall, out = whole_process(path, args.repeat)
            sim = out["simulation"]
            verdict = "ok" if wall <= case["target_s"] else "TOO SLOW"
            ok &= wall <= case["target_s"]
            print(f"{name}: process {wall:.3f} s (target {case['target_s']} s, {verdict}); "
                  f"simulate {sim['wall_s']:.3f} s, {sim['events']:,} events "
                  f"({sim['events'] / sim['wall_s']:,.0f}/s incl. lowering and metrics); "
                  f"iteration {out['iteration_time_s']:.3f} s, MFU {out['mfu']:.1%}")
    ok &= micro_batch_scaling(args.repeat)
    ok &= bucket_scaling(args.repeat)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
