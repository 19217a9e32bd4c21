"""MindSpore's `manual_split` on a Gather (the rows of its table in each slice of dim 0;
MindSpore tutorial "Other Features" r1.9, interface table) checked against the split the
plan makes. An operator graph's split that does not divide its dim is sharded as DTensor
shards it: on each mesh axis a `torch.chunk` of the block the outer axes left
(`sharding.layout.regions`; torch/distributed/tensor/placement_types.py `Shard`). A
manual_split naming exactly those pieces, in slice order, is that plan (timed, held and
proven by `verify` as it stands); other pieces are refused at their key path: exact uneven
blocks of other sizes are not simulated yet (issue 26). The scenario rules
(`config.scenario.manual_split_rules`) have already checked the op type, the pieces' sum and
count."""

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
    """Every `attrs.manual_split` is the split the plan makes of its Gather's table."""
    for i, op in enumerate(model.ops):
        if "manual_split" not in op.attrs:
            continue
        given = list(op.attrs["manual_split"])
        planned = planned_pieces(graph, mesh, op.inputs[0])
        if given != planned:
            raise InputError(source, f"model.ops[{i}].attrs.manual_split", (
                f"{given}: only the pieces the strategy makes on model.mesh, {planned}, are "
                f"simulated (each mesh axis a torch.chunk of the block the outer axes left, "
                f"as DTensor splits); other uneven blocks are not simulated yet"))
