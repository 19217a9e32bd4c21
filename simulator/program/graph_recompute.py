"""The costs of an operator graph's activation recompute (mlp, resnet, `type: graph`; which
operators, and where `verify` re-runs them: `models.recompute`): the forward each unit runs
again and what stays stored.

- `parallel.recompute: full` (gradient checkpointing, Chen et al. 2016, arXiv 1604.06174,
  Sec. 3 and Alg. 1): checkpoints at the unit boundaries a pipeline cuts between
  (`program.graph_stages`: an mlp layer, a resnet block or FC layer); only the tensors
  entering a unit from an earlier one are stored, and each unit's forward runs again right
  before its backward. Peak: the checkpoints plus one unit's full saved set; extra work:
  one more forward per micro-batch. A `type: graph` model's units are single operators,
  whose checkpoints would be every tensor: its blocks are its cells instead, the operators
  sharing a dotted name prefix (`ffn.mapping`, `ffn.act` -> `ffn`), as MindSpore's
  `Cell.recompute()` on every cell. A block whose re-run would make nothing its backward
  reads (a Reshape, an Add: they keep nothing) is not recomputed.
- `attrs.recompute: true` on a `type: graph` operator (MindSpore `Primitive.recompute()`,
  `Cell.recompute()` on the operators of a cell; MindSpore tutorial "Optimization
  Techniques", "Recomputation"): that operator's output is not stored; its forward runs
  again from its (stored) inputs before the first backward that reads the output.
  Consecutive recomputed operators form one run, re-run together.
- `parallel.recompute: selective` means a transformer layer's attention core (Korthikanti
  et al. 2022, Sec. 5); these models have none, so the scenario rules refuse it.

Storage rule (one for both forms): a tensor produced by a recomputed operator is not stored
unless a recomputed operator of another run keeps it (it is that run's checkpoint);
every activation a recomputed operator reads from outside its run is stored (the run
starts from it); the extras (masks, statistics) of recomputed operators are made again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.models.recompute import Recomputed, Recomputing, verify_runs
from simulator.program.comm_options import recompute_comm_ops
from simulator.sharding.lower import Saved, forward_specs
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan

__all__ = ["unit_recompute", "check_kept", "recompute_saved", "as_recompute", "regen_units"]


def unit_recompute(how: Recomputing, plan: ShardingPlan, dtype: str, e: float, sv: Saved,
                   names: Sequence[str], rc: Recomputed) -> tuple[tuple, float]:
    """(the recompute pass of a unit's operators `names`, bytes its forward keeps for
    it): its recomputed operators' forward, without the model-parallel collectives
    under `parallel.recompute_comm.tensor: false` (their outputs kept instead)."""
    chosen = frozenset(n for n in names if n in rc)
    if not chosen:
        return (), 0.0
    ops = as_recompute(forward_specs(plan, dtype, chosen.__contains__, e, sv)
                       + _reader_moves(plan, chosen, rc))
    if any(isinstance(op, CommSpec) and op.axis != "dp" for op in ops):
        return recompute_comm_ops(how.scenario, ops, plan.mesh)
    return ops, 0.0

def check_kept(how: Recomputing, ops: tuple, mesh: Mesh) -> None:
    """InputError where `recompute_comm.tensor: false` finds no collective to keep in
    `ops`, the forward of the units that recompute (`comm_options.recompute_comm_ops`)."""
    # (no forward at all is passed as one data-parallel op: it holds no collective to
    # keep either, and recompute_comm_ops says so)
    recompute_comm_ops(how.scenario, ops or (CommSpec("none", "all_reduce", 0.0,
                                                       "dp", "fwd"),), mesh)


def _reader_moves(plan: ShardingPlan, chosen: frozenset[str], rc: Recomputed
                  ) -> tuple[CommSpec, ...]:
    """The redistributions that bring the recomputed outputs of `chosen` to the layouts
    the operators outside the recompute read them in (per-operator recompute: their
    forward copies were not kept either), once per (tensor, layout)."""
    made = {p.op.output for p in plan.ops if p.op.name in chosen}
    out: list[CommSpec] = []
    seen: set = set()
    for p in plan.ops:
        if p.op.name in rc:
            continue
        for i, name in enumerate(p.op.inputs):
            key = (name, p.sig.input_layout(i))
            if name not in made or key in seen:
                continue
            seen.add(key)
            out += [CommSpec(f"{p.op.name}.{st.kind}", st.kind, st.bytes,  # type: ignore[arg-type]
                             plan.mesh.names[st.axis], "fwd")
                    for st in plan.input_steps(p, i) if st.is_comm]
    return tuple(out)


def recompute_saved(plan: ShardingPlan, sv: Saved, rc: Recomputed, e: float) -> Saved:
    """What stays stored under recompute `rc` (the module docstring's rule)."""
    run_of = rc.run_of
    tensors: dict[str, tuple[float, str, tuple[str, ...]]] = {}
    for name, (nbytes, producer, keepers) in sv.tensors.items():
        if producer in rc and not any(k in rc and run_of[k] != run_of[producer]
                                      for k in keepers):
            continue
        tensors[name] = (nbytes, producer, keepers)
    producer_of = {p.op.output: p.op.name for p in plan.ops}
    g, mesh = plan.graph, plan.mesh
    for p in plan.ops:
        if p.op.name not in rc:
            continue
        for name in p.op.inputs:
            src = producer_of.get(name)
            if g.tensors[name].kind != "activation" or src is None:
                continue
            if src in rc and run_of[src] == run_of[p.op.name]:
                continue  # made again inside the run
            local = plan.layouts[name].local_shape(g.tensors[name].shape, mesh)
            nbytes = e * float(_prod(local))
            _, prod, keepers = tensors.get(name, (nbytes, src, ()))
            if p.op.name not in keepers:
                tensors[name] = (nbytes, prod, keepers + (p.op.name,))
    extra = {op: b for op, b in sv.extra.items() if op not in rc}
    return Saved(tensors, extra)


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def as_recompute(ops: tuple) -> tuple:
    """`ops` (a forward) as the recompute pass: phase 'recompute', nothing saved."""
    return tuple(replace(op, phase="recompute", saved_bytes=0.0) if isinstance(op, ComputeSpec)
                 else replace(op, phase="recompute") for op in ops)


def regen_units(plan: ShardingPlan, rc: Recomputed, unit_of: dict[str, int]
                ) -> dict[int, int]:
    """{unit: the unit whose backward its recomputed operators re-run before} (the
    trigger of `verify_runs`, on the whole graph)."""
    names = [p.op.name for p in plan.ops]
    consumers: dict[str, tuple[str, ...]] = {}
    for p in plan.ops:
        for t in dict.fromkeys(p.op.inputs):
            consumers[t] = consumers.get(t, ()) + (p.op.name,)
    runs = verify_runs(names, consumers, {p.op.name: p.op.output for p in plan.ops}, rc)
    out: dict[int, int] = {}
    for at, (members, _) in runs.items():
        for k in members:
            u = unit_of[names[k]]
            out[u] = max(out.get(u, u), unit_of[names[at]])
    return out
