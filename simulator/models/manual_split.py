"""MindSpore's `manual_split` on a Gather (`add_prim_attr("manual_split", config)`: "(10,
20, 30, 4) means that the 0th dimension of the first input of the operator is cut into 4
parts", MindSpore tutorial "Other Features" r1.9, interface table). The op's Strategy carries
the pieces (`sharding.graph_yaml`) into the Gather's signature and so into the table's kept
layout, its gradient and optimizer states as explicit blocks (`Shard.sizes`,
`sharding.layout`): device k of the dim's slices holds rows [sum(pieces[:k]),
sum(pieces[:k+1])), looks up the ids in that range and zeros elsewhere, and the partial
outputs are reduced as the strategy's Partial output already is. Time and memory are the
largest block's (`Layout.local_shape`). The scenario rules
(`config.scenario.manual_split_rules`) have already checked the op type, the pieces' sum,
count and signs; here: the table is read by that Gather only (the redistribution planner
moves chunked blocks, not explicit ones)."""

from __future__ import annotations

from simulator.config.scenario.schema import GraphModel
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import build_plan

__all__ = ["planned_pieces", "check_manual_splits"]


def planned_pieces(graph: Graph, mesh: Mesh, table: str) -> list[int]:
    """Rows of each slice of `table`'s dim 0 under the plan, in slice order (the distinct
    dim-0 blocks the devices hold, by their first row)."""
    plan = build_plan(graph, mesh)
    layout = plan.layouts[table]
    shape = tuple(graph.tensors[table].shape)
    blocks = {(r[0].start, r[0].stop) for r in
              (layout.region(shape, mesh, rank) for rank in range(mesh.size))}
    return [stop - start for start, stop in sorted(blocks)]


def check_manual_splits(model: GraphModel, graph: Graph, mesh: Mesh, source: str) -> None:
    """Every `attrs.manual_split` Gather is its table's only reader."""
    for i, op in enumerate(model.ops):
        if "manual_split" not in op.attrs:
            continue
        table = op.inputs[0]
        others = [o.name for o in graph.ops if table in o.inputs and o.name != op.name]
        if others:
            raise InputError(source, f"model.ops[{i}].attrs.manual_split", (
                f"the table {table!r} is also read by {', '.join(others)}: explicit blocks "
                f"are simulated where the Gather is the table's only reader (its other "
                f"readers would need a redistribution of uneven blocks)"))
