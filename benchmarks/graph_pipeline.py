"""Pipeline parallel on the bundled mlp, resnet and graph scenarios (docs/techniques/pipeline.md).

For each scenario and pipeline degree (data * pipeline kept at the scenario's devices, the
graph's stages from its operators' `pipeline_stage`), simulates in-process and prints, as a
markdown table, the units per stage, the bytes one device sends per step (activations
forward, gradients back), the bubble and its share of the iteration, the iteration time and
the model states of the most loaded device. It measures and never asserts.

    python -m benchmarks.graph_pipeline   (repo root)
"""

from __future__ import annotations

import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.simulation.simulate import simulate

# (scenario, overrides of each row)
ROWS = [
    ("pipeline-mlp-8-a100", ["parallel.pipeline=1", "parallel.data=8"]),
    ("pipeline-mlp-8-a100", ["parallel.pipeline=2", "parallel.data=4"]),
    ("pipeline-mlp-8-a100", []),
    ("pipeline-mlp-8-a100", ["parallel.pipeline=8", "parallel.data=1"]),
    ("pipeline-mlp-8-a100", ["parallel.schedule=gpipe"]),
    ("pipeline-resnet-8-a100", ["parallel.pipeline=1", "parallel.data=8"]),
    ("pipeline-resnet-8-a100", []),
    ("pipeline-resnet-8-a100", ["parallel.schedule=1f1b"]),
    ("pipeline-graph-seed-c-8-cpu", ["parallel.micro_batches=1"]),
    ("pipeline-graph-seed-c-8-cpu", []),
    ("pipeline-graph-seed-c-8-cpu", ["parallel.micro_batches=16"]),
]


def _row(name: str, sets: list[str]) -> str:
    path = resolve_yaml(name, "scenarios")
    s = parse_scenario(yaml.safe_load(path.read_text()), str(path), sets)
    r = simulate(s, load_profile(s.hardware))
    p = s.parallel
    bubble = dict(r.breakdown_s)["bubble"]
    cats = dict(r.memory.by_category)
    states = cats["parameters"] + cats["gradients"] + cats["optimizer_states"]
    sent = dict(r.comm_bytes).get("send_recv", 0.0)
    return (f"| `{name}` | {p.pipeline} x {p.data} | {p.schedule} | {s.grad_accum_steps} | "
            f"{'/'.join(map(str, r.plan.stage_layers))} | {sent / 1e3:.1f} | "
            f"{bubble * 1e3:.3f} ({100 * bubble / r.iteration_time_s:.0f}%) | "
            f"{r.iteration_time_s * 1e3:.3f} | {states / 1e6:.1f} |")


def main() -> None:
    print("| scenario | pipeline x data | schedule | micro-batches | units per stage | "
          "kB sent per device | bubble ms (share) | iteration ms | model states MB |")
    print("|---|---|---|---|---|---:|---:|---:|---:|")
    for name, sets in ROWS:
        print(_row(name, sets))


if __name__ == "__main__":
    main()
