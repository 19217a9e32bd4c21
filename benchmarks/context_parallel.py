"""Context parallel on the bundled Llama-3-8B 128K scenario (docs/techniques/context-parallel.md).

For each context degree n (data * n = 8 on the scenario's 16 H100s, tensor 2), simulates
`cp-llama3-8b-128k-16-h100` in-process and prints, as a markdown table, the tokens each rank
holds, its activation memory and peak (fits or not in 80 GB), the ring's key/value bytes one
device sends per layer and micro-batch (forward 2(n-1) blocks, backward 4(n-1): the program's
collectives on the `cp` axis, (n-1)/n of each nccl-tests buffer), the iteration time and
the MFU. It measures and never asserts.

    python -m benchmarks.context_parallel   (repo root)
"""

from __future__ import annotations

import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.simulation.simulate import simulate

NAME = "cp-llama3-8b-128k-16-h100"


def _row(context: int) -> str:
    path = resolve_yaml(NAME, "scenarios")
    s = parse_scenario(yaml.safe_load(path.read_text()), str(path),
                       [f"parallel.context={context}", f"parallel.data={8 // context}"])
    r = simulate(s, load_profile(s.hardware))
    layer = r.program.block("layer")
    ring = sum(c.bytes * (context - 1) / context for c in layer.fwd + layer.bwd
               if getattr(c, "axis", None) == "cp")
    act = dict(r.memory.by_category)["activations"]
    peak = r.memory.peak_bytes
    fits = "" if peak <= r.capacity_bytes else " (does not fit)"
    mfu = r.model_flops / r.iteration_time_s / (r.peak_flops_per_s * s.devices)
    return (f"| {context} | {8 // context} | {s.model.seq_length // context} | "
            f"{act / 1e9:.1f} | {peak / 1e9:.1f}{fits} | {ring / 1e6:.0f} | "
            f"{r.iteration_time_s:.1f} | {100 * mfu:.1f}% |")


def main() -> None:
    cap = load_profile("h100-sxm").memory_capacity_bytes / 1e9
    print(f"| context | data | tokens per rank | activations GB | peak GB (of {cap:.1f}) | "
          "KV ring MB sent per layer | iteration s | MFU |")
    print("|---|---|---|---|---|---|---|---|")
    for context in (1, 2, 4, 8):
        print(_row(context))


if __name__ == "__main__":
    main()
