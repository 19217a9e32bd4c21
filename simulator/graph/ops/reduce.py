"""ReduceSum and ReduceMean over some axes. A split reduced dim leaves a Partial result; the
mean divides by the LOGICAL count, so a local mean of a shard is its share of the whole."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _axes(shape: Shape, attrs: dict[str, Any]) -> tuple[int, ...]:
    raw = attrs.get("axes", attrs.get("axis"))
    if raw is None:
        return tuple(range(len(shape)))
    raw = [raw] if isinstance(raw, int) else list(raw)
    for a in raw:
        if not -len(shape) <= int(a) < len(shape):
            raise OpError(f"reduce axis {a} is out of range for shape {list(shape)}")
    return tuple(sorted({int(a) % len(shape) for a in raw}))


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    axes, keep = _axes(shapes[0], attrs), bool(attrs.get("keep_dims", False))
    return tuple(1 if i in axes else n for i, n in enumerate(shapes[0])
                 if keep or i not in axes)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    axes, keep = _axes(shapes[0], attrs), bool(attrs.get("keep_dims", False))
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    out = tuple(None if i in axes else lab for i, lab in enumerate(labs)
                if keep or i not in axes)
    return LabelView((labs,), out, reducible=frozenset(labs[i] for i in axes),
                     linear_inputs=frozenset({0}))


def _scale(attrs: dict[str, Any], ctx) -> float:
    if not attrs.get("mean"):
        return 1.0
    axes = _axes(ctx.in_shapes[0], attrs)
    return 1.0 / math.prod(ctx.in_shapes[0][i] for i in axes)


def _forward(xs, attrs, ctx):
    axes, keep = _axes(xs[0].shape, attrs), bool(attrs.get("keep_dims", False))
    return xs[0].sum(axis=axes, keepdims=keep) * _scale(attrs, ctx)


def _vjp(xs, y, dy, attrs, ctx):
    axes = _axes(xs[0].shape, attrs)
    g = dy if attrs.get("keep_dims") else np.expand_dims(dy, axes)
    return [np.broadcast_to(g, xs[0].shape) * _scale(attrs, ctx)]


def _flops(shapes, out, attrs):
    return float(math.prod(shapes[0]))


def _family(name: str, mean: bool) -> OpFamily:
    def fwd(xs, attrs, ctx):
        return _forward(xs, {**attrs, "mean": mean}, ctx)

    def vjp(xs, y, dy, attrs, ctx):
        return _vjp(xs, y, dy, {**attrs, "mean": mean}, ctx)

    return OpFamily(name, (1, 1), _infer, _labels, fwd, vjp, _flops, kind="reduction",
                    saves=(), attrs=("axes", "axis", "keep_dims"))


register(_family("ReduceSum", False))
register(_family("ReduceMean", True))
