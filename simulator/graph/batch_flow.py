"""Where the batch runs through an operator graph: an input's or label's first dim is its
batch, and an operator passes it on along the dimension label (`LabelView`) it carries at
that dim -- to the output dim with the same label, or to none where the operator reduces the
batch away (a loss's mean). Data parallelism splits exactly these dims, and a batch size
scales exactly these dims (`models.graph_batch`)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.graph.graph import Graph

__all__ = ["BatchFlow", "batch_flow"]


@dataclass(frozen=True)
class BatchFlow:
    """`dims`: tensor name -> the dim that carries the batch (None: none does, as for a
    parameter or the loss); `labels`: operator name -> the dimension label of its
    iteration space that carries the batch (None: the op sees no batch)."""

    dims: dict[str, int | None]
    labels: dict[str, str | None]


def batch_flow(graph: Graph) -> BatchFlow:
    """The batch dims of every tensor and the batch label of every operator of `graph`."""
    dims: dict[str, int | None] = {
        t.name: (0 if t.kind in ("input", "label") and t.shape else None)
        for t in graph.tensors.values()}
    labels: dict[str, str | None] = {}
    for op in graph.ops:
        view = graph.labels(op)
        label = None
        for name, labs in zip(op.inputs, view.inputs):
            d = dims.get(name)
            if d is not None and labs[d] is not None:
                label = labs[d]
                break
        labels[op.name] = label
        dims[op.output] = view.output.index(label) if label in view.output else None
    return BatchFlow(dims, labels)
