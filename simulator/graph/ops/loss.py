"""SoftmaxCrossEntropy: logits [..., C] and integer labels [...] -> per-sample loss [...].
The class dim stays whole (gather logits first); every leading dim may be split."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    logits, labels = shapes
    if tuple(logits[:-1]) != tuple(labels):
        raise OpError(f"labels shape {list(labels)} must equal logits shape without the "
                      f"class dim {list(logits[:-1])}")
    return tuple(labels)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    lead = tuple(f"d{i}" for i in range(len(shapes[1])))
    return LabelView((lead + ("c",), lead), lead, fixed=frozenset({"c"}))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _forward(xs, attrs, ctx):
    z, labels = xs
    zmax = z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z - zmax).sum(axis=-1)) + zmax[..., 0]
    picked = np.take_along_axis(z, labels.astype(np.int64)[..., None], axis=-1)[..., 0]
    return lse - picked


def _vjp(xs, y, dy, attrs, ctx):
    z, labels = xs
    g = _softmax(z)
    np.put_along_axis(g, labels.astype(np.int64)[..., None],
                      np.take_along_axis(g, labels.astype(np.int64)[..., None], -1) - 1.0, -1)
    return [g * dy[..., None], None]


register(OpFamily("SoftmaxCrossEntropy", (2, 2), _infer, _labels, _forward, _vjp,
                  lambda s, o, a: 6.0 * math.prod(s[0]), kind="softmax",
                  differentiable=(True, False)), "CrossEntropy")
