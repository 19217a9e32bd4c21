"""RMSNorm over the last dim (Zhang and Sennrich 2019, "Root Mean Square Layer
Normalization", Eq. 4): y = x / sqrt(mean(x^2) + eps) * g, with no centring and no shift
(DeepSeek-V2/V3's norms, the latent norms of multi-head latent attention among them). The
normalised dim stays whole, every other dim may be split; not linear, so no Partial inputs.
FLOPs: a square, a sum, a scale and the gain per element (4 per element; LayerNorm's 8 with
its centring and shift)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, g = shapes
    if tuple(g) != (x[-1],):
        raise OpError(f"RMSNorm gain must have shape [{x[-1]}], got {list(g)}")
    return tuple(x)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs, (labs[-1],)), labs, fixed=frozenset({labs[-1]}))


def _rstd(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + float(attrs.get("eps", 1e-6)))


def _forward(xs, attrs, ctx):
    return xs[0] * _rstd(xs[0], attrs) * xs[1]


def _vjp(xs, y, dy, attrs, ctx):
    x, g = xs
    r = _rstd(x, attrs)
    xhat = x * r
    gx = dy * g
    dx = r * (gx - xhat * (gx * xhat).mean(axis=-1, keepdims=True))
    return [dx, (dy * xhat).sum(axis=tuple(range(x.ndim - 1)))]


register(OpFamily("RMSNorm", (2, 2), _shape, _labels, _forward, _vjp,
                  lambda s, o, a: 4.0 * math.prod(o), kind="norm", saves=(0, 1),
                  attrs=("eps",)))
