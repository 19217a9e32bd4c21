"""Pipeline stages of an operator graph (mlp, resnet, `type: graph`).

The planned graph is cut into units, the pieces a stage is made of (GPipe, Huang et al.
2019, Sec. 2: a network as a sequence of L layers partitioned into K cells):

- mlp: one unit per hidden layer (its MatMul and activation); the classifier and the loss
  join the last;
- resnet: one unit per conv block (Conv2D, ReLU, residual Add) and per FC layer (the
  flatten joins the first FC layer; the loss the last);
- graph: one unit per operator.

The units of each virtual stage are, in order of precedence: MindSpore's
`Cell.pipeline_stage` written as `attrs.pipeline_stage` on graph operators (an operator
without it stays on the stage of the one before), `parallel.pipeline_layers` (units per
stage), or a split that minimises the slowest stage's priced work per micro-batch (the
partition PipeDream's optimizer balances, Narayanan et al. SOSP 2019, Sec. 3.1, without
its replication).

A stage sends forward the activations produced on it or before and read after it, in the
layout they are kept in, and receives their gradients back; each unit's `Block` carries
the bytes of the cut after it, and `numeric.pipeline` runs each stage on its own devices
with exactly those sends. Under recompute (`program.graph_recompute`) each unit also carries the
forward it runs again before its backward, and the tensors stored are those the recompute
keeps.
"""

from __future__ import annotations

import math

from simulator.models.recompute import Recomputing
from simulator.models.split import graph_units
from simulator.program.graph_recompute import (
    check_kept,
    recompute_saved,
    regen_units,
    unit_recompute,
)
from simulator.program.host_placement import host_placed
from simulator.program.program import Block
from simulator.sharding.lower import Saved, backward_specs, forward_specs, gradient_steps
from simulator.sharding.plan import ShardingPlan, grad_layouts

__all__ = ["staged_graph", "cut_tensors", "Staged"]

def _local_bytes(plan: ShardingPlan, name: str, layout, e: float) -> float:
    shape = plan.graph.tensors[name].shape
    return e * math.prod(layout.local_shape(shape, plan.mesh))


def cut_tensors(plan: ShardingPlan, units: tuple[tuple[str, ...], ...]
                ) -> tuple[list[dict[str, None]], list[dict[tuple, None]]]:
    """Per cut k (after unit k): the activations crossing it forward (produced up to unit k,
    read after it) and the (tensor, layout) gradient contributions crossing it backward
    (one per layout a later consumer produces, as the numeric backward sums them)."""
    unit_of = {op: u for u, names in enumerate(units) for op in names}
    made = {p.op.output: unit_of[p.op.name] for p in plan.ops}
    fwd: list[dict[str, None]] = [{} for _ in units[:-1]]
    bwd: list[dict[tuple, None]] = [{} for _ in units[:-1]]
    for p in plan.ops:
        u = unit_of[p.op.name]
        wants = p.op.family.grads_for(len(p.op.inputs))
        layouts = grad_layouts(p)[1]
        for i, name in enumerate(p.op.inputs):
            if name not in made or made[name] >= u:
                continue
            for k in range(made[name], u):
                fwd[k][name] = None
                if wants[i]:
                    bwd[k][(name, layouts[i])] = None
    return fwd, bwd


def _params(plan: ShardingPlan, units: tuple[tuple[str, ...], ...]
            ) -> tuple[list[dict[str, int]], tuple[tuple[str, int, int], ...]]:
    """{parameter: local elements} of the parameters each unit reads first, and the spans
    of those read by several units (those only operators on the host CPU read stay in its
    memory: 0 elements on the device, their gradient reductions kept)."""
    graph, mesh = plan.graph, plan.mesh
    readers: dict[str, list[int]] = {}
    on_device: set[str] = set()
    for u, names in enumerate(units):
        for op in names:
            if not host_placed(plan.op_plan(op).op):
                on_device.update(plan.op_plan(op).op.inputs)
            for n in plan.op_plan(op).op.inputs:
                if graph.tensors[n].kind == "parameter":
                    readers.setdefault(n, [])
                    if u not in readers[n]:
                        readers[n].append(u)
    owned: list[dict[str, int]] = [{} for _ in units]
    for n, us in readers.items():
        local = math.prod(plan.layouts[n].local_shape(graph.tensors[n].shape, mesh))
        owned[us[0]][n] = local if n in on_device else 0  # (its gradient is still reduced)
    spans = tuple((n, us[0], us[-1]) for n, us in readers.items() if len(us) > 1)
    return owned, spans


# a graph's units as blocks, the saved tensors several units read ((bytes, units keeping
# it)), and the parameters several units read ((name, first unit, last unit))
Staged = tuple[tuple[Block, ...], tuple[tuple[float, frozenset[int]], ...],
               tuple[tuple[str, int, int], ...]]


def staged_graph(plan: ShardingPlan, model_type: str, dtype: str, e: float,
                 skip: tuple[str, ...], sv: Saved, rc: Recomputing | None = None) -> Staged:
    """The units of a planned operator graph as Blocks with their work, saved tensors and
    the bytes crossing the cut after each (see the module docstring). `skip`: mesh axes
    whose gradient reduction the lowering runs (data parallel); `rc`: what is recomputed
    (`program.graph_recompute`)."""
    units = graph_units(model_type, [p.op.name for p in plan.ops])
    unit_of = {op: u for u, names in enumerate(units) for op in names}
    owned, spans = _params(plan, units)
    steps = gradient_steps(plan, skip)
    on_host = {p.op.name for p in plan.ops if host_placed(p.op)}
    sv = full = Saved({n: t for n, t in sv.tensors.items() if set(t[2]) - on_host},
                      {op: b for op, b in sv.extra.items() if op not in on_host})
    ran = rc.ops(plan.graph, units) if rc is not None else None
    regen: dict[int, int] = {}
    if ran is not None:
        sv = recompute_saved(plan, sv, ran, e)
        regen = regen_units(plan, ran, unit_of)
    fwd, bwd = cut_tensors(plan, units)
    layouts = plan.layouts
    cut_fwd = [sum(_local_bytes(plan, n, layouts[n], e) for n in cut) for cut in fwd] + [0.0]
    cut_bwd = [sum(_local_bytes(plan, n, lay, e) for n, lay in cut) for cut in bwd] + [0.0]
    out = []
    for u, names in enumerate(units):
        mine = set(names)
        select = mine.__contains__
        sync = tuple(c for c in steps if c.name.split(".grad.")[0] in owned[u]
                     or c.name.rsplit(".", 1)[0] in owned[u])
        again, held = unit_recompute(rc, plan, dtype, e, sv, names, ran) if rc and ran \
            else ((), 0.0)
        out.append(Block(
            f"unit{u}", forward_specs(plan, dtype, select, e, sv),
            backward_specs(plan, dtype, select, e), again, params=sum(owned[u].values()),
            param_tensors=len(owned[u]), grad_sync=sync,
            saved_bytes=held + sum(b for op, b in sv.extra.items() if op in mine),
            working_bytes=_dropped(full, sv, mine) if ran else 0.0,
            regen_at=regen.get(u, u) if ran else 0, recomputes=bool(again),
            send_fwd_bytes=cut_fwd[u], send_bwd_bytes=cut_bwd[u], ops=names))
    if rc is not None and not rc.scenario.parallel.recompute_comm.tensor:
        check_kept(rc, tuple(op for b in out if b.recompute for op in b.fwd), plan.mesh)
    kept = tuple((nbytes, frozenset(unit_of[k] for k in keepers))
                 for nbytes, _, keepers in sv.tensors.values())
    return tuple(out), kept, spans


def _dropped(full: Saved, kept: Saved, mine: set[str]) -> float:
    """Bytes the ops `mine` save without recompute and not with it: made again, alive
    while the unit's recomputed forward and backward run."""
    def total(sv: Saved) -> float:
        return (sum(b for b, prod, _ in sv.tensors.values() if prod in mine)
                + sum(b for op, b in sv.extra.items() if op in mine))
    return max(0.0, total(full) - total(kept))
