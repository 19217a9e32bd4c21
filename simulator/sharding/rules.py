"""Sharding signatures of an operator, derived from its dimension labels.

On ONE mesh axis an op's valid signatures are: everything broadcast; one splittable label
split (every tensor carrying it is S at that dim; the output is P if the label is reduced,
B if it is internal: combined by the op's own collectives, as in vocabulary-parallel
cross-entropy);
Partial in one linear input with the others broadcast; Partial everywhere for ops linear in
all inputs jointly (Add). N-D signatures are the product over mesh axes (STYLE habit 6).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from simulator.graph.ops.base import LabelView
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, P, Placement, Shard

__all__ = ["Sig1D", "Signature", "signatures_1d", "signatures", "split_label",
           "SignatureError"]


class SignatureError(ValueError):
    """A requested sharding that no rule of the operator allows; `op` names the operator
    when the error comes from planning a graph."""

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class Sig1D:
    """Placements of every input and of the output along one mesh axis."""

    inputs: tuple[Placement, ...]
    output: Placement

    def __str__(self) -> str:
        return f"({', '.join(str(p) for p in self.inputs)}) -> {self.output}"


@dataclass(frozen=True)
class Signature:
    """An N-D signature: one Sig1D per mesh axis; layouts of each input and the output."""

    axes: tuple[Sig1D, ...]

    def input_layout(self, i: int) -> Layout:
        return Layout(tuple(s.inputs[i] for s in self.axes))

    @property
    def output_layout(self) -> Layout:
        return Layout(tuple(s.output for s in self.axes))

    def __str__(self) -> str:
        return " x ".join(str(s) for s in self.axes)


def split_label(view: LabelView, label: str) -> Sig1D:
    """The 1-axis signature that splits `label`; SignatureError if the op forbids it."""
    if label not in view.splittable():
        raise SignatureError(f"dimension label {label!r} cannot be split (splittable: "
                             f"{', '.join(view.splittable()) or 'none'})")
    ins = tuple(Shard(labs.index(label)) if label in labs else B for labs in view.inputs)
    if label in view.output:
        return Sig1D(ins, Shard(view.output.index(label)))
    # a reduced label leaves a Partial sum; an internal one is combined by the op's own
    # collectives (GroupKernel), so every shard holds the whole output
    return Sig1D(ins, B if label in view.internal else P)


def signatures_1d(view: LabelView, partial_inputs: bool = True) -> list[Sig1D]:
    """Every valid signature on one mesh axis, in a fixed order, without duplicates."""
    n = len(view.inputs)
    out: list[Sig1D] = [Sig1D((B,) * n, B)]
    out += [split_label(view, lab) for lab in view.splittable()]
    if partial_inputs:
        out += [Sig1D(tuple(P if j == i else B for j in range(n)), P)
                for i in sorted(view.linear_inputs)]
        if view.partial_all:
            out.append(Sig1D((P,) * n, P))
    unique: list[Sig1D] = []
    for s in out:
        if s not in unique:
            unique.append(s)
    return unique


def signatures(view: LabelView, mesh: Mesh, shapes: list[tuple[int, ...]] | None = None,
               partial_inputs: bool = True) -> list[Signature]:
    """All N-D signatures; with `shapes`, only those whose splits divide evenly."""
    per_axis = signatures_1d(view, partial_inputs)
    result = []
    for combo in itertools.product(per_axis, repeat=mesh.ndim):
        sig = Signature(tuple(combo))
        if shapes is None or _divides(sig, view, mesh, shapes):
            result.append(sig)
    return result


def _divides(sig: Signature, view: LabelView, mesh: Mesh,
             shapes: list[tuple[int, ...]]) -> bool:
    for i, shape in enumerate(shapes):
        layout = sig.input_layout(i)
        if any(n % layout.split_factor(d, mesh) for d, n in enumerate(shape)):
            return False
    return True
