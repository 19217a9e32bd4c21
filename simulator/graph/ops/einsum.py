"""Contractions: Einsum, and MatMul / BatchMatMul written as einsum equations.

Every label may be split; a split contracted label makes the output Partial; the op is linear
in each input, so either input may arrive Partial (with the other broadcast). On one mesh
axis a matmul thus has 6 signatures: S(m), S(n), S(k)->P, B, and P in either input
(OneFlow's SBP table for matmul).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register

__all__ = ["parse_equation", "matmul_equation", "contract"]


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
    return contract(eq, xs[0], xs[1])


def _vjp(xs, y, dy, attrs, ctx):
    ins, out = parse_equation(_equation([x.shape for x in xs], attrs), len(xs))
    grads = []
    for i in range(len(xs)):
        others = [xs[j] for j in range(len(xs)) if j != i]
        spec = ",".join([out] + [ins[j] for j in range(len(xs)) if j != i]) + "->" + ins[i]
        grads.append(contract(spec, dy, others[0]))
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


# --- kernels: a two-operand contraction as one (batched) matrix product -----------------

@dataclass(frozen=True)
class _Gemm:
    """How `a, b -> out` lowers to `A @ B`: a transposed to (batch, m, k), b to
    (batch, k, n), the product (batch, m, n) transposed back to the output's label order."""

    perm_a: tuple[int, ...]
    perm_b: tuple[int, ...]
    counts: tuple[int, int, int, int]  # labels in batch, m, n, k
    perm_out: tuple[int, ...]
    swap: bool  # computed as (B^T A^T): the output (batch, n, m) is then in its own order


@lru_cache(maxsize=1024)
def _gemm_plan(spec: str) -> _Gemm | None:
    """The lowering of a two-operand einsum `spec`, or None where it is no (batched)
    matrix product: a repeated label, an ellipsis, a label summed away in one operand
    alone, or no free label on either side (a batched dot product, which einsum's own
    loop does better than a matmul per element)."""
    if spec.count("->") != 1 or "." in spec:
        return None
    lhs, out = spec.split("->")
    parts = lhs.split(",")
    if len(parts) != 2:
        return None
    a, b = parts
    if any(len(set(s)) != len(s) for s in (a, b, out)):
        return None
    if any(lab not in out and lab not in other for s, other in ((a, b), (b, a)) for lab in s):
        return None
    batch = [x for x in out if x in a and x in b]
    m = [x for x in out if x in a and x not in b]
    n = [x for x in out if x in b and x not in a]
    k = [x for x in a if x in b and x not in out]
    if not m and not n:
        return None
    swap = list(out) == batch + n + m and bool(m) and bool(n)
    mid = batch + n + m if swap else batch + m + n
    return _Gemm(tuple(a.index(x) for x in batch + m + k),
                 tuple(b.index(x) for x in batch + k + n),
                 (len(batch), len(m), len(n), len(k)), tuple(mid.index(x) for x in out), swap)


def _blas_ready(x: np.ndarray) -> np.ndarray:
    """`x` (..., r, c) as is where BLAS can read each matrix (unit stride along one of its
    dims, the other a whole row or column apart), else a contiguous copy (numpy's matmul
    would otherwise fall back to its own unblocked loop)."""
    r, c = x.shape[-2:]
    s0, s1, e = x.strides[-2], x.strides[-1], x.itemsize
    if (s1 == e and s0 >= c * e) or (s0 == e and s1 >= r * e):
        return x
    return np.ascontiguousarray(x)


def contract(spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.einsum(spec, a, b)` computed as one (batched) np.matmul on transposed views where
    the equation is a matrix product (BLAS), else by einsum itself. Equal to einsum up to
    the order of the summation (tests/test_einsum_matmul.py)."""
    spec = spec.replace(" ", "")
    plan = _gemm_plan(spec)
    if plan is None or not _same_sizes(spec, a.shape, b.shape):
        return np.einsum(spec, a, b, optimize=True)
    nb, nm, nn, nk = plan.counts
    at, bt = a.transpose(plan.perm_a), b.transpose(plan.perm_b)
    bs, ms, ks, ns = at.shape[:nb], at.shape[nb:nb + nm], at.shape[nb + nm:], bt.shape[nb + nk:]
    rows, inner, cols = math.prod(ms), math.prod(ks), math.prod(ns)
    am = _blas_ready(at.reshape(bs + (rows, inner)))
    bm = _blas_ready(bt.reshape(bs + (inner, cols)))
    if plan.swap:
        y = np.matmul(bm.swapaxes(-1, -2), am.swapaxes(-1, -2))
        return y.reshape(bs + ns + ms).transpose(plan.perm_out)
    y = np.matmul(am, bm)
    return y.reshape(bs + ms + ns).transpose(plan.perm_out)


def _same_sizes(spec: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> bool:
    """Every label shared by the operands has one size (einsum's size-1 broadcasting and
    its errors are left to einsum)."""
    a, b = spec.split("->")[0].split(",")
    size = dict(zip(a, sa))
    return len(a) == len(sa) and len(b) == len(sb) and all(
        size.get(lab, n) == n for lab, n in zip(b, sb))
