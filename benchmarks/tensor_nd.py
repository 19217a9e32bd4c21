"""1-D, 2-D and 3-D tensor parallel on the bundled GPT-32B, 64 H100 scenario: the tables of
docs/techniques/tensor-nd.md.

For each layout of the 64 tensor-parallel devices (1-D `tensor_nd: null`, 2-D [16,4] and
[8,8], 3-D [4,4,4]) and micro-batches of 4 and 16 samples (global batch 4 micro-batches),
simulates `tp3d-gpt-32b-64-h100` in-process and prints, as markdown tables, the bytes one
device moves per iteration (the sum of its collectives' message sizes, as `run` reports
them), its parameter and activation memory and peak, the iteration time, the exposed
communication and the MFU; then, per layer and micro-batch (forward and backward), the bus
bytes one device moves on each mesh axis (nccl-tests' busbw factor of each collective).
Extra `--set`-style overrides (e.g. parallel.overlap.tp_comm=false,
parallel.sequence_parallel=false) apply to every row. It measures and never asserts.

    python -m benchmarks.tensor_nd [KEY=VALUE ...]   (repo root)
"""

from __future__ import annotations

import sys
from collections import Counter

import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.collectives import busbw_factor
from simulator.cost.specs import CommSpec
from simulator.lower.layout import rank_mesh
from simulator.simulation.simulate import simulate

NAME = "tp3d-gpt-32b-64-h100"
LAYOUTS = ("null", "[16,4]", "[8,8]", "[4,4,4]")


def _scenario(layout: str, samples: int, extra: list[str]):
    path = resolve_yaml(NAME, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), [
        f"parallel.tensor_nd={layout}", f"training.micro_batch_size={samples}",
        f"training.global_batch_size={4 * samples}", *extra])


def _rows(samples: int, extra: list[str]) -> tuple[list[str], list[str]]:
    totals, axes = [], []
    for layout in LAYOUTS:
        s = _scenario(layout, samples, extra)
        r = simulate(s, load_profile(s.hardware))
        mem = dict(r.memory.by_category)
        mfu = r.model_flops / r.iteration_time_s / (r.peak_flops_per_s * s.devices)
        exposed = dict(r.breakdown_s).get("comm_exposed", 0.0)
        name = "1-D" if layout == "null" else layout
        totals.append(f"| {samples} | {name} | {sum(dict(r.comm_bytes).values()) / 1e9:.1f} | "
                      f"{mem['parameters'] / 1e9:.2f} | {mem['activations'] / 1e9:.2f} | "
                      f"{r.memory.peak_bytes / 1e9:.2f} | {r.iteration_time_s:.3f} | "
                      f"{exposed:.3f} | {100 * mfu:.1f}% |")
        mesh = rank_mesh(s)
        sizes, groups = dict(mesh.mesh.axes), mesh.groups()
        moved: Counter = Counter()
        for c in r.program.block("layer").fwd + r.program.block("layer").bwd:
            if isinstance(c, CommSpec):
                moved[c.axis] += busbw_factor(c.collective, sizes[c.axis]) * c.bytes
        cells = ", ".join(f"{a} ({sizes[a]}{', x-node' if groups[a].crosses_nodes else ''}): "
                          f"{v / 1e6:.0f}" for a, v in moved.items())
        axes.append(f"| {samples} | {name} | {cells} | {sum(moved.values()) / 1e6:.0f} |")
    return totals, axes


def main() -> None:
    extra = sys.argv[1:]
    totals, axes = [], []
    for samples in (4, 16):
        t, a = _rows(samples, extra)
        totals += t
        axes += a
    print("| micro-batch | tensor_nd | moved GB/device | params GB | activations GB | "
          "peak GB | iteration s | comm exposed s | MFU |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(totals))
    print()
    print("| micro-batch | tensor_nd | per layer, fwd+bwd: bus MB by axis | total MB |")
    print("|---|---|---|---|")
    print("\n".join(axes))


if __name__ == "__main__":
    main()
