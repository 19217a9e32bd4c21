"""A sharding plan: every operator's N-D signature on a mesh, the layout every tensor is kept
in, and the redistributions between them.

Parameters and inputs are kept in the layout their first consumer asks for (Partial becomes
Broadcast: a stored value is whole); an activation keeps its producer's output layout (or the
op's requested output layout). Every other mismatch is a redistribution planned on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.graph.graph import Graph, OpNode
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import (
    data_parallel_default,
    from_axis_choices,
    from_mindspore,
    from_sbp,
    mindspore_out_layout,
)
from simulator.sharding.placement import B, Partial
from simulator.sharding.redistribute import RedistStep, plan_redistribution
from simulator.sharding.rules import Signature, SignatureError

__all__ = ["OpPlan", "ShardingPlan", "build_plan", "Strategy"]


@dataclass(frozen=True)
class Strategy:
    """A sharding request in one of the notations (see notation.py)."""

    axes: dict[str, str] | None = None
    in_strategy: list[list[int]] | None = None
    out_strategy: list[list[int]] | None = None
    placements: dict[str, list[str]] | None = None
    # Set by sharding propagation (simulator/planner/propagate.py): the N-D signature it
    # chose, used as is.
    signature: Signature | None = None


@dataclass(frozen=True, eq=False)
class OpPlan:
    op: OpNode
    sig: Signature
    out_layout: Layout

    def __str__(self) -> str:
        return f"{self.op.name}: {self.sig} => {self.out_layout}"


@dataclass(frozen=True, eq=False)
class ShardingPlan:
    graph: Graph
    mesh: Mesh
    ops: tuple[OpPlan, ...]
    layouts: dict[str, Layout]
    itemsize: int = 8

    def op_plan(self, name: str) -> OpPlan:
        for p in self.ops:
            if p.op.name == name:
                return p
        raise KeyError(name)

    def input_steps(self, plan: OpPlan, i: int) -> list[RedistStep]:
        """Steps that bring input i of an op from its kept layout to the one it consumes."""
        name = plan.op.inputs[i]
        return plan_redistribution(self.layouts[name], plan.sig.input_layout(i),
                                   self.graph.tensors[name].shape, self.mesh, self.itemsize)

    def output_steps(self, plan: OpPlan) -> list[RedistStep]:
        return plan_redistribution(plan.sig.output_layout, plan.out_layout,
                                   self.graph.tensors[plan.op.output].shape, self.mesh,
                                   self.itemsize)

    def forward_steps(self) -> list[tuple[str, RedistStep]]:
        """Every redistribution step of the forward pass, labelled by op. A tensor already
        brought to a layout is not moved again for a second consumer (q, k and v share one
        all-gather)."""
        out: list[tuple[str, RedistStep]] = []
        made: set[tuple[str, Layout]] = set()
        for p in self.ops:
            for i, name in enumerate(p.op.inputs):
                key = (name, p.sig.input_layout(i))
                if key not in made:
                    made.add(key)
                    out += [(p.op.name, s) for s in self.input_steps(p, i)]
            out += [(p.op.name, s) for s in self.output_steps(p)]
        return out


def _resolve(op: OpNode, graph: Graph, mesh: Mesh) -> tuple[Signature, Layout | None]:
    view, shapes = graph.labels(op), graph.shapes(op)
    st: Any = op.strategy
    if st is None:
        return data_parallel_default(view, mesh, shapes), None
    if st.signature is not None:
        return st.signature, None
    if st.axes is not None:
        return from_axis_choices(view, mesh, st.axes), None
    if st.placements is not None:
        return from_sbp(view, mesh, op.inputs, st.placements), None
    sig, taken = from_mindspore(view, mesh, st.in_strategy)
    if st.out_strategy is not None:
        return sig, mindspore_out_layout(view, mesh, sig, taken, st.out_strategy)
    return sig, None


def _check_shapes(op: OpNode, graph: Graph, mesh: Mesh, sig: Signature) -> None:
    for i, name in enumerate(op.inputs):
        sig.input_layout(i).check(graph.tensors[name].shape, mesh)
    sig.output_layout.check(graph.tensors[op.output].shape, mesh)


def build_plan(graph: Graph, mesh: Mesh, itemsize: int = 8) -> ShardingPlan:
    """Resolve every op's strategy; SignatureError/LayoutError name the op on failure."""
    plans, layouts = [], {}
    for op in graph.ops:
        try:
            sig, target = _resolve(op, graph, mesh)
            _check_shapes(op, graph, mesh, sig)
        except (SignatureError, ValueError) as exc:
            raise SignatureError(f"op {op.name!r} ({op.type}): {exc}", op.name) from None
        for i, name in enumerate(op.inputs):
            if name not in layouts:
                kept = sig.input_layout(i).placements
                layouts[name] = Layout(tuple(B if isinstance(p, Partial) else p
                                             for p in kept))
        out = target or sig.output_layout
        layouts[op.output] = out
        plans.append(OpPlan(op, sig, out))
    return ShardingPlan(graph, mesh, tuple(plans), layouts, itemsize)
