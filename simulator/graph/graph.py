"""The logical operator graph: named tensors with shapes, operators in execution order.

Built through `GraphBuilder`, which infers every output shape as ops are added, so a Graph
is always shape-consistent. The last op's output is the scalar loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from simulator.graph.ops import OpError, get_family
from simulator.graph.ops.base import LabelView, OpFamily

__all__ = ["TensorDef", "OpNode", "Graph", "GraphBuilder"]

TensorKind = Literal["input", "parameter", "label", "activation"]


@dataclass(frozen=True)
class TensorDef:
    name: str
    shape: tuple[int, ...]
    kind: TensorKind = "activation"
    # an input's or label's dataset strategy (MindSpore `dataset_strategy`): how the devices
    # load it -- 'full_batch', 'data_parallel' or slices per dim; None: as its first
    # consumer reads it (`sharding.notation.dataset_layout`)
    load: str | tuple[int, ...] | None = None
    # a parameter's mesh axes on which it is KEPT split beyond its first consumer's layout
    # and all-gathered there before use (3-D tensor parallel's weight axis,
    # `sharding.transformer_plan`); its gradient comes back reduce-scattered
    gathered: tuple[str, ...] = ()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, eq=False)
class OpNode:
    """One operator application. `strategy` holds a user's sharding request in raw form
    (MindSpore tuples, SBP strings, or per-axis label choices); `sharding.plan` resolves it."""

    name: str
    type: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    strategy: Any = None
    stage: int = 0

    @property
    def family(self) -> OpFamily:
        return get_family(self.type)

    def __str__(self) -> str:
        return f"{self.output} = {self.type}({', '.join(self.inputs)})"


@dataclass(frozen=True, eq=False)
class Graph:
    tensors: dict[str, TensorDef]
    ops: tuple[OpNode, ...]

    @property
    def loss(self) -> str:
        return self.ops[-1].output

    def shapes(self, op: OpNode) -> list[tuple[int, ...]]:
        return [self.tensors[n].shape for n in op.inputs]

    def labels(self, op: OpNode) -> LabelView:
        return op.family.labels(self.shapes(op), op.attrs)

    def of_kind(self, kind: TensorKind) -> list[TensorDef]:
        return [t for t in self.tensors.values() if t.kind == kind]

    def consumers(self, tensor: str) -> list[OpNode]:
        return [op for op in self.ops if tensor in op.inputs]

    def forward_flops(self) -> float:
        return sum(op.family.flops(self.shapes(op), self.tensors[op.output].shape, op.attrs)
                   for op in self.ops)


class GraphBuilder:
    """Mutable helper that builds a Graph op by op, inferring shapes."""

    def __init__(self) -> None:
        self.tensors: dict[str, TensorDef] = {}
        self.ops: list[OpNode] = []

    def tensor(self, name: str, shape: tuple[int, ...] | list[int],
               kind: TensorKind = "input") -> str:
        if name in self.tensors:
            raise OpError(f"tensor {name!r} is defined twice")
        self.tensors[name] = TensorDef(name, tuple(int(n) for n in shape), kind)
        return name

    def op(self, type_: str, inputs: list[str] | tuple[str, ...], output: str, *,
           name: str | None = None, strategy: Any = None, stage: int = 0,
           **attrs: Any) -> str:
        family = get_family(type_)
        family.check_arity(len(inputs))
        for n in inputs:
            if n not in self.tensors:
                raise OpError(f"input {n!r} is not defined before it is used")
        if type_.lower() == "batchmatmul":
            attrs.setdefault("batch", True)
        shape = family.infer_shape([self.tensors[n].shape for n in inputs], attrs)
        self.tensor(output, shape, "activation")
        self.ops.append(OpNode(name or output, family.name, tuple(inputs), output, attrs,
                               strategy, stage))
        return output

    def build(self) -> Graph:
        if not self.ops:
            raise OpError("the graph has no operators")
        return Graph(dict(self.tensors), tuple(self.ops))
