"""The program of an operator graph (mlp, resnet, `type: graph`), derived from the planned
graph `verify` executes: the whole graph as one Block, or under a pipeline, recompute
(`program.graph_recompute`) or offload its units (`program.graph_stages`), which the
lowering cuts into stages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.config.scenario.dataset import dataset_choice
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.graph.graph import Graph
from simulator.models.model_graph import planned_graph
from simulator.models.params import block_params
from simulator.models.ps_params import worker_elements
from simulator.models.recompute import recomputing
from simulator.models.split import fixed_counts, virtual_stages
from simulator.program import comm_options
from simulator.program.graph_stages import Staged, staged_graph
from simulator.program.host_placement import host_kernels, host_placed
from simulator.program.program import Block, Program, coalesce
from simulator.sharding.lower import (
    Saved,
    backward_specs,
    forward_specs,
    gradient_steps,
    loaded_bytes,
    saved,
)
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan

__all__ = ["GraphProgram", "graph_program", "graph_model_flops"]


@dataclass(frozen=True)
class GraphProgram:
    program: Program
    mesh: Mesh  # the graph's own device mesh (the cluster mesh adds `pp` around it)
    model_flops: float


def graph_model_flops(graph: Graph, micro_batches: int) -> float:
    """Contraction (GEMM, conv) FLOPs of forward and backward for the whole batch."""
    total = 0.0
    for op in graph.ops:
        if op.family.kind == "gemm":
            fwd = op.family.flops(graph.shapes(op), graph.tensors[op.output].shape, op.attrs)
            total += fwd * (1.0 + op.family.bwd_flops_factor)
    return total * micro_batches


def _with_workers(plan: ShardingPlan, blocks: tuple[Block, ...], worker: dict[str, int]
                  ) -> tuple[Block, ...]:
    """The blocks with the elements the workers all-reduce beside parameter servers
    (`models.ps_params.worker_elements`), each parameter counted in the first block whose
    operators read it (the whole graph's block: all of them)."""
    if len(blocks) == 1:
        return (replace(blocks[0], worker_params=sum(worker.values())),)
    seen: set[str] = set()
    out = []
    for b in blocks:
        read = {n for op in b.ops for n in plan.op_plan(op).op.inputs if n in worker} - seen
        seen |= read
        out.append(replace(b, worker_params=sum(worker[n] for n in read)))
    return tuple(out)


def _staged(scenario: Scenario, plan: ShardingPlan, dtype: str, e: int,
            skip: tuple[str, ...], sv: Saved) -> Staged | None:
    """The units a pipeline cuts the graph into (`program.graph_stages`), also without a
    pipeline where recompute or offload works unit by unit; None otherwise (the whole
    graph is one block)."""
    p = scenario.parallel
    rc = recomputing(scenario)
    if p.pipeline == 1 and rc is None and not (p.offload.parameters or p.offload.activations):
        return None
    return staged_graph(plan, scenario.model.type, dtype, e, skip, sv, rc)


def _dataset_extras(scenario: Scenario, loaded: float) -> tuple[tuple[str, object], ...]:
    """The dataset strategy a scenario gives and the input bytes one device loads per
    micro-batch under it (`scenario.dataset`); nothing without one."""
    choice = dataset_choice(scenario.parallel)
    if choice is None:
        return ()
    return (("dataset", {"strategy": choice[1], "loaded_bytes_per_device": round(loaded)}),)


def graph_program(scenario: Scenario) -> GraphProgram:
    """The program of an mlp, resnet or graph model: the whole planned graph as one block."""

    graph, mesh = planned_graph(scenario)
    dtype = scenario.model.dtype
    e = DTYPE_BYTES[dtype]
    plan = comm_options.plan(scenario, graph, mesh, e)
    skip = ("dp",) if scenario.parallel.data > 1 else ()
    on_host = {op.name for op in graph.ops if host_placed(op)}
    # host operators' tables stay in host memory
    params, tensors = block_params(plan, lambda n: n not in on_host)
    sv = saved(plan, e)
    loaded = loaded_bytes(plan, e)
    kept = sv.total(lambda n: n not in on_host)
    staged = _staged(scenario, plan, dtype, e, skip, sv)
    blocks: tuple[Block, ...] = (Block(
        "graph", forward_specs(plan, dtype), backward_specs(plan, dtype), params=params,
        param_tensors=tensors,
        grad_sync=coalesce(gradient_steps(plan, skip), "grad_sync"), saved_bytes=kept),)
    shared: tuple[tuple[float, frozenset[int]], ...] = ()
    spans: tuple[tuple[str, int, int], ...] = ()
    fixed = None
    if staged is not None:
        blocks, shared, spans = staged
        fixed = fixed_counts(scenario, [op.op.name for op in plan.ops], virtual_stages(scenario))
    worker = worker_elements(scenario, plan)
    if worker:
        blocks = _with_workers(plan, blocks, worker)
    prog = Program(
        blocks=blocks, dtype=dtype, shared_saved=shared, fixed=fixed, spans=spans,
        whole_grads=staged is not None, host_kernels=host_kernels(plan, e),
        host_params=block_params(plan, lambda n: n in on_host)[0] if on_host else 0,
        resident=(("activations", loaded),), extras=_dataset_extras(scenario, loaded))
    return GraphProgram(prog, mesh, graph_model_flops(graph, scenario.grad_accum_steps))

