"""Speed benchmark: whole-process `shardsim run --json` wall time for GPT-3 175B on 1024
A100-80GB and the 1T model on 3072 A100-80GB (Narayanan et al. 2021, Table 1 rows), with
the event count and the bare SimPy event rate measured in the same run.

Targets (DESIGN.md): 175B <= 1 s, 1T <= 5 s on two cores. Run:

    python benchmarks/speed.py [--repeat N]
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


def whole_process(path: Path, repeat: int) -> tuple[float, dict]:
    """Best wall time of `shardsim run PATH --json` over `repeat` runs, and its output."""
    best, out = float("inf"), {}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(command() + ["run", str(path), "--json"], capture_output=True,
                              text=True, env=env, cwd=REPO, check=False)
        best = min(best, time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"shardsim run failed:\n{proc.stderr}")
        out = json.loads(proc.stdout)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from simulator.engine.core import simpy_event_rate

    rate = simpy_event_rate(200_000)
    print(f"cores: {os.cpu_count()}  bare SimPy: {rate:,.0f} events/s")
    ok = True
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
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
