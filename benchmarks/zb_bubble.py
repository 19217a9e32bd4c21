"""The zb_h1 and zb_h2 bubbles against their closed forms (docs/techniques/pipeline.md).

An 8-layer GPT (hidden 1024, sequence 1024, bf16) in p stages on A100 roofline kernel
times, with uniform stages and free communication (only a layer's kernels cost time): the
setting of the closed forms of Qi et al. 2023, "Zero Bubble Pipeline Parallelism"
(arXiv 2401.10241), Sec. 3.1. T_F, T_B, T_W are one stage's forward, input-gradient and
weight-gradient times per micro-batch (`lower.stages.split_backward`); the simulated bubble
is `breakdown_s.bubble` of the slowest device. It prints a markdown table and never
asserts (tests/test_schedule_zb.py does).

    python -m benchmarks.zb_bubble   (repo root)
"""

from __future__ import annotations

from typing import Any

from simulator.config.hardware import load_profile
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.schema import Scenario
from simulator.cost import compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.lower.costs import CostModel
from simulator.lower.stages import split_backward
from simulator.program.model_program import transformer_program
from simulator.simulation.simulate import simulate

A100 = load_profile("a100-80gb")
LAYERS = 8
CASES = [(2, 4), (4, 8), (4, 16), (8, 16)]  # (p, m), m >= 2p as zb_h2's closed form needs


def scenario(p: int, m: int, schedule: str = "zb_h1", **parallel: Any) -> Scenario:
    """The 8-layer GPT on p stages, m micro-batches (`parallel`: more keys of the section)."""
    return parse_scenario({
        "name": "zb", "hardware": "a100-80gb",
        "cluster": {"nodes": 1, "devices_per_node": p},
        "model": {"type": "transformer", "layers": LAYERS, "hidden_size": 1024,
                  "num_heads": 16, "seq_length": 1024, "vocab_size": 8192, "dtype": "bf16"},
        "training": {"global_batch_size": m, "micro_batch_size": 1},
        "parallel": {"pipeline": p, "schedule": schedule, **parallel}}, "zb.yaml")


def layer_costs(s: Scenario) -> CostModel:
    """Roofline time for a layer's kernels; the embedding, head, optimizer and every
    transfer free."""
    prog = transformer_program(s)
    names = {op.name for op in prog.block("layer").fwd + prog.block("layer").bwd}
    return CostModel(
        compute_s=lambda spec: compute_time_s(spec, A100) if spec.name in names else 0.0,
        collective_s=lambda *a: 0.0, send_recv_s=lambda nbytes, intra: 0.0)


def stage_times(s: Scenario) -> tuple[float, float, float]:
    """(T_F, T_B, T_W) of one stage and micro-batch, seconds."""
    prog = transformer_program(s)
    b_ops, w_ops, _, _ = split_backward(prog.block("layer").fwd, prog.block("layer").bwd)
    per = LAYERS // s.parallel.pipeline
    return tuple(per * sum(compute_time_s(op, A100) for op in ops if isinstance(op, ComputeSpec))
                 for ops in (prog.block("layer").fwd, b_ops, w_ops))  # type: ignore[return-value]


def bubble(s: Scenario, **kw: Any) -> float:
    """The simulated bubble with only a layer's kernels costing time (`kw`: to simulate)."""
    return dict(simulate(s, A100, costs=layer_costs(s), **kw).breakdown_s)["bubble"]


def main() -> None:
    print("| p | m | T_F ms | T_B ms | T_W ms | 1f1b bubble ms | (p-1)(T_F+T_B+T_W) | "
          "zb_h1 bubble ms | (p-1)(T_F+T_B-T_W) | zb_h2 bubble ms | (p-1)(T_F+T_B-2T_W) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, m in CASES:
        tf, tb, tw = stage_times(scenario(p, m, "zb_h1"))
        ms = [x * 1e3 for x in (tf, tb, tw, bubble(scenario(p, m, "1f1b")),
                                (p - 1) * (tf + tb + tw), bubble(scenario(p, m, "zb_h1")),
                                (p - 1) * (tf + tb - tw), bubble(scenario(p, m, "zb_h2")),
                                (p - 1) * (tf + tb - 2 * tw))]
        print(f"| {p} | {m} | " + " | ".join(f"{x:.4f}" for x in ms) + " |")


if __name__ == "__main__":
    main()
