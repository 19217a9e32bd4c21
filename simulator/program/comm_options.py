"""Two MindSpore communication options applied to the planned graph `run` times and `verify`
executes:

- `parallel.enable_alltoall` (`set_auto_parallel_context(enable_alltoall=...)`): whether a
  redistribution may move S(d) -> S(e) by one all-to-all, or must all-gather and slice
  locally (`sharding.redistribute`). The all-to-all sends (n-1)/n of a device's block; the
  all-gather sends (n-1)/n of the gathered tensor, n times more (nccl-tests
  doc/PERFORMANCE.md bus bandwidth). `plan` builds the scenario's plan under the key and
  refuses `false` where no redistribution of the plan is an all-to-all (it would change
  nothing).
- `parallel.recompute_comm.tensor` (`Cell.recompute(mp_comm_recompute=...)`): false keeps
  the outputs of the model-parallel collectives inside the recomputed region from the
  forward, so the recompute pass runs only their region's kernels (`kept_outputs`): the
  backward moves fewer bytes and the kept outputs stay in memory per micro-batch.
"""

from __future__ import annotations

import math

from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.program.program import Op
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["plan", "moves_all_to_all", "output_bytes", "recompute_comm_ops"]

# mesh axes of the optimizer's (data-parallel) collectives; every other axis is model
# parallel (MindSpore's "mp" communication operators)
_DATA_AXES = ("dp",)


def moves_all_to_all(p: ShardingPlan) -> bool:
    """Whether a forward or backward redistribution of plan `p` is an all-to-all."""
    items = p.forward_items() + p.backward_items()
    return any(step is not None and step.kind == "all_to_all" for _, step in items)


def plan(scenario: Scenario, graph: Graph, mesh: Mesh, itemsize: int) -> ShardingPlan:
    """The scenario's sharding plan under `parallel.enable_alltoall`; InputError when the
    key is false and the plan it would change has no all-to-all."""
    allowed = scenario.parallel.enable_alltoall
    out = build_plan(graph, mesh, itemsize, allowed)
    if not allowed and not moves_all_to_all(build_plan(graph, mesh, itemsize)):
        raise InputError(scenario.source, "parallel.enable_alltoall", (
            "false changes nothing here: no redistribution of this scenario's plan is an "
            "all-to-all (allowed: true; the MoE dispatch and combine are all-to-alls)"))
    return out


def output_bytes(op: CommSpec, mesh: Mesh) -> float:
    """Bytes of the tensor a collective leaves on one device: its buffer (nccl-tests:
    all_gather's gathered output, all_reduce's and all_to_all's buffer), or the input
    over the group for a reduce_scatter."""
    if op.collective == "reduce_scatter":
        return op.bytes / mesh.shape[mesh.axis_index(op.axis)]
    return op.bytes


def recompute_comm_ops(scenario: Scenario, ops: tuple[Op, ...], mesh: Mesh
                       ) -> tuple[tuple[Op, ...], float]:
    """(the recompute pass of one layer, bytes its forward keeps for it): under
    `parallel.recompute_comm.tensor: false` the model-parallel collectives of `ops` are
    dropped and their outputs kept; InputError when `ops` has none (the key would change
    nothing)."""
    if scenario.parallel.recompute_comm.tensor or not ops:
        return ops, 0.0
    mp = [op for op in ops if isinstance(op, CommSpec) and op.axis not in _DATA_AXES]
    if not mp:
        raise InputError(scenario.source, "parallel.recompute_comm.tensor", (
            f"false changes nothing here: the ops parallel.recompute="
            f"{scenario.parallel.recompute} re-runs hold no model-parallel collective "
            f"(allowed: true; false applies to recompute full with tensor, context or "
            f"expert parallel)"))
    kept = math.fsum(output_bytes(op, mesh) for op in mp)
    return tuple(op for op in ops if not any(op is c for c in mp)), kept
