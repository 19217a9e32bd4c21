"""Plans for the MLP and the ResNet-like builders on a (dp, tp) mesh.

MLP: the batch split on dp; on tp, Megatron's pairing -- a column-parallel MatMul (output
features split) followed by a row-parallel one (contraction split, Partial result).
ResNet-like (the seeds' boundary-operator example): the conv half data parallel over every
device (or on the image's H/W tiles where the dataset strategy loads them so), the FC half
model parallel on tp.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator.graph.graph import Graph, OpNode
from simulator.models.dataset import with_dataset
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import Strategy

__all__ = ["plan_mlp", "plan_resnet"]


def _set(op: OpNode, dp: str, tp: str) -> OpNode:
    return dataclasses.replace(op, strategy=Strategy(axes={"dp": dp, "tp": tp}))


def _fc_chain(ops: list[OpNode], matmul_prefix: str) -> list[OpNode]:
    """Column, row, column, ... for MatMuls; elementwise ops follow their producer."""
    out, column, last_split = [], True, "B"
    for op in ops:
        if op.type == "Einsum" and op.name.startswith(matmul_prefix):
            out.append(_set(op, "M", "N" if column else "K"))
            last_split = "d1" if column else "B"
            column = not column
        elif op.type == "SoftmaxCrossEntropy" or op.type == "ReduceMean":
            out.append(_set(op, "d0", "B"))
        else:
            out.append(_set(op, "d0", last_split))
    return out


def plan_mlp(graph: Graph) -> Graph:
    return Graph(graph.tensors, tuple(_fc_chain(list(graph.ops), "")))


_CONV_LABEL = {0: "n", 2: "y", 3: "x"}  # image dim -> Conv2D label (channels stay whole)


def plan_resnet(graph: Graph, image_split: dict[str, int] | None = None) -> Graph:
    """`image_split`: mesh axis -> image dim the dataset splits there (0, 2 or 3); the conv
    half runs on that split (H/W tiles with their halo exchange) instead of the batch."""
    conv_half = [op for op in graph.ops if op.name.startswith(("conv", "relu", "res"))]
    rest = [op for op in graph.ops if op not in conv_half]
    split = {"dp": 0, "tp": 0, **(image_split or {})}

    def choice(op: OpNode, axis: str) -> str:
        dim = split[axis]
        return _CONV_LABEL[dim] if op.type == "Conv2D" else f"d{dim}"

    head = [_set(op, choice(op, "dp"), choice(op, "tp")) for op in conv_half]
    flatten = [_set(op, "d0", "d0") for op in rest if op.type == "Reshape"]
    fc = _fc_chain([op for op in rest if op.type != "Reshape"], "fc")
    return Graph(graph.tensors, tuple(head + flatten + fc))


def written_builtin(s: Any, graph: Graph, planned: Graph, mesh: Mesh) -> tuple[Graph, Mesh]:
    """A built-in plan (`planned`, of `graph`) as the scenario runs it: under
    `parallel.mode: auto` only the weight operators keep theirs (the key operators;
    propagation chooses the rest), and the dataset strategy on the inputs."""
    if s.parallel.mode == "auto":
        params = {t.name for t in graph.of_kind("parameter")}
        planned = Graph(planned.tensors, tuple(
            op if params & set(op.inputs) else dataclasses.replace(op, strategy=None)
            for op in planned.ops))
    return with_dataset(planned, s, mesh), mesh
