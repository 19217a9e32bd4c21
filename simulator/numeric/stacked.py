"""Stacked local kernels: one numpy call computes an op on many devices at once.

The ranks that hold blocks of the same shapes are stacked along a new leading axis (R), and
a stacked kernel computes every rank's block exactly as the family's local kernel would on
that rank alone: nothing mixes along R, and every offset a kernel reads (a dropout mask's
global coordinates, a vocabulary shard's first row, a causal mask's first query) is the
rank's own. An input that every stacked rank holds as the same array (a replicated weight)
arrives as a stride-0 view (`np.broadcast_to`); the gradient of such an input is still one
block per rank (each rank's summand of the Partial gradient), never their sum.

Stacked kernels are registered per family name (those of families that read their block
offsets in `numeric.stacked_offsets`, those whose backward reads what their forward
computed, GeLU, softmax and LayerNorm, in `numeric.stacked_saved`); a family without one
(or an op whose ranks cannot be stacked) runs rank by rank (`numeric.local`). The stacked
and the per-rank paths are compared in tests/test_numeric_stacked.py.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.graph.ops import KernelCtx, get_family
from simulator.graph.ops.einsum import _equation, contract, parse_equation
from simulator.graph.ops.reduce import _axes
from simulator.graph.ops.shape import _perm

__all__ = ["StackCtx", "StackedKernel", "register_stacked", "stacked_kernel", "is_shared", "col",
           "Shape"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class StackCtx:
    """KernelCtx of R stacked ranks: logical shapes, each rank's block offsets ([R, ndim]
    int arrays), one rank's local output shape; `group_size` ranks in a row form one group
    of an internal label (SoftmaxCrossEntropy's vocabulary shards)."""

    in_shapes: tuple[Shape, ...]
    out_shape: Shape
    in_offsets: tuple[np.ndarray, ...]
    out_offset: np.ndarray
    out_local_shape: Shape
    batch_offset: int = 0
    group_size: int = 1

    @property
    def first(self) -> KernelCtx:
        """The first rank's KernelCtx (for kernels that read only logical shapes)."""
        return KernelCtx(self.in_shapes, self.out_shape,
                         tuple(tuple(int(v) for v in o[0]) for o in self.in_offsets),
                         tuple(int(v) for v in self.out_offset[0]), self.out_local_shape,
                         self.batch_offset)


Forward = Callable[[list[np.ndarray], dict[str, Any], StackCtx], np.ndarray]
Vjp = Callable[[list[np.ndarray], np.ndarray, np.ndarray, dict[str, Any], StackCtx],
               list[np.ndarray | None]]


@dataclass(frozen=True)
class StackedKernel:
    forward: Forward
    vjp: Vjp


_KERNELS: dict[str, StackedKernel] = {}


def register_stacked(kernel: StackedKernel, *names: str) -> None:
    for name in names:
        _KERNELS[get_family(name).name] = kernel


def stacked_kernel(family_name: str) -> StackedKernel | None:
    return _KERNELS.get(family_name)


def is_shared(x: np.ndarray) -> bool:
    """True for a stride-0 stack: every rank holds the same array."""
    return x.ndim > 0 and x.shape[0] > 1 and x.strides[0] == 0


def _lead(x: np.ndarray, ndim: int) -> np.ndarray:
    """(R, *s) -> (R, 1, ..., *s) with `ndim` dims after R, so numpy broadcasting lines up
    the trailing dims as it does for one rank's blocks."""
    extra = ndim - (x.ndim - 1)
    return x.reshape((x.shape[0],) + (1,) * extra + x.shape[1:]) if extra > 0 else x


def col(v: np.ndarray, ndim: int) -> np.ndarray:
    """A per-rank vector [R] shaped to broadcast against (R, ...) with `ndim` dims after R."""
    return v.reshape((len(v),) + (1,) * ndim)


# --- families whose kernels are numpy broadcasting expressions that read no ctx --------

def _broadcasting(name: str) -> StackedKernel:
    fam = get_family(name)

    def forward(xs, attrs, ctx):
        return fam.forward([_lead(x, len(ctx.out_shape)) for x in xs], attrs, ctx.first)

    def vjp(xs, y, dy, attrs, ctx):
        grads = fam.vjp([_lead(x, len(ctx.out_shape)) for x in xs], y, dy, attrs, ctx.first)
        return [None if g is None else g.reshape(x.shape) for g, x in zip(grads, xs)]

    return StackedKernel(forward, vjp)


for _name in ("ReLU", "SiLU", "Scale", "Add", "Sub", "Mul"):  # GeLU: stacked_saved
    register_stacked(_broadcasting(_name), _name)


# --- families whose kernels read an attribute that names a dim: shift it past R --------

def _shifted(name: str, shift: Callable[[list[np.ndarray], dict, StackCtx], tuple[dict, Any]]
             ) -> StackedKernel:
    fam = get_family(name)

    def forward(xs, attrs, ctx):
        a, c = shift(xs, attrs, ctx)
        return fam.forward(xs, a, c)

    def vjp(xs, y, dy, attrs, ctx):
        a, c = shift(xs, attrs, ctx)
        return fam.vjp(xs, y, dy, a, c)

    return StackedKernel(forward, vjp)


def _transpose_perm(xs, attrs, ctx):
    perm = _perm(xs[0].shape[1:], attrs)
    return {**attrs, "perm": (0,) + tuple(p + 1 for p in perm)}, ctx.first


def _reshape_to(xs, attrs, ctx):
    c = ctx.first
    return attrs, dataclasses.replace(c, out_local_shape=(len(xs[0]),) + c.out_local_shape)


def _reduce_axes(xs, attrs, ctx):
    """Axes one past the rank's; the mean divides by the logical count of the same axes of
    a logical shape with a leading 1."""
    axes = tuple(a + 1 for a in _axes(xs[0].shape[1:], attrs))
    a = {k: v for k, v in attrs.items() if k != "axis"}
    c = ctx.first
    return {**a, "axes": axes}, dataclasses.replace(
        c, in_shapes=((1,) + tuple(c.in_shapes[0]),) + tuple(c.in_shapes[1:]))


register_stacked(_shifted("Transpose", _transpose_perm), "Transpose")
register_stacked(_shifted("Reshape", _reshape_to), "Reshape")
register_stacked(_shifted("ReduceSum", _reduce_axes), "ReduceSum")
register_stacked(_shifted("ReduceMean", _reduce_axes), "ReduceMean")


# --- Einsum: a fresh label for the rank axis; a shared operand goes in once -------------

def _rank_label(eq: str) -> str:
    return next(c for c in string.ascii_letters if c not in eq)


def _operand(x: np.ndarray, labs: str, r: str) -> tuple[np.ndarray, str]:
    return (x[0], labs) if is_shared(x) else (x, r + labs)


def _einsum_forward(xs, attrs, ctx):
    eq = _equation([x.shape[1:] for x in xs], attrs)
    ins, out = parse_equation(eq, len(xs))
    r = _rank_label(eq)
    ops = [_operand(x, labs, r) for x, labs in zip(xs, ins)]
    if all(is_shared(x) for x in xs):  # every rank computes the same block
        y = contract(eq, xs[0][0], xs[1][0])
        return np.broadcast_to(y, (len(xs[0]),) + y.shape)
    spec = ",".join(labs for _, labs in ops) + "->" + r + out
    return contract(spec, ops[0][0], ops[1][0])


def _einsum_vjp(xs, y, dy, attrs, ctx):
    eq = _equation([x.shape[1:] for x in xs], attrs)
    ins, out = parse_equation(eq, len(xs))
    r = _rank_label(eq)
    grads: list[np.ndarray | None] = []
    for i in range(len(xs)):
        ops = [_operand(xs[j], ins[j], r) for j in range(len(xs)) if j != i]
        spec = ",".join([r + out] + [labs for _, labs in ops]) + "->" + r + ins[i]
        grads.append(contract(spec, dy, ops[0][0]))
    return grads


register_stacked(StackedKernel(_einsum_forward, _einsum_vjp), "Einsum")
