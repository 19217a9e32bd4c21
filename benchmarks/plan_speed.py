"""How fast `shardsim plan` is, and how close its best configuration is to the best found by
simulating every configuration of the same space (issue 8: within 2%; issue 23: GPT-3 175B
on 1024 devices <= 30 s and a DeepSeek-V3-sized MoE on 2048 devices <= 120 s on 2 cores).

    python benchmarks/plan_speed.py                         # plan wall time + exhaustive
    python benchmarks/plan_speed.py --no-exhaustive         # the wall times only
    python benchmarks/plan_speed.py --no-exhaustive --no-moe   # GPT-3 only

The MoE figure plans DeepSeek-V3 (671B, 256 routed experts, MLA, MTP; the model and batch
of benchmarks/data/validation-pending/deepseek-v3-2048-h800.yaml, DeepSeek-AI 2024,
arXiv:2412.19437 Sec. 3-4) on 2048 H800 over data, tensor, pipeline and expert degrees,
then micro-batch, schedule (DualPipe included), recompute, ZeRO, sequence parallelism,
offload, buckets and multi-copy: the generic search (`planner.generic_search`), pruned by
`planner.floors`.
    python benchmarks/plan_speed.py --max-micro-batch 2 --max-virtual-stages 2 \
        --max-optimizer-shard 2        # a smaller space whose exhaustive part takes ~20 min

The wall time is of the command itself (`python -m simulator plan SCENARIO --devices N
--json`, a fresh process). The exhaustive part simulates every configuration that the
closed-form memory floor keeps (the floor never drops one that fits, see
tests/test_plan_search.py) with `--jobs` processes, and, with --include-pruned, the dropped
ones too (to check the floor at scale). For the full GPT-3 space it takes hours on 2 cores
(ZeRO-3 and tensor 1-2 configurations take seconds to a minute each to simulate);
--save FILE keeps every simulated result as JSON lines (and --resume reads it back).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.api import load_hardware, load_scenario  # noqa: E402
from simulator.planner.memory import estimate_memory, workload_of  # noqa: E402
from simulator.planner.search import simulate_config  # noqa: E402
from simulator.planner.space import Config, SpaceLimits, enumerate_space  # noqa: E402

_STATE: dict = {}


def _cpu_s() -> float:
    """CPU seconds of the finished child processes (the plan runs on one core: on a
    machine shared by other jobs this is what its wall time would be alone)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


MOE = "benchmarks/data/validation-pending/deepseek-v3-2048-h800.yaml"
MOE_DEVICES = 2048


def _plan(args: argparse.Namespace, scenario: str | None = None, devices: int | None = None
          ) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "simulator", "plan", scenario or args.scenario, "--devices",
           str(devices or args.devices), "--json", "--max-micro-batch",
           str(args.max_micro_batch), "--max-virtual-stages", str(args.max_virtual_stages),
           "--max-optimizer-shard", str(args.max_optimizer_shard)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0, c0 = time.perf_counter(), _cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"plan failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    report["cpu_s"] = _cpu_s() - c0
    return wall, report


def _init(scenario: str, devices_per_node: int) -> None:
    loaded = load_scenario(scenario, [])
    _STATE.update(sc=loaded.scenario, hw=load_hardware(loaded), per_node=devices_per_node)


def _one(cfg: Config) -> tuple[Config, float, float, bool]:
    ev = simulate_config(_STATE["sc"], _STATE["hw"], cfg, _STATE["per_node"])
    return cfg, ev.iteration_time_s, ev.peak_bytes, ev.fits


def _space(args: argparse.Namespace) -> tuple[list[Config], list[Config]]:
    loaded = load_scenario(args.scenario, [])
    sc, hw = loaded.scenario, load_hardware(loaded)
    w = workload_of(sc, hw)
    space = enumerate_space(sc, args.devices, w.flash,
                            SpaceLimits(args.max_micro_batch, args.max_virtual_stages,
                                        args.max_optimizer_shard))
    kept = [c for c in space if estimate_memory(w, c).floor_bytes <= hw.memory_capacity_bytes]
    return space, kept


def _load(path: str | None) -> dict[Config, tuple]:
    done: dict[Config, tuple] = {}
    if path and Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            done[Config(**rec["config"])] = (rec["time_s"], rec["peak_bytes"], rec["fits"])
    return done


def _exhaustive(args: argparse.Namespace, per_node: int) -> dict[Config, tuple]:
    space, kept = _space(args)
    todo = space if args.include_pruned else kept
    done = _load(args.save if args.resume else None)
    left = [c for c in todo if c not in done]
    print(f"exhaustive: {len(space)} configurations, {len(kept)} kept by the memory floor, "
          f"{len(left)} to simulate with {args.jobs} processes", flush=True)
    t0 = time.perf_counter()
    with Pool(args.jobs, _init, (args.scenario, per_node)) as pool, \
            open(args.save or os.devnull, "a") as out:
        for k, (cfg, t, peak, fits) in enumerate(pool.imap_unordered(_one, left, 4), 1):
            done[cfg] = (t, peak, fits)
            out.write(json.dumps({"config": cfg.__dict__, "time_s": t, "peak_bytes": peak,
                                  "fits": fits}) + "\n")
            out.flush()
            if k % 200 == 0:
                print(f"  {k}/{len(left)} in {time.perf_counter() - t0:.0f} s", flush=True)
    return done


def _moe(args: argparse.Namespace) -> None:
    """The DeepSeek-V3 plan on 2048 devices, with what its search simulated and pruned."""
    wall, report = _plan(args, MOE, MOE_DEVICES)
    best, found = report["best"], report["search"]
    told = f"best {best['iteration_time_s']:.4f} s: {best['label']}" if best else \
        "no configuration fits"
    print(f"plan deepseek-v3 --devices {MOE_DEVICES}: {wall:.1f} s wall, "
          f"{report['cpu_s']:.1f} s CPU (target <= 120 s); {found['configurations']} "
          f"configurations, {found['simulated']} simulated, {found['pruned_by_memory']} "
          f"ruled out by their floors; {told}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="gpt3-175b-1024-a100")
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--max-micro-batch", type=int, default=SpaceLimits().max_micro_batch)
    ap.add_argument("--max-virtual-stages", type=int, default=SpaceLimits().max_virtual_stages)
    ap.add_argument("--max-optimizer-shard", type=int, default=3)
    ap.add_argument("--no-exhaustive", action="store_true")
    ap.add_argument("--no-moe", action="store_true", help="leave out the DeepSeek-V3 plan")
    ap.add_argument("--include-pruned", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--save", metavar="FILE")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    wall, report = _plan(args)
    best = report["best"]
    print(f"plan {args.scenario} --devices {args.devices}: {wall:.1f} s wall, "
          f"{report['cpu_s']:.1f} s CPU (target <= 30 s); best "
          f"{best['iteration_time_s']:.4f} s: {best['label']}")
    if not args.no_moe:
        _moe(args)
    if args.no_exhaustive:
        return
    per_node = min(load_scenario(args.scenario, []).scenario.cluster.devices_per_node,
                   args.devices)
    done = _exhaustive(args, per_node)
    fits = {c: v for c, v in done.items() if v[2]}
    kept = set(_space(args)[1])
    pruned_fit = [c for c in fits if c not in kept]
    top = min(fits, key=lambda c: (fits[c][0], c))
    gap = best["iteration_time_s"] / fits[top][0] - 1
    print(f"exhaustive best {fits[top][0]:.4f} s: {top} ({len(done)} simulated, "
          f"{len(fits)} fit)")
    print(f"planner best is {gap:+.2%} from the exhaustive best (target within 2%)")
    if args.include_pruned:
        print(f"configurations dropped by the memory floor that fit: {len(pruned_fit)}")


if __name__ == "__main__":
    main()
