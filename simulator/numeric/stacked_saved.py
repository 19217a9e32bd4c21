"""Stacked kernels whose backward reads what their forward computed (numeric.stacked).

A framework's autograd saves, for each op, what its backward needs: GeLU its input's
sigmoid term, LayerNorm the normalised input and the inverse deviation (PyTorch's
native_layer_norm returns mean and rstd for the backward), softmax its output. The
family kernels (`graph.ops`) recompute those from the input in the backward; the stacked
kernels here keep them from the forward instead, keyed by the input stack they were
computed from: the backward reads the very same array (the kept stack, `dist.stack_of`),
so a hit is the forward's own value for that input, and a miss (an input stacked afresh,
a forward run elsewhere) recomputes exactly as the family does. Every value is computed
by the same numpy operations in the same order as the family kernel's, so results are
bitwise those of the recomputation. What is kept lives for one micro-batch
(`run_microbatch` clears it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from simulator.graph.ops import get_family
from simulator.graph.ops.elementwise import _exp_neg2u, gelu_slope
from simulator.graph.ops.norm import _axis, _ln_stats
from simulator.numeric.stacked import StackedKernel, _lead, register_stacked

__all__ = ["clear_saved", "not_kept"]

# (kind, id(input stack), attribute) -> (the input stack, what its forward kept)
_SAVED: dict[tuple[str, int, Any], tuple[np.ndarray, Any]] = {}
_LIMIT = 256  # entries: a safety bound only; a micro-batch clears them


_KEEPING = [True]  # False while a forward that runs no backward (`not_kept`) computes


@contextmanager
def not_kept() -> Iterator[None]:
    """Forward kernels run in the block keep nothing: a forward-only run (verify's
    first-micro-batch reference, run between the sharded run's operators) has no backward
    to read it, and what it kept would stay until the sharded micro-batch clears it."""
    _KEEPING[0] = False
    try:
        yield
    finally:
        _KEEPING[0] = True


def _keep(kind: str, x: np.ndarray, attr: Any, value: Any) -> None:
    if not _KEEPING[0]:
        return
    if len(_SAVED) >= _LIMIT:
        _SAVED.pop(next(iter(_SAVED)))
    _SAVED[(kind, id(x), attr)] = (x, value)


def _take(kind: str, x: np.ndarray, attr: Any) -> Any:
    """What the forward kept for this very array (its entry holds the array, so an id
    is never another array's while kept), or None."""
    hit = _SAVED.pop((kind, id(x), attr), None)
    return hit[1] if hit is not None and hit[0] is x else None


def clear_saved() -> None:
    _SAVED.clear()


# --- GeLU: the backward's 1 + exp(-2u) (`elementwise._gelu`, `_gelu_vjp`) ----------------

_GELU = get_family("GeLU")


def _gelu_forward(xs, attrs, ctx):
    x = xs[0]
    e = _exp_neg2u(x)
    e += 1.0
    _keep("gelu", x, None, e)
    return np.divide(x, e)


def _gelu_vjp(xs, y, dy, attrs, ctx):
    """`elementwise._gelu_vjp` from the forward's 1 + exp(-2u)."""
    x = xs[0]
    e = _take("gelu", x, None)
    if e is None or x.shape != np.shape(dy):
        return _GELU.vjp(xs, y, dy, attrs, ctx.first)
    d = gelu_slope(x, np.reciprocal(e))
    if np.result_type(dy, d) == d.dtype:
        return [np.multiply(dy, d, out=d)]
    return [dy * d]


register_stacked(StackedKernel(_gelu_forward, _gelu_vjp), "GeLU")


# --- Softmax: `norm._softmax` without its temporaries (the backward reads only y) ------

def _softmax_forward(xs, attrs, ctx):
    x = xs[0]
    axis = _axis(x.shape[1:], attrs) + 1
    z = x - x.max(axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=axis, keepdims=True)
    return z


def _softmax_vjp(xs, y, dy, attrs, ctx):
    axis = _axis(xs[0].shape[1:], attrs) + 1
    return [y * (dy - (dy * y).sum(axis=axis, keepdims=True))]


register_stacked(StackedKernel(_softmax_forward, _softmax_vjp), "Softmax")


# --- LayerNorm: the normalised input and 1 / std (`norm._ln`; stacked._ln_vjp) --------

def _ln_forward(xs, attrs, ctx):
    x, eps = xs[0], float(attrs.get("eps", 1e-5))
    mu, rstd = _ln_stats(x, eps)
    xhat = (x - mu) * rstd
    _keep("ln", x, eps, (xhat, rstd))
    nd = x.ndim - 1
    return xhat * _lead(xs[1], nd) + _lead(xs[2], nd) if len(xs) == 3 else xhat


def _ln_vjp(xs, y, dy, attrs, ctx):
    """The per-rank scale and shift gradients of `stacked._ln_vjp`, from the kept xhat."""
    x, nd, eps = xs[0], xs[0].ndim - 1, float(attrs.get("eps", 1e-5))
    kept = _take("ln", x, eps)
    if kept is None:
        mu, rstd = _ln_stats(x, eps)
        xhat = (x - mu) * rstd
    else:
        xhat, rstd = kept
    g = dy * _lead(xs[1], nd) if len(xs) > 1 else dy
    dx = rstd * (g - g.mean(axis=-1, keepdims=True)
                 - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    rows = tuple(range(1, x.ndim - 1))
    grads: list[np.ndarray | None] = [dx]
    if len(xs) > 1:
        grads.append((dy * xhat).sum(axis=rows))
    if len(xs) > 2:
        grads.append(dy.sum(axis=rows))
    return grads


register_stacked(StackedKernel(_ln_forward, _ln_vjp), "LayerNorm")
