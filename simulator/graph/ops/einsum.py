"""Contractions: Einsum, and MatMul / BatchMatMul written as einsum equations.

Every label may be split; a split contracted label makes the output Partial; the op is linear
in each input, so either input may arrive Partial (with the other broadcast). On one mesh
axis a matmul thus has 6 signatures: S(m), S(n), S(k)->P, B, and P in either input
(OneFlow's SBP table for matmul).
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register

__all__ = ["parse_equation", "matmul_equation"]


def parse_equation(eq: str, n_inputs: int = 2) -> tuple[list[str], str]:
    if "->" not in eq:
        raise OpError(f"einsum equation {eq!r} needs an explicit '->output'")
    lhs, out = eq.replace(" ", "").split("->")
    ins = lhs.split(",")
    if len(ins) != n_inputs:
        raise OpError(f"einsum equation {eq!r} has {len(ins)} operands, got {n_inputs} inputs")
    for lab in out:
        if not any(lab in s for s in ins):
            raise OpError(f"einsum equation {eq!r}: output label {lab!r} is in no input")
    for i, s in enumerate(ins):
        others = set(out).union(*(set(t) for j, t in enumerate(ins) if j != i))
        for lab in s:
            if lab not in others:
                raise OpError(f"einsum equation {eq!r}: label {lab!r} of operand {i} is "
                              "summed away alone; use ReduceSum first")
    return ins, out


def matmul_equation(rank_a: int, rank_b: int, ta: bool = False, tb: bool = False,
                    batch: bool = False) -> str:
    """MatMul: a [..., m, k] @ b [k, n]; BatchMatMul: shared leading batch dims."""
    if rank_a < 2 or rank_b < 2:
        raise OpError("MatMul inputs need at least 2 dims")
    lead = string.ascii_lowercase[: rank_a - 2]
    a = lead + ("km" if ta else "mk")
    if batch:
        if rank_b != rank_a:
            raise OpError("BatchMatMul inputs need the same rank")
        b = lead + ("nk" if tb else "kn")
    else:
        if rank_b != 2:
            raise OpError("MatMul's second input must be 2-D (use BatchMatMul)")
        b = "nk" if tb else "kn"
    return f"{a.upper()},{b.upper()}->{(lead + 'mn').upper()}"


def _equation(shapes: list[Shape], attrs: dict[str, Any]) -> str:
    if "equation" in attrs:
        return str(attrs["equation"])
    return matmul_equation(len(shapes[0]), len(shapes[1]), bool(attrs.get("transpose_a")),
                           bool(attrs.get("transpose_b")), bool(attrs.get("batch")))


def _sizes(shapes: list[Shape], attrs: dict[str, Any]) -> dict[str, int]:
    ins, _ = parse_equation(_equation(shapes, attrs), len(shapes))
    sizes: dict[str, int] = {}
    for labs, shape in zip(ins, shapes):
        if len(labs) != len(shape):
            raise OpError(f"einsum operand {labs!r} needs {len(labs)} dims, got shape "
                          f"{list(shape)}")
        for lab, n in zip(labs, shape):
            if sizes.setdefault(lab, n) != n:
                raise OpError(f"einsum label {lab!r} has sizes {sizes[lab]} and {n}")
    return sizes


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    sizes = _sizes(shapes, attrs)
    _, out = parse_equation(_equation(shapes, attrs), len(shapes))
    return tuple(sizes[lab] for lab in out)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    ins, out = parse_equation(_equation(shapes, attrs), len(shapes))
    contracted = frozenset(lab for s in ins for lab in s if lab not in out)
    return LabelView(tuple(tuple(s) for s in ins), tuple(out), reducible=contracted,
                     linear_inputs=frozenset(range(len(ins))))


def _forward(xs: list[np.ndarray], attrs: dict[str, Any], ctx: KernelCtx) -> np.ndarray:
    eq = _equation([x.shape for x in xs], attrs)
    return np.einsum(eq, *xs, optimize=True)


def _vjp(xs, y, dy, attrs, ctx):
    ins, out = parse_equation(_equation([x.shape for x in xs], attrs), len(xs))
    grads = []
    for i in range(len(xs)):
        others = [xs[j] for j in range(len(xs)) if j != i]
        spec = ",".join([out] + [ins[j] for j in range(len(xs)) if j != i]) + "->" + ins[i]
        grads.append(np.einsum(spec, dy, *others, optimize=True))
    return grads


def _flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    return 2.0 * math.prod(_sizes(shapes, attrs).values())


EINSUM = register(OpFamily("Einsum", (2, 2), _infer, _labels, _forward, _vjp, _flops,
                           kind="gemm", bwd_flops_factor=2.0,
                           attrs=("equation", "transpose_a", "transpose_b", "batch")),
                  "MatMul", "BatchMatMul")


def gemm_mnk(shapes: list[Shape], attrs: dict[str, Any]) -> tuple[int, tuple[int, int, int]]:
    """(batch, (m, n, k)) of the GEMM an einsum lowers to: batch = labels in both inputs and
    the output; m = output labels of input 0 only; n of input 1 only; k = contracted."""
    ins, out = parse_equation(_equation(shapes, attrs), len(shapes))
    sizes = _sizes(shapes, attrs)
    a, b = set(ins[0]), set(ins[1])
    prod = lambda labs: math.prod(sizes[x] for x in labs) if labs else 1  # noqa: E731
    batch = prod([x for x in out if x in a and x in b])
    m = prod([x for x in out if x in a and x not in b])
    n = prod([x for x in out if x in b and x not in a])
    k = prod([x for x in sizes if x not in out])
    return batch, (m, n, k)
