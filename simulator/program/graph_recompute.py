"""Activation recompute of an operator graph (mlp, resnet, `type: graph`): which operators
keep nothing for their backward and run their forward again, what stays stored, and where
`verify` re-runs them.

- `parallel.recompute: full` (gradient checkpointing, Chen et al. 2016, arXiv 1604.06174,
  Sec. 3 and Alg. 1): checkpoints at the unit boundaries a pipeline cuts between
  (`schedule.graph_stages`: an mlp layer, a resnet block or FC layer); only the tensors
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
from dataclasses import dataclass, replace

from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.models.opgraph import graph_model
from simulator.models.registry import family
from simulator.program.comm_options import recompute_comm_ops
from simulator.sharding.lower import Saved, forward_specs
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan

__all__ = ["Recomputed", "Recomputing", "recomputing", "recomputed", "recompute_saved",
           "as_recompute", "verify_runs", "regen_units"]


@dataclass(frozen=True)
class Recomputed:
    """The recomputed operators (by name) and the run each belongs to (a run re-runs
    together: under `full` a unit, or a `type: graph` model's cell; per operator, a chain
    of consecutive recomputed operators)."""

    run_of: dict[str, int]

    def __contains__(self, name: object) -> bool:
        return name in self.run_of


@dataclass(frozen=True)
class Recomputing:
    """What a scenario recomputes: every operator (`full`) or the `chosen` ones
    (`attrs.recompute`); `scenario` for `parallel.recompute_comm`."""

    full: bool
    chosen: frozenset[str]
    scenario: Scenario

    def ops(self, graph: Graph, units: Sequence[Sequence[str]],
            stage_of: dict[str, int] | None = None) -> Recomputed:
        """The recomputed operators of `graph` (its `units` in order) and their runs:
        consecutive recomputed operators of one block (`full`: a unit, or a `type: graph`
        model's cell; per operator: any) on one pipeline stage (`stage_of`), keeping only
        the runs whose re-run makes something the backward reads (`_useful`)."""
        names = [o for u in units for o in u]
        if self.full:
            chosen = frozenset(names)
            graph_cells = self.scenario.model.type == "graph"
            block = {op: _cell(op) if graph_cells else u
                     for u, ns in enumerate(units) for op in ns}
        else:
            chosen, block = self.chosen, {}
        run_of: dict[str, int] = {}
        run, before = -1, None
        for op in names:
            key = (block.get(op), None if stage_of is None else stage_of[op])
            if op in chosen:
                if before is None or before[0] not in chosen or before[1] != key:
                    run += 1
                run_of[op] = run
            before = (op, key)
        kept = _useful(graph, run_of)
        if not kept or (not self.full and len(kept) < len(run_of)):
            raise InputError(self.scenario.source, *self._inert(run_of, kept))
        return Recomputed(kept)

    def _inert(self, run_of: dict[str, int], kept: dict[str, int]) -> tuple[str, str]:
        """(key, message) of a recompute that would make nothing the backward reads."""
        if self.full:
            return "parallel.recompute", (
                f"full finds nothing to recompute in this model of type "
                f"'{self.scenario.model.type}': no block's re-run would make a tensor its "
                f"backward reads (its operators keep only their inputs from other blocks; "
                f"allowed: none, or attrs.recompute: true on the operators whose outputs "
                f"are kept)")
        ops = getattr(self.scenario.model, "ops", ())
        i, op = next((i, op) for i, op in enumerate(ops)
                     if op.name in run_of and op.name not in kept)
        return f"model.ops[{i}].attrs.recompute", (
            f"true: no operator's backward reads what {op.name} makes (it is kept by no "
            f"one, or by a recomputed operator of another run), so its re-run would change "
            f"nothing (allowed: false)")

    def unit(self, plan: ShardingPlan, dtype: str, e: float, sv: Saved,
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
            return recompute_comm_ops(self.scenario, ops, plan.mesh)
        return ops, 0.0

    def check(self, ops: tuple, mesh: Mesh) -> None:
        """InputError where `recompute_comm.tensor: false` finds no collective to keep in
        `ops`, the forward of the units that recompute (`comm_options.recompute_comm_ops`)."""
        # (no forward at all is passed as one data-parallel op: it holds no collective to
        # keep either, and recompute_comm_ops says so)
        recompute_comm_ops(self.scenario, ops or (CommSpec("none", "all_reduce", 0.0,
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


def _cell(op: str) -> str:
    """The cell an operator of a `type: graph` model belongs to: its dotted name's prefix
    (`ffn.mapping` -> `ffn`, MindSpore's parameter and operator naming by cell path), or
    the operator itself."""
    return op.rsplit(".", 1)[0] if "." in op else op


def _useful(graph: Graph, run_of: dict[str, int]) -> dict[str, int]:
    """`run_of` without the runs whose re-run would make nothing the backward reads: a run
    is kept when it drops a tensor some operator saves (`OpFamily.saves`; dropped: no
    recomputed operator of another run keeps it, the storage rule of `recompute_saved`).
    Extras alone (a softmax's probabilities) do not count: re-making them would store the
    inputs they are made from instead. Repeated until no run is left out (leaving one out
    can make another's outputs dropped or kept)."""
    made = {op.output: op.name for op in graph.ops}
    keepers: dict[str, list[str]] = {}
    for op in graph.ops:
        idx = op.family.saves if op.family.saves is not None else range(len(op.inputs))
        for i in idx:
            name = op.output if i == -1 else op.inputs[i]
            if name in made and graph.tensors[name].kind == "activation":
                keepers.setdefault(name, []).append(op.name)
    while True:
        keep: set[int] = set()
        for name, ks in keepers.items():
            r = run_of.get(made[name])
            if r is not None and not any(run_of.get(k, r) != r for k in ks):
                keep.add(r)
        out = {op: r for op, r in run_of.items() if r in keep}
        if len(out) == len(run_of):
            return out
        run_of = out


def recomputing(scenario: Scenario) -> Recomputing | None:
    """What an operator graph scenario recomputes; None where nothing."""
    m = scenario.model
    chosen = frozenset(op.name for op in graph_model(m).ops
                       if op.attrs.get("recompute") is True) \
        if family(m).writes_ops else frozenset()
    full = scenario.parallel.recompute == "full"
    return Recomputing(full, chosen, scenario) if full or chosen else None


def recomputed(scenario: Scenario, graph: Graph, units: Sequence[Sequence[str]],
               stage_of: dict[str, int] | None = None) -> Recomputed | None:
    """The operators `scenario` recomputes (None: none), `Recomputing.ops`."""
    how = recomputing(scenario)
    return None if how is None else how.ops(graph, units, stage_of)


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


def verify_runs(names: Sequence[str], consumers: dict[str, tuple[str, ...]],
                outputs: dict[str, str], rc: Recomputed,
                stage_of: dict[str, int] | None = None
                ) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """{op index that triggers a re-run: (the run's op indices, the indices of operators
    outside it whose saved inputs the re-run refreshes)} for `numeric.execute.Recompute`:
    the run re-runs before the backward of its last operator, or earlier where a
    non-recomputed operator on the same stage reads its output (per-operator recompute:
    the output was not stored; runs one operator triggers re-run together, in order).
    `names`: the operators in plan order; `consumers`:
    {tensor: operators reading it}; `outputs`: {operator: its output tensor}."""
    index = {n: k for k, n in enumerate(names)}
    runs: dict[int, list[int]] = {}
    for n in names:
        if n in rc:
            runs.setdefault(rc.run_of[n], []).append(index[n])
    out: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for members in runs.values():
        stage = None if stage_of is None else stage_of[names[members[0]]]
        readers = sorted({index[c] for k in members for c in consumers.get(
            outputs[names[k]], ()) if c not in rc
            and (stage_of is None or stage_of[c] == stage)})
        at = max([members[-1], *readers])
        before = out.get(at, ((), ()))  # runs one reader triggers re-run together
        out[at] = (tuple(sorted((*before[0], *members))),
                   tuple(sorted({*before[1], *readers})))
    return out


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
