"""Elementwise operators: GeLU, ReLU, SquaredReLU, SiLU, Dropout, Scale, CausalMask; Add,
Sub, Mul with numpy broadcasting. Every dim may be split; linear ones (Dropout, Scale, Add,
Sub, and Mul in one input at a time) also pass Partial values through.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register

__all__ = ["unbroadcast", "dropout_mask", "keep_draws", "gelu_slope"]

_GELU_C = math.sqrt(2.0 / math.pi)


def _same(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    return tuple(shapes[0])


def _unary_labels(linear: bool):
    def labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
        labs = tuple(f"d{i}" for i in range(len(shapes[0])))
        return LabelView((labs,), labs, linear_inputs=frozenset({0}) if linear else frozenset())
    return labels


def _count(k: float):
    return lambda shapes, out, attrs: k * math.prod(out)


def _exp_neg2u(x: np.ndarray) -> np.ndarray:
    """exp(-2u), u = c (x + 0.044715 x^3) the tanh-GeLU's argument, in one fresh array
    updated in place (each temporary of a plain expression is a pass over memory). It
    overflows to inf for x below about -19, where GeLU is -0 and its slope 0: no warning."""
    e = x * x
    e *= -2.0 * _GELU_C * 0.044715
    e += -2.0 * _GELU_C
    e *= x
    with np.errstate(over="ignore"):
        return np.exp(e, out=e)


def _gelu(xs, attrs, ctx):
    """0.5 x (1 + tanh u) = x sigmoid(2u) = x / (1 + exp(-2u)) (Hendrycks and Gimpel 2016,
    eq. 2's tanh form): exp is a vectorised ufunc, 2.5x faster than numpy's tanh."""
    x = xs[0]
    e = _exp_neg2u(x)
    e += 1.0
    return np.divide(x, e, out=e)


def _gelu_vjp(xs, y, dy, attrs, ctx):
    """dy (s + 2 x s (1 - s) u'), s = sigmoid(2u) = 0.5 (1 + tanh u), u' = c (1 + 3 *
    0.044715 x^2): the tanh form's derivative, since 1 - tanh^2 u = 4 s (1 - s)."""
    x = xs[0]
    s = _exp_neg2u(x)
    s += 1.0
    np.reciprocal(s, out=s)
    d = gelu_slope(x, s)
    if d.shape == np.shape(dy) and np.result_type(dy, d) == d.dtype:
        return [np.multiply(dy, d, out=d)]
    return [dy * d]


def gelu_slope(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """d gelu / dx = s + 2 x u' s (1 - s), given s = sigmoid(2u) (the tanh form, u' = c (1 +
    3 * 0.044715 x^2)); a new array, in place after its first product."""
    d = x * x
    d *= 6.0 * 0.044715 * _GELU_C
    d += 2.0 * _GELU_C
    d *= x  # 2 x u'
    d *= s
    d *= 1.0 - s
    d += s
    return d


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _silu_vjp(xs, y, dy, attrs, ctx):
    s = _sigmoid(xs[0])
    return [dy * (s + xs[0] * s * (1.0 - s))]


def _hash53(seed: int, index: np.ndarray) -> np.ndarray:
    """The top 53 bits of a splitmix64 hash of (seed, global index), as uint64, in one
    array updated in place."""
    with np.errstate(over="ignore"):
        z = index.astype(np.uint64)
        z += np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        z >>= np.uint64(11)
    return z


def _uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """Counter-based uniform numbers in [0, 1): a splitmix64 hash of (seed, global index), so
    any block of any micro-batch draws exactly what one device would for those elements."""
    return _hash53(seed, index).astype(np.float64) / float(1 << 53)


def keep_draws(seed: int, index: np.ndarray, p: float) -> np.ndarray:
    """`_uniform(seed, index) >= p` without the floats: u = k / 2^53 exactly, and p * 2^53
    is exact, so u >= p exactly when the integer k >= ceil(p * 2^53)."""
    if math.isnan(p):
        return np.zeros(index.shape, dtype=bool)  # u >= nan is never true
    return _hash53(seed, index) >= np.uint64(max(0, min(math.ceil(p * (1 << 53)), 1 << 53)))


def dropout_mask(attrs: dict[str, Any], ctx: KernelCtx, local: Shape) -> np.ndarray:
    """The scaled keep-mask of this block, a function of each element's global coordinates
    (Megatron's model-parallel RNG tracker serves the same purpose on real devices)."""
    p = float(attrs.get("p", 0.1))
    starts = list(ctx.out_offset)
    starts[0] += ctx.batch_offset if starts else 0
    flat = np.zeros((1,) * len(local), dtype=np.int64)
    for axis, (start, full) in enumerate(zip(starts, ctx.out_shape)):
        coord = np.arange(local[axis], dtype=np.int64).reshape(
            (1,) * axis + (local[axis],) + (1,) * (len(local) - axis - 1))  # broadcasts
        flat = flat * (full if axis else 1) + coord + start
    keep = keep_draws(int(attrs.get("seed", 0)), flat, p)
    return keep / (1.0 - p)


def _causal(xs, attrs, ctx):
    x = xs[0]
    qs, ks = ctx.in_offsets[0][-2], ctx.in_offsets[0][-1]
    q = np.arange(qs, qs + x.shape[-2])[:, None]
    k = np.arange(ks, ks + x.shape[-1])[None, :]
    return np.where(k > q, -1e9, x)


def _causal_vjp(xs, y, dy, attrs, ctx):
    x = xs[0]
    qs, ks = ctx.in_offsets[0][-2], ctx.in_offsets[0][-1]
    q = np.arange(qs, qs + x.shape[-2])[:, None]
    k = np.arange(ks, ks + x.shape[-1])[None, :]
    return [np.where(k > q, 0.0, dy)]


def _unary(name, fwd, vjp, flops_per_elem, linear=False, *aliases, saves=None,
           saved_extra=None, attrs=()):
    register(OpFamily(name, (1, 1), _same, _unary_labels(linear), fwd, vjp,
                      _count(flops_per_elem), kind="elementwise", saves=saves,
                      saved_extra=saved_extra, attrs=attrs), *aliases)


_MASK_BYTES = 1.0  # a dropout keep-mask is stored as bytes (Korthikanti et al. 2022, 4.1)

_unary("GeLU", _gelu, _gelu_vjp, 8.0, False, "Gelu")
_unary("ReLU", lambda xs, a, c: np.maximum(xs[0], 0.0),
       lambda xs, y, dy, a, c: [dy * (xs[0] > 0)], 1.0)
# squared ReLU, relu(x)^2 (So et al. 2021, "Primer", arXiv:2109.08668, Sec. 4; Nemotron-H's
# relu2 MLPs): its slope 2 relu(x)
_unary("SquaredReLU", lambda xs, a, c: np.square(np.maximum(xs[0], 0.0)),
       lambda xs, y, dy, a, c: [dy * (2.0 * np.maximum(xs[0], 0.0))], 2.0, False, "ReLU2")
_unary("SiLU", lambda xs, a, c: xs[0] * _sigmoid(xs[0]), _silu_vjp, 4.0, False, "Swish")
_unary("Dropout", lambda xs, a, c: xs[0] * dropout_mask(a, c, xs[0].shape),
       lambda xs, y, dy, a, c: [dy * dropout_mask(a, c, dy.shape)], 2.0, True, saves=(),
       saved_extra=lambda ins, out: _MASK_BYTES * math.prod(out), attrs=("p", "seed"))
_unary("Scale", lambda xs, a, c: xs[0] * float(a.get("factor", 1.0)),
       lambda xs, y, dy, a, c: [dy * float(a.get("factor", 1.0))], 1.0, True, "Identity",
       saves=(), attrs=("factor",))
_unary("CausalMask", _causal, _causal_vjp, 1.0, saves=())


def _broadcast_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def _binary_labels(partial_all: bool, linear_each: bool):
    def labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
        out = _broadcast_shape(shapes, attrs)
        out_labs = tuple(f"d{i}" for i in range(len(out)))
        ins = []
        for s in shapes:
            pad = len(out) - len(s)
            ins.append(tuple(None if n == 1 and out[pad + i] != 1 else out_labs[pad + i]
                             for i, n in enumerate(s)))
        return LabelView(tuple(ins), out_labs, partial_all=partial_all,
                         linear_inputs=frozenset({0, 1}) if linear_each else frozenset())
    return labels


def unbroadcast(g: np.ndarray, shape: Shape) -> np.ndarray:
    """Sum `g` down to `shape` (the VJP of numpy broadcasting)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _add_vjp(sign: float):
    def vjp(xs, y, dy, attrs, ctx):
        return [unbroadcast(dy, xs[0].shape), unbroadcast(sign * dy, xs[1].shape)]
    return vjp


def _mul_vjp(xs, y, dy, attrs, ctx):
    return [unbroadcast(dy * xs[1], xs[0].shape), unbroadcast(dy * xs[0], xs[1].shape)]


register(OpFamily("Add", (2, 2), _broadcast_shape, _binary_labels(True, False),
                  lambda xs, a, c: xs[0] + xs[1], _add_vjp(1.0), _count(1.0), saves=()))
register(OpFamily("Sub", (2, 2), _broadcast_shape, _binary_labels(True, False),
                  lambda xs, a, c: xs[0] - xs[1], _add_vjp(-1.0), _count(1.0), saves=()))
register(OpFamily("Mul", (2, 2), _broadcast_shape, _binary_labels(False, True),
                  lambda xs, a, c: xs[0] * xs[1], _mul_vjp, _count(1.0)))
