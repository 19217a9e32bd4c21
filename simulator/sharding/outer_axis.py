"""A data-parallel axis around an operator graph's own mesh (`parallel.data` on `type:
graph`): the mesh gains an outer axis `dp` of D replicas, and every operator's strategy,
written for the model's mesh, gains a placement on it -- the batch split (the dimension
label that carries the batch, `graph.batch_flow`), or broadcast where the operator sees no
batch. A reduction over the batch (the loss's mean) comes out Partial on `dp`, so every
parameter's gradient is Partial there and the lowering's data-parallel reduction (buckets,
ZeRO, `lower.data_parallel`) sums it, as it does for the transformer's `dp`.

The outer axis splits first (`sharding.layout`): replica r holds samples
[r*B/D, (r+1)*B/D), the contiguous slice MindSpore's dataset sharding gives rank r
(`mindspore.dataset` `num_shards`/`shard_id`). Operators without a strategy keep none:
the data-parallel default or sharding propagation chooses them on the whole mesh.
"""

from __future__ import annotations

import dataclasses

from simulator.graph.batch_flow import batch_flow
from simulator.graph.graph import Graph, OpNode
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B
from simulator.sharding.plan import Strategy, _resolve
from simulator.sharding.rules import Sig1D, Signature, SignatureError, split_label

__all__ = ["DATA_AXIS", "with_outer_axis"]

DATA_AXIS = "dp"


def _outer_sig(op: OpNode, graph: Graph, label: str | None) -> Sig1D:
    """The operator's placements on the outer axis: its batch label split, else all B."""
    view = graph.labels(op)
    if label is not None and label in view.splittable():
        return split_label(view, label)
    return Sig1D((B,) * len(view.inputs), B)


def _widened(op: OpNode, graph: Graph, inner: Mesh, mesh: Mesh, outer: Sig1D) -> OpNode:
    """`op` with its strategy resolved on `inner` and the outer placements put in front
    (`mesh`: the widened mesh)."""
    try:
        sig, target = _resolve(op, graph, inner)
    except (SignatureError, ValueError) as exc:
        raise SignatureError(f"op {op.name!r} ({op.type}): {exc}", op.name) from None
    out = target or sig.output_layout
    wide = Signature((outer, *sig.axes))
    layout = Layout((outer.output, *out.placements))
    _check_even(op, graph, inner, mesh, sig, wide)
    return dataclasses.replace(op, strategy=Strategy(
        signature=wide, out_layout=layout if target is not None else None))


def _check_even(op: OpNode, graph: Graph, inner: Mesh, mesh: Mesh, sig: Signature,
                wide: Signature) -> None:
    """SignatureError where the replicas make a split that was even on `inner` uneven (a
    batch too small for the replicas times the strategy's own split of it)."""
    names = (*op.inputs, op.output)
    pairs = [(sig.input_layout(i), wide.input_layout(i)) for i in range(len(op.inputs))]
    pairs.append((sig.output_layout, wide.output_layout))
    for name, (own, widened) in zip(names, pairs):
        shape = graph.tensors[name].shape
        if not own.is_even(shape, inner) or widened.is_even(shape, mesh):
            continue
        d = next(d for d, n in enumerate(shape) if n % widened.split_factor(d, mesh))
        raise SignatureError(
            f"op {op.name!r} ({op.type}): {name} {list(shape)} splits dim {d} "
            f"{widened.split_factor(d, mesh)} ways (the strategy's "
            f"{own.split_factor(d, inner)} times the {mesh.shape[0]} replicas of "
            f"parallel.data), which does not divide {shape[d]}: give a "
            f"training.global_batch_size that it does", op.name)


def with_outer_axis(graph: Graph, inner: Mesh, size: int, name: str = DATA_AXIS
                    ) -> tuple[Graph, Mesh]:
    """`graph` (strategies for `inner`) on the mesh (`name`=size, *inner): each strategy
    widened by its batch split on the new axis; SignatureError naming the op whose strategy
    does not resolve on `inner` or whose batch the replicas cannot split evenly."""
    if name in inner.names:
        raise SignatureError(f"the mesh {inner} already has an axis {name!r}")
    mesh = Mesh(((name, size), *inner.axes))
    labels = batch_flow(graph).labels
    ops = tuple(op if op.strategy is None else _widened(op, graph, inner, mesh, _outer_sig(
        op, graph, labels[op.name])) for op in graph.ops)
    return Graph(graph.tensors, ops), mesh
