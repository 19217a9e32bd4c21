"""`type: graph` scenarios: tensors and operators written out in YAML, with sharding given
as MindSpore `strategy` / `out_strategy` tuples or SBP `placements` on `model.mesh`.

Without `model.mesh`, the mesh is the device count factored into primes, outermost first
(8 devices: axes m0=2, m1=2, m2=2), which MindSpore strategy numbers map onto in order.
"""

from __future__ import annotations

from simulator.config.scenario.schema import GraphModel
from simulator.errors import InputError
from simulator.graph.graph import Graph, GraphBuilder
from simulator.graph.ops import OpError, get_family
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import Strategy

__all__ = ["graph_from_model", "mesh_for_graph", "prime_mesh", "strategy_key"]


def prime_mesh(devices: int) -> Mesh:
    axes: list[tuple[str, int]] = []
    n, p = devices, 2
    while n > 1:
        while n % p == 0:
            axes.append((f"m{len(axes)}", p))
            n //= p
        p += 1
    return Mesh(tuple(axes) or (("m0", 1),))


def mesh_for_graph(model: GraphModel, devices: int, source: str, stages: int = 1,
                   replicas: int = 1) -> Mesh:
    """The mesh of `devices` devices (one data-parallel replica's of one pipeline stage's,
    of `stages` stages and `replicas` replicas)."""
    if model.mesh is None:
        return prime_mesh(devices)
    mesh = Mesh(tuple(model.mesh.items()))
    if mesh.size != devices:
        sizes = "*".join(str(s) for s in mesh.shape)
        per = f", {devices} per pipeline stage" if stages > 1 else ""
        if replicas > 1:
            per = (f", {devices} per replica of parallel.data={replicas}"
                   f"{' and pipeline stage' if stages > 1 else ''}")
        raise InputError(source, "model.mesh", f"axes multiply to {sizes} = {mesh.size}; "
                         f"the cluster has {devices * stages * replicas} devices{per}")
    return mesh


def _strategy(op, i: int, source: str) -> Strategy | None:
    if op.placements is not None and op.strategy is not None:
        raise InputError(source, f"model.ops[{i}]", "give either strategy or placements, "
                         "not both")
    blocks = op.attrs.get("manual_split")
    if op.placements is not None:  # (blocks too: a strategy checkpoint loaded)
        return Strategy(placements={k: list(v) for k, v in op.placements.items()},
                        manual_split=tuple(blocks) if blocks else None)
    if op.strategy is not None:
        return Strategy(in_strategy=[list(t) for t in op.strategy],
                        out_strategy=[list(t) for t in op.out_strategy]
                        if op.out_strategy else None,
                        manual_split=tuple(blocks) if blocks else None)
    if op.out_strategy is not None:
        raise InputError(source, f"model.ops[{i}].out_strategy", "needs strategy too")
    return None


# MindSpore operator attributes (MindSpore docs) that the simulator does not model yet: refused
# by name rather than accepted and ignored
NOT_SIMULATED: dict[str, str] = {}
# attributes that say how the training runs an operator, not what it computes: where it runs
# in the pipeline (MindSpore Cell.pipeline_stage, checked by the scenario rules, read by
# simulator/program/graph_stages.py) and whether its output is recomputed for the backward
# (MindSpore Primitive.recompute(), read by simulator/program/graph_recompute.py), and a
# Gather's manual_split (the rows of each slice of its table, MindSpore "Other Features";
# checked by simulator/config/scenario/manual_split_rules.py, carried by the op's Strategy
# into the table's layout as explicit blocks, `Shard.sizes`): kept out of the operator's
# own attrs
STAGE_ATTRS = ("pipeline_stage", "recompute", "manual_split")


# Where an operator runs (MindSpore `primitive_target`, MindSpore "Other Features"):
# 'CPU' places it on the host (simulator/lower/host.py); the device's own names keep it there
PLACEMENT = {"primitive_target": ("CPU", "GPU", "Ascend")}


def _check_placement(value: object, where: str, source: str) -> None:
    allowed = PLACEMENT["primitive_target"]
    if value not in allowed:
        raise InputError(source, where, f"{value!r}: not a placement (allowed: "
                                        f"{', '.join(allowed)})")


def _check_attrs(op, i: int, source: str) -> None:
    """Every attribute an operator carries is one its family reads."""
    try:
        family = get_family(op.type)
    except OpError:
        return  # the builder says which types exist
    for key in op.attrs:
        if key in family.attrs:
            continue
        where = f"model.ops[{i}].attrs.{key}"
        if key == "recompute" and not isinstance(op.attrs[key], bool):
            raise InputError(source, where, f"{op.attrs[key]!r}: not a boolean (allowed: "
                                            f"true, false)")
        if key in STAGE_ATTRS:
            continue
        if key in PLACEMENT:
            _check_placement(op.attrs[key], where, source)
            continue
        if key in NOT_SIMULATED:
            raise InputError(source, where, f"{op.attrs[key]!r}: {NOT_SIMULATED[key]} is "
                                            f"not simulated yet")
        allowed = ", ".join(family.attrs) or "none"
        raise InputError(source, where, f"unknown attribute of {family.name} "
                                        f"(allowed: {allowed})")


def graph_from_model(model: GraphModel, source: str) -> Graph:
    """Build and check the graph, and resolve every strategy against the model's mesh."""
    b = GraphBuilder()
    for i, t in enumerate(model.tensors):
        try:
            b.tensor(t.name, t.shape, t.kind)
        except OpError as exc:
            raise InputError(source, f"model.tensors[{i}].name", str(exc)) from None
    for i, op in enumerate(model.ops):
        _check_attrs(op, i, source)
        try:
            b.op(op.type, op.inputs, op.output, name=op.name,
                 strategy=_strategy(op, i, source),
                 **{k: v for k, v in op.attrs.items() if k not in STAGE_ATTRS})
        except OpError as exc:
            raise InputError(source, f"model.ops[{i}]", f"{op.name}: {exc}") from None
    return b.build()


def strategy_key(s, exc: Exception) -> str:
    """The dotted key of the strategy a planning error comes from: model.ops[i].strategy
    (or .placements) for an operator graph, else `model`."""
    op = getattr(exc, "op", None)
    # a model that lists its operators (`type: graph`)
    for i, node in enumerate(getattr(s.model, "ops", None) or ()):
        if node.name == op:
            return f"model.ops[{i}].{'placements' if node.placements else 'strategy'}"
    return "model"
