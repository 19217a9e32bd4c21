"""Softmax over one axis and LayerNorm over the last dim: the normalised dim stays whole,
every other dim may be split. Neither is linear, so no Partial inputs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _axis(shape: Shape, attrs: dict[str, Any]) -> int:
    axis = int(attrs.get("axis", -1))
    if not -len(shape) <= axis < len(shape):
        raise OpError(f"Softmax axis {axis} is out of range for shape {list(shape)}")
    return axis % len(shape)


def _softmax_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs,), labs, fixed=frozenset({labs[_axis(shapes[0], attrs)]}))


def _softmax(xs, attrs, ctx):
    axis = _axis(xs[0].shape, attrs)
    z = xs[0] - xs[0].max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_vjp(xs, y, dy, attrs, ctx):
    axis = _axis(xs[0].shape, attrs)
    return [y * (dy - (dy * y).sum(axis=axis, keepdims=True))]


register(OpFamily("Softmax", (1, 1), lambda s, a: tuple(s[0]), _softmax_labels, _softmax,
                  _softmax_vjp, lambda s, o, a: 5.0 * math.prod(o), kind="softmax",
                  saves=(-1,), attrs=("axis",)))


def _ln_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x = shapes[0]
    for g in shapes[1:]:
        if tuple(g) != (x[-1],):
            raise OpError(f"LayerNorm scale/shift must have shape [{x[-1]}], got {list(g)}")
    return tuple(x)


def _ln_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs,) + ((labs[-1],),) * (len(shapes) - 1), labs,
                     fixed=frozenset({labs[-1]}))


def _ln_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    return mu, rstd


def _ln(xs, attrs, ctx):
    mu, rstd = _ln_stats(xs[0], float(attrs.get("eps", 1e-5)))
    y = (xs[0] - mu) * rstd
    return y * xs[1] + xs[2] if len(xs) == 3 else y


def _ln_vjp(xs, y, dy, attrs, ctx):
    x = xs[0]
    mu, rstd = _ln_stats(x, float(attrs.get("eps", 1e-5)))
    xhat = (x - mu) * rstd
    g = dy * xs[1] if len(xs) > 1 else dy
    dx = rstd * (g - g.mean(axis=-1, keepdims=True)
                 - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    grads = [dx]
    if len(xs) > 1:
        grads.append((dy * xhat).sum(axis=lead))
    if len(xs) > 2:
        grads.append(dy.sum(axis=lead))
    return grads


register(OpFamily("LayerNorm", (1, 3), _ln_shape, _ln_labels, _ln, _ln_vjp,
                  lambda s, o, a: 8.0 * math.prod(o), kind="norm", saves=(0, 1),
                  attrs=("eps",)))
