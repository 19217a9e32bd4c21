"""FSDP / ZeRO-3 weak scaling: a 7B Llama-style model, fully sharded data parallel only,
constant batch per device (micro-batch 2 of 4096 tokens, one micro-batch per step), on 8 to
2048 H100. Real FSDP keeps the step time nearly flat as devices grow (each unit's gather and
reduce-scatter moves the same bytes per device and hides under the unit's compute); this
prints the simulated curve and its spread (issue 9: flat within 15%).

    python -m benchmarks.fsdp_scaling
"""

from __future__ import annotations

import sys

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.simulation.simulate import simulate

DEVICES = (8, 16, 64, 256, 512, 1024, 2048)
MICRO = 2


def scenario(devices: int):
    return parse_scenario({
        "name": f"llama-7b fsdp {devices} h100", "hardware": "h100-sxm",
        "cluster": {"nodes": max(1, devices // 8), "devices_per_node": min(8, devices)},
        "model": {"type": "transformer", "layers": 32, "hidden_size": 4096, "num_heads": 32,
                  "ffn_hidden_size": 11008, "ffn_activation": "swiglu", "seq_length": 4096,
                  "vocab_size": 32000, "dtype": "bf16"},
        "training": {"global_batch_size": MICRO * devices, "micro_batch_size": MICRO},
        "parallel": {"data": devices, "optimizer_shard": 3},
    }, "benchmarks/fsdp_scaling.py")


def main() -> int:
    hw = load_profile("h100-sxm")
    print(f"{'devices':>8} {'step s':>8} {'compute':>8} {'exposed comm':>13} {'MFU':>6}")
    times = []
    for n in DEVICES:
        r = simulate(scenario(n), hw)
        parts = dict(r.breakdown_s)
        mfu = r.model_flops / r.iteration_time_s / n / r.peak_flops_per_s
        times.append(r.iteration_time_s)
        print(f"{n:>8} {r.iteration_time_s:>8.3f} {parts['compute']:>8.3f} "
              f"{parts['comm_exposed']:>13.3f} {mfu:>6.1%}")
    spread = max(times) / min(times) - 1
    print(f"spread max/min - 1 = {spread:.1%} (target <= 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
