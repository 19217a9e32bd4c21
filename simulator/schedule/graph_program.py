"""`graph_program(scenario)`: the TransformerProgram of a non-transformer model (mlp, resnet,
graph), derived from its sharding plan, so `run` prices exactly what `verify` proves.

The whole graph is one "layer": its forward and backward ops at local shapes, the
redistributions the planner inserts (transposed in the backward), and the gradient
reductions of every parameter. Data-parallel reductions on a mesh axis named `dp` are left
to the lowering (bucketed, overlapped) when `parallel.data` > 1. No pipeline, recompute or
embedding/head blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cost.specs import GroupSpec
from simulator.graph.graph import Graph
from simulator.scenario.schema import DTYPE_BYTES, GraphModel, Scenario
from simulator.schedule.program import TransformerProgram
from simulator.sharding.lower import backward_specs, forward_specs, gradient_reductions
from simulator.sharding.plan import build_plan

__all__ = ["GraphProgram", "graph_program", "graph_model_flops"]


@dataclass(frozen=True)
class GraphProgram:
    program: TransformerProgram
    groups: tuple[tuple[str, GroupSpec], ...]
    model_flops: float


def graph_model_flops(graph: Graph, micro_batches: int) -> float:
    """Contraction (GEMM, conv) FLOPs of forward and backward for the whole batch."""
    total = 0.0
    for op in graph.ops:
        if op.family.kind == "gemm":
            fwd = op.family.flops(graph.shapes(op), graph.tensors[op.output].shape, op.attrs)
            total += fwd * (1.0 + op.family.bwd_flops_factor)
    return total * micro_batches


def graph_program(scenario: Scenario) -> GraphProgram:
    from simulator.sharding.model_graph import planned_graph

    graph, mesh = planned_graph(scenario)
    dtype = scenario.model.dtype
    plan = build_plan(graph, mesh, DTYPE_BYTES[dtype])
    fwd = forward_specs(plan, dtype)
    dp_elsewhere = ("dp",) if scenario.parallel.data > 1 else ()
    bwd = backward_specs(fwd, plan) + gradient_reductions(plan, dp_elsewhere)
    params = sum(math.prod(plan.layouts[t.name].local_shape(t.shape, mesh))
                 for t in graph.of_kind("parameter"))
    saved = sum(math.prod(p.sig.output_layout.local_shape(graph.tensors[p.op.output].shape,
                                                          mesh)) for p in plan.ops)
    e = DTYPE_BYTES[dtype]
    prog = TransformerProgram(
        layer_fwd=fwd, layer_bwd=bwd, layer_recompute=(), embed_fwd=(), embed_bwd=(),
        head_fwd=(), head_bwd=(), params_per_layer=params, params_embedding=0,
        params_head=0, params_output=0, param_tensors_per_layer=len(graph.of_kind("parameter")),
        activation_bytes_per_layer=float(saved * e), embed_activation_bytes=0.0,
        head_activation_bytes=0.0, layer_working_bytes=float(saved * e), boundary_bytes=0.0,
        dtype=dtype)
    groups = tuple((name, GroupSpec(size, mesh.stride(a), scenario.cluster.devices_per_node))
                   for a, (name, size) in enumerate(mesh.axes))
    micro = 1 if isinstance(scenario.model, GraphModel) else scenario.grad_accum_steps
    return GraphProgram(prog, groups, graph_model_flops(graph, micro))
