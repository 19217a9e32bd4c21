"""MindSpore's `manual_split` on a Gather (`add_prim_attr("manual_split", config)`: "(10, 20,
30, 4) means that the 0th dimension of the first input of the operator is cut into 4
parts", MindSpore tutorial "Other Features" r1.9, interface table). The op's Strategy
carries the pieces (`sharding.graph_yaml`) into the Gather's signature and so into the
table's kept layout, its gradient and optimizer states as explicit blocks (`Shard.sizes`,
`sharding.layout`): device k of the dim's slices holds rows [sum(pieces[:k]),
sum(pieces[:k+1])) and column block k of the ids, subtracts its block's first row and
gathers locally, the output keeping the ids' split with no reduction (MindSpore's
ManualImpl, mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc;
`sharding.manual_gather`). Memory is the largest block's (`Layout.local_shape`). The
scenario rules (`config.scenario.manual_split_rules`) have already checked the op type,
the pieces' sum, count and signs and MindSpore's strategy for it; here: every other reader
of the table takes it in the same layout, blocks included, as MindSpore requires of a
parameter's users (CheckParameterSplit in
mindspore/ccsrc/frontend/parallel/parameter_manager.cc raises "The parameter: ... has
multiple users, but the TensorInfo are different"): a second Gather with the same strategy
and manual_split shares the blocks (its gradient summed into the same blocks); any other
layout would also need a redistribution of explicit blocks, which the planner refuses."""

from __future__ import annotations

import math

from simulator.config.scenario.schema import GraphModel
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.sharding.layout import Layout, LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Shard
from simulator.sharding.plan import build_plan
from simulator.sharding.rules import SignatureError

__all__ = ["planned_pieces", "check_manual_splits", "check_no_repeat"]


def planned_pieces(graph: Graph, mesh: Mesh, table: str) -> list[int]:
    """Rows of each slice of `table`'s dim 0 under the plan, in slice order (the distinct
    dim-0 blocks the devices hold, by their first row)."""
    plan = build_plan(graph, mesh)
    layout = plan.layouts[table]
    shape = tuple(graph.tensors[table].shape)
    blocks = {(r[0].start, r[0].stop) for r in
              (layout.region(shape, mesh, rank) for rank in range(mesh.size))}
    return [stop - start for start, stop in sorted(blocks)]


def _shown(layout: Layout) -> str:
    """`layout` with each Shard's explicit blocks written after it: (S(0)[10, 20, 30, 4],
    B)."""
    return "(" + ", ".join(f"{p}{list(p.sizes)}" if isinstance(p, Shard) and p.sizes
                           else str(p) for p in layout.placements) + ")"


def _reader_layouts(graph: Graph, mesh: Mesh, table: str) -> dict[str, Layout] | None:
    """The layout each reader of `table` takes it in under the plan (by op name), or None
    where the plan cannot be built (its own error is reported where it is built)."""
    try:
        plan = build_plan(graph, mesh)
    except (SignatureError, LayoutError):
        return None
    return {p.op.name: p.sig.input_layout(p.op.inputs.index(table))
            for p in plan.ops if table in p.op.inputs}


def check_manual_splits(model: GraphModel, graph: Graph, mesh: Mesh, source: str) -> None:
    """Every other reader of a `manual_split` Gather's table takes it in the same layout,
    blocks included (MindSpore's CheckParameterSplit, parameter_manager.cc: a parameter's
    users must agree on its TensorInfo)."""
    for i, op in enumerate(model.ops):
        if "manual_split" not in op.attrs:
            continue
        table = op.inputs[0]
        if not any(table in o.inputs and o.name != op.name for o in graph.ops):
            continue
        layouts = _reader_layouts(graph, mesh, table)
        if layouts is None:
            continue
        own = layouts[op.name]
        others = [f"{name} takes {_shown(lay)}" for name, lay in layouts.items()
                  if name != op.name and lay != own]
        if others:
            raise InputError(source, f"model.ops[{i}].attrs.manual_split", (
                f"the table {table!r} is read in the blocks {_shown(own)} by {op.name}, but "
                f"{'; '.join(others)}: MindSpore requires every reader of a parameter to "
                f"take it in the same layout (CheckParameterSplit, \"has multiple users, "
                f"but the TensorInfo are different\"); give each reader the same strategy "
                f"and manual_split"))


def check_no_repeat(model: GraphModel, stage_devices: int, source: str) -> None:
    """A manual_split Gather's strategy uses every device of its stage (MindSpore's
    ManualImpl::CheckStrategy, mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc:
    "Manual split doesn't support repeated calc"); `parallel.data` replicas are outside
    the stage's mesh here and each run the op on its own batch."""
    for i, op in enumerate(model.ops):
        if "manual_split" not in op.attrs or op.strategy is None:
            continue
        used = math.prod(op.strategy[0])
        if used < stage_devices:
            raise InputError(source, f"model.ops[{i}].strategy", (
                f"{[list(s) for s in op.strategy]} uses {used} of the {stage_devices} "
                f"devices of the stage: a manual_split Gather's strategy must use them all "
                f"(MindSpore's ManualImpl::CheckStrategy, mindspore/ccsrc/frontend/parallel/"
                f"ops_info/gather_info.cc: \"Manual split doesn't support repeated calc\")"))
