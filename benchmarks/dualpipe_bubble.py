"""The dualpipe bubble against DeepSeek-V3's Table 2 (docs/techniques/pipeline.md).

The 8-layer GPT of benchmarks/zb_bubble.py (hidden 1024, sequence 1024, bf16, A100 roofline
kernels, only a layer's kernels costing time: uniform stages, free communication) in p stages
under `parallel.schedule: dualpipe`. DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv
2412.19437), Table 2 gives DualPipe's bubble as (PP/2 - 1)(F&B + B - 3W), where F is a
forward chunk, B a full backward chunk (input and weight gradients), W its weight-gradient
part and F&B an overlapped forward-backward pair: in this setting F = T_F, B = T_B + T_W,
W = T_W, F&B = T_F + T_B + T_W. The formula holds for the figure's equal cells, T_F = T_B: the
"equal cells" rows scale the input-gradient kernels so that T_B = T_F; the "kernels" rows
keep the roofline times (T_B > T_F here), where the schedule leaves (PP/2 - 1)(2 T_F + T_B -
T_W) instead. It prints a markdown table and never asserts (tests/test_schedule_dualpipe.py
does).

    python -m benchmarks.dualpipe_bubble   (repo root)
"""

from __future__ import annotations

from benchmarks.zb_bubble import A100, scenario
from simulator.config.scenario.schema import Scenario
from simulator.cost import compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.lower.costs import CostModel
from simulator.lower.stages import split_backward
from simulator.program.model_program import transformer_program
from simulator.simulation.simulate import simulate

CASES = [(2, 4), (4, 8), (4, 12), (8, 16), (8, 24)]  # (p, m): p even, m >= 2p


def costs(s: Scenario, equal_cells: bool) -> tuple[CostModel, tuple[float, float, float]]:
    """The layer-only roofline cost model and (T_F, T_B, T_W) of one stage and micro-batch;
    with `equal_cells` the input-gradient kernels scaled so that T_B = T_F."""
    layer = transformer_program(s).block("layer")
    b_ops, w_ops, _, _ = split_backward(layer.fwd, layer.bwd)
    per = s.model.layers // s.parallel.pipeline

    def total(ops: tuple) -> float:
        return per * sum(compute_time_s(op, A100) for op in ops if isinstance(op, ComputeSpec))

    tf, tb, tw = total(layer.fwd), total(b_ops), total(w_ops)
    scale = tf / tb if equal_cells else 1.0
    names = {op.name for op in layer.fwd + layer.bwd}
    b_names = {op.name for op in b_ops}

    def compute_s(spec: ComputeSpec) -> float:
        if spec.name not in names:
            return 0.0
        return compute_time_s(spec, A100) * (scale if spec.name in b_names else 1.0)

    model = CostModel(compute_s=compute_s, collective_s=lambda *a: 0.0,
                      send_recv_s=lambda nbytes, intra: 0.0)
    return model, (tf, tb * scale, tw)


def bubble(s: Scenario, model: CostModel) -> float:
    """The simulated bubble of the slowest device under `model`."""
    return dict(simulate(s, A100, costs=model, steady=False).breakdown_s)["bubble"]


def table2(p: int, tf: float, tb: float, tw: float) -> float:
    """DeepSeek-V3 Table 2: (PP/2 - 1)(F&B + B - 3W) with free communication."""
    return (p / 2 - 1) * ((tf + tb + tw) + (tb + tw) - 3 * tw)


def main() -> None:
    print("| times | p | m | T_F ms | T_B ms | T_W ms | dualpipe bubble ms | Table 2 ms | "
          "1f1b bubble ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for equal in (True, False):
        for p, m in CASES:
            s = scenario(p, m, "dualpipe")
            model, (tf, tb, tw) = costs(s, equal)
            one = scenario(p, m, "1f1b")
            ms = [x * 1e3 for x in (tf, tb, tw, bubble(s, model), table2(p, tf, tb, tw),
                                    bubble(one, costs(one, equal)[0]))]
            label = "equal cells" if equal else "kernels"
            print(f"| {label} | {p} | {m} | " + " | ".join(f"{x:.4f}" for x in ms) + " |")


if __name__ == "__main__":
    main()
