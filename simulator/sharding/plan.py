"""A sharding plan: every operator's N-D signature on a mesh, the layout every tensor is kept
in, and the redistributions between them.

Parameters and inputs are kept in the layout their first consumer asks for (Partial becomes
Broadcast: a stored value is whole), an input with a dataset strategy in the layout the
dataset loads it in (`notation.dataset_layout`); an activation keeps its producer's output
layout (or the op's requested output layout). Every other mismatch is a redistribution
planned on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from simulator.graph.graph import Graph, OpNode
from simulator.sharding.layout import Layout
from simulator.sharding.manual_gather import manual_from_placements, manual_gather_signature
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import (
    data_parallel_default,
    dataset_layout,
    from_axis_choices,
    from_mindspore,
    from_sbp,
    mindspore_out_layout,
)
from simulator.sharding.placement import B, Broadcast, Partial, Placement, Shard, dual
from simulator.sharding.redist_steps import RedistStep, frozen, moved_bytes
from simulator.sharding.redistribute import plan_redistribution
from simulator.sharding.rules import Sig1D, Signature, SignatureError

__all__ = ["OpPlan", "ShardingPlan", "build_plan", "Strategy", "grad_layouts", "group_ranks",
           "Item", "keep_axes", "op_internal_steps", "split_on", "with_blocks"]

# One entry of a pass: (op name, a redistribution or internal collective step), or
# (op name, None) where the op itself computes.
Item = tuple[str, RedistStep | None]


@dataclass(frozen=True)
class Strategy:
    """A sharding request in one of the notations (see notation.py)."""

    axes: dict[str, str] | None = None
    in_strategy: list[list[int]] | None = None
    out_strategy: list[list[int]] | None = None
    placements: dict[str, list[str]] | None = None
    # Set by sharding propagation (simulator/sharding/propagate/search.py): the N-D signature it
    # chose, used as is.
    signature: Signature | None = None
    # With `signature`: the layout the output is re-laid in (an out_strategy resolved on a
    # smaller mesh and widened, `sharding.outer_axis`); None: the signature's own.
    out_layout: Layout | None = None
    # MindSpore's Gather manual_split: explicit blocks of the first input's dim 0 (each of
    # its Shard(0) placements carries them, `Shard.sizes`)
    manual_split: tuple[int, ...] | None = None


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
    # redistributions may use all-to-all (MindSpore enable_alltoall; false: all-gather and
    # a local slice instead, `sharding.redistribute`)
    enable_alltoall: bool = True

    def op_plan(self, name: str) -> OpPlan:
        for p in self.ops:
            if p.op.name == name:
                return p
        raise KeyError(name)

    def input_steps(self, plan: OpPlan, i: int) -> list[RedistStep]:
        """Steps that bring input i of an op from its kept layout to the one it consumes."""
        name = plan.op.inputs[i]
        return plan_redistribution(self.layouts[name], plan.sig.input_layout(i),
                                   self.graph.tensors[name].shape, self.mesh, self.itemsize,
                                   enable_alltoall=self.enable_alltoall)

    def output_steps(self, plan: OpPlan) -> list[RedistStep]:
        return plan_redistribution(plan.sig.output_layout, plan.out_layout,
                                   self.graph.tensors[plan.op.output].shape, self.mesh,
                                   self.itemsize, enable_alltoall=self.enable_alltoall)

    def forward_steps(self) -> list[tuple[str, RedistStep]]:
        """Every communication-or-slice step of the forward pass, labelled by op."""
        return [(name, s) for name, s in self.forward_items() if s is not None]

    def forward_items(self) -> list[Item]:
        return list(self._forward_items)

    @cached_property
    def _forward_items(self) -> tuple[Item, ...]:
        """The forward pass in order: each op's input redistributions (a tensor already
        brought to a layout is not moved again for a second consumer: q, k and v share one
        all-gather), the op, its internal collectives, its output re-layout."""
        out: list[Item] = []
        made: set[tuple[str, Layout]] = set()
        for p in self.ops:
            for i, name in enumerate(p.op.inputs):
                key = (name, p.sig.input_layout(i))
                if key not in made:
                    made.add(key)
                    out += [(p.op.name, s) for s in self.input_steps(p, i)]
            out.append((p.op.name, None))
            out += [(p.op.name, s) for s in self.internal_steps(p)]
            out += [(p.op.name, s) for s in self.output_steps(p)]
        return tuple(out)

    def move(self, name: str, src: Layout, dst: Layout, keep: tuple[str, ...] = ()
             ) -> list[RedistStep]:
        """Steps bringing tensor `name` from `src` to `dst`, touching no axis in `keep`."""
        return plan_redistribution(src, dst, self.graph.tensors[name].shape, self.mesh,
                                   self.itemsize, cost=keep_axes(self.mesh, keep),
                                   enable_alltoall=self.enable_alltoall)

    def internal_steps(self, p: OpPlan, phase: str = "fwd") -> list[RedistStep]:
        """The op's own collectives (GroupKernel.steps) on each axis that splits an internal
        label, at the op's local output size, in the forward or the backward pass."""
        return op_internal_steps(p.op, p.sig, self.graph, self.mesh, self.itemsize, phase)

    def loss_grad_layout(self) -> Layout:
        """Where the loss gradient is seeded: the loss's layout, Partial axes whole."""
        return _whole(self.layouts[self.graph.loss])

    def backward_items(self) -> list[Item]:
        return list(self._backward[0])

    def grad_layout(self, param: str) -> Layout | None:
        """The layout a parameter's accumulated gradient is kept in before its reduction
        (the layout of its first contribution), as `backward_items` ends."""
        return self._backward[1].get(param)

    @cached_property
    def _backward(self) -> tuple[tuple[Item, ...], dict[str, Layout]]:
        """The backward pass as `numeric.execute` runs it: per op in reverse, its output
        gradient's contributions each moved to the op's gradient layout, then the op's VJP;
        last, each parameter's contributions moved to the layout of its first."""
        grads: dict[str, dict[Layout, None]] = {self.graph.loss: {self.loss_grad_layout(): None}}
        out: list[Item] = []
        for p in reversed(self.ops):
            slots = grads.pop(p.op.output, {})
            if not slots:
                continue
            dy, ins = grad_layouts(p)
            for layout in slots:
                out += [(p.op.name, s) for s in self.move(p.op.output, layout, dy)]
            out.append((p.op.name, None))
            out += [(p.op.name, s) for s in self.internal_steps(p, "bwd")]
            wants = p.op.family.grads_for(len(ins))
            for i, name in enumerate(p.op.inputs):
                if wants[i] and self.graph.tensors[name].kind not in ("input", "label"):
                    grads.setdefault(name, {})[ins[i]] = None
        firsts: dict[str, Layout] = {}
        for t in self.graph.of_kind("parameter"):
            layouts = list(grads.get(t.name, {}))
            if layouts:
                firsts[t.name] = layouts[0]
            out += [(t.name, s) for layout in layouts[1:]
                    for s in self.move(t.name, layout, layouts[0])]
        return tuple(out), firsts


@lru_cache(maxsize=256)
def keep_axes(mesh: Mesh, names: tuple[str, ...]):
    """The planner's cost with the named axes left untouched (one callable per (mesh,
    names): the planner caches its searches on the cost function)."""
    axes = tuple(mesh.axis_index(n) for n in names if n in mesh.names)
    return frozen(axes) if axes else moved_bytes


def _whole(layout: Layout) -> Layout:
    return Layout(tuple(B if isinstance(q, Partial) else q for q in layout.placements))


def grad_layouts(p: OpPlan) -> tuple[Layout, tuple[Layout, ...]]:
    """(layout of the op's output gradient, layouts of its input gradients). Along an axis
    where the output is split or Partial the gradients are the duals (S -> S, P -> B, and an
    input broadcast there gets a Partial gradient); along an axis where the output is
    broadcast every rank computes the whole gradient, so the input gradients keep the
    inputs' placements (a replicated region, or a label combined by internal collectives)."""
    out = p.sig.output_layout.placements
    ins = []
    for i in range(len(p.op.inputs)):
        placed = p.sig.input_layout(i).placements
        ins.append(Layout(tuple(q if isinstance(o, Broadcast) else dual(q)
                                for q, o in zip(placed, out))))
    return _whole(p.sig.output_layout), tuple(ins)


def op_internal_steps(op: OpNode, sig: Signature, graph: Graph, mesh: Mesh, itemsize: int,
                      phase: str = "fwd") -> list[RedistStep]:
    """The collectives of `op`'s group kernel under `sig` (see `internal_steps`)."""
    fam = op.family
    if fam.group is None:
        return []
    out = sig.output_layout
    shapes = graph.shapes(op)
    ins_local = [sig.input_layout(i).local_shape(s, mesh) for i, s in enumerate(shapes)]
    local = out.local_shape(graph.tensors[op.output].shape, mesh)
    return [RedistStep(kind, axis, out, out, nbytes)
            for axis, label in _internal_labels(op, sig, graph, mesh)
            for kind, nbytes in fam.group.label_steps(label, shapes, ins_local, local,
                                                      mesh.shape[axis], float(itemsize),
                                                      phase, op.attrs)]


def _internal_labels(op: OpNode, sig: Signature, graph: Graph, mesh: Mesh
                     ) -> list[tuple[int, str]]:
    """(mesh axis of more than one device, the internal label it splits) of the op."""
    view = graph.labels(op)
    out = []
    for a, s in enumerate(sig.axes):
        if mesh.shape[a] == 1:
            continue
        for labs, q in zip(view.inputs, s.inputs):
            if isinstance(q, Shard) and labs[q.dim] in view.internal:
                out.append((a, str(labs[q.dim])))
                break
    return out


def _internal_axes(p: OpPlan, graph: Graph, mesh: Mesh) -> list[int]:
    """Mesh axes (of more than one device) along which the op splits an internal label."""
    return [a for a, _ in _internal_labels(p.op, p.sig, graph, mesh)]


def group_ranks(p: OpPlan, graph: Graph, mesh: Mesh) -> list[list[int]] | None:
    """For an op with internal collectives: the groups of ranks that hold the shards of one
    row (ranks differing only on the internal axes). None for any other op."""
    if p.op.family.group is None:
        return None
    axes = _internal_axes(p, graph, mesh)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in range(mesh.size):
        key = tuple(c for a, c in enumerate(mesh.coords(r)) if a not in axes)
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def with_blocks(sig: Signature, i: int, dim: int, sizes: tuple[int, ...]) -> Signature:
    """`sig` with input `i`'s dim `dim` cut into the explicit blocks `sizes` on every mesh
    axis that splits it."""
    def placed(j: int, q: Placement) -> Placement:
        return Shard(dim, sizes) if j == i and isinstance(q, Shard) and q.dim == dim else q
    return Signature(tuple(Sig1D(tuple(placed(j, q) for j, q in enumerate(s.inputs)),
                                 s.output) for s in sig.axes))


def _resolve(op: OpNode, graph: Graph, mesh: Mesh) -> tuple[Signature, Layout | None]:
    blocks = getattr(op.strategy, "manual_split", None)
    st: Any = op.strategy
    if blocks and st.signature is None:
        # MindSpore's ManualImpl (gather_info.cc): each device its block of rows and its
        # column block of ids, no reduction (`sharding.manual_gather`)
        if st.in_strategy is not None:
            return manual_gather_signature(graph.labels(op), mesh, st.in_strategy,
                                           blocks), None
        if st.placements is not None:
            return with_blocks(manual_from_placements(graph.labels(op), mesh, op.inputs,
                                                      st.placements), 0, 0, blocks), None
    sig, target = _resolve_notation(op, graph, mesh)
    return (with_blocks(sig, 0, 0, blocks) if blocks else sig), target


def _resolve_notation(op: OpNode, graph: Graph, mesh: Mesh
                      ) -> tuple[Signature, Layout | None]:
    view, shapes = graph.labels(op), graph.shapes(op)
    st: Any = op.strategy
    if st is None:
        return data_parallel_default(view, mesh, shapes), None
    if st.signature is not None:
        return st.signature, st.out_layout
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
        sig.input_layout(i).check(graph.tensors[name].shape, mesh, uneven=True)
    sig.output_layout.check(graph.tensors[op.output].shape, mesh, uneven=True)


def split_on(layout: Layout, shape: tuple[int, ...], mesh: Mesh, axes: tuple[str, ...]
             ) -> Layout:
    """`layout` further split on each mesh axis of `axes` where it is broadcast: along the
    first dim that the axis's size then still divides (the kept layout of a parameter
    gathered before use, `TensorDef.gathered`). The axis splits the block the outer axes
    left (layout.py), so on the innermost mesh axis one all-gather restores the consumer's
    layout; a parameter with no such dim stays whole there."""
    ps = list(layout.placements)
    for name in axes:
        a = mesh.axis_index(name)
        if not isinstance(ps[a], Broadcast):
            continue
        for d, n in enumerate(shape):
            if layout.sizes(d):
                continue  # explicit blocks (manual_split) are not cut again
            if n % (Layout(tuple(ps)).split_factor(d, mesh) * mesh.shape[a]) == 0:
                ps[a] = Shard(d)
                break
    return Layout(tuple(ps))


def build_plan(graph: Graph, mesh: Mesh, itemsize: int = 8, enable_alltoall: bool = True
               ) -> ShardingPlan:
    """Resolve every op's strategy; SignatureError/LayoutError name the op on failure.
    `enable_alltoall=False`: the plan's redistributions use no all-to-all."""
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
                t = graph.tensors[name]
                layouts[name] = split_on(dataset_layout(t.load, t.shape, mesh) or Layout(
                    tuple(B if isinstance(p, Partial) else p for p in kept)), t.shape, mesh,
                    t.gathered)
        out = target or sig.output_layout
        layouts[op.output] = out
        plans.append(OpPlan(op, sig, out))
    return ShardingPlan(graph, mesh, tuple(plans), layouts, itemsize, enable_alltoall)
