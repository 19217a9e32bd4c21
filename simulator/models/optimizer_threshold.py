"""Parameters the optimizer keeps whole: MindSpore's `parallel_optimizer_threshold` (a
parameter of at most that many KB per device is not sharded by the parallel optimizer),
`parallel.optimizer_threshold_kb` here. One decision for `run` (the program's unsharded
elements) and `verify` (the parameters it updates whole), judged at the scenario's own
sizes."""

from __future__ import annotations

import math

from simulator.config.scenario.schema import DTYPE_BYTES, Scenario, TransformerModel
from simulator.models.layers import layer_kinds, layer_plan
from simulator.models.recompute import layer_role
from simulator.models.transformer_plan import gpt_dims, planned_transformer, uses_flash
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["optimizer_threshold", "kept_whole", "unsharded_roles"]


def optimizer_threshold(scenario: Scenario) -> tuple[float, int]:
    """(threshold bytes, bytes per stored parameter element) of `optimizer_threshold_kb`:
    0 without a sharded optimizer; an FP8 model keeps its parameters in bf16."""
    p, m = scenario.parallel, scenario.model
    threshold = p.optimizer_threshold_kb * 1024 if p.optimizer_shard else 0.0
    return threshold, DTYPE_BYTES["bf16" if m.dtype == "fp8" else m.dtype]


def kept_whole(plan: ShardingPlan, threshold_bytes: float, e: float) -> dict[str, int]:
    """{parameter: local elements} of the parameters whose local size is at most
    `threshold_bytes` (MindSpore's parallel_optimizer_threshold: not sharded)."""
    if threshold_bytes <= 0:
        return {}
    graph, mesh = plan.graph, plan.mesh
    out = {}
    for name, t in graph.tensors.items():
        local = math.prod(plan.layouts[name].local_shape(t.shape, mesh))
        if t.kind == "parameter" and local * e <= threshold_bytes:
            out[name] = local
    return out


def unsharded_roles(scenario: Scenario, fused_attention: bool = False) -> frozenset[str]:
    """The parameters (by name, a layer's without its `lN.` prefix) the optimizer keeps
    whole under `parallel.optimizer_threshold_kb`, judged at the scenario's own sizes (a
    shrunk verify case keeps the decision of the model it stands for)."""
    threshold, pe = optimizer_threshold(scenario)
    if threshold <= 0:
        return frozenset()
    m, p = scenario.model, scenario.parallel
    assert isinstance(m, TransformerModel)
    dims = gpt_dims(scenario, uses_flash(scenario, fused_attention),
                    layer_plan(layer_kinds(m)).graph)
    graph, mesh = planned_transformer(dims, p.data, p.tensor, p.sequence_parallel,
                                      p.expert_axis,
                                      tuple(p.tensor_nd) if p.tensor_nd else None)
    # (the parameters' layouts: the same plan `program.model_program` derives the program
    # from, whatever `enable_alltoall` does to the activations' redistributions)
    plan = build_plan(graph, mesh, pe)
    return frozenset(layer_role(n) for n in kept_whole(plan, threshold, pe))
