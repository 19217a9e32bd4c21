"""A vision transformer's token ops (Dosovitskiy et al. 2021, "An Image is Worth 16x16
Words", Sec. 3.1, Eq. 1-4):

- PatchEmbed: images x [b, c, H, W] and a convolution weight w [o, c, p, p] -> tokens
  [b, (H/p)(W/p), o]: the stride-p convolution with a p x p kernel (no padding), which is
  the linear projection E of the flattened patches of Eq. 1, its output flattened to one
  token per patch in row-major order (timm's PatchEmbed: conv, flatten(2), transpose(1, 2)).
  Batch and output channels may be split; a split input-channel dim leaves a Partial result
  (the contraction runs over c, p, p); the spatial dims stay whole.
- ClassToken: tokens x [b, n, h] and a learned token t [h] -> [b, n + 1, h], the class
  token first (Eq. 1's x_class, a concatenation along the sequence). Batch and hidden may
  be split; the sequence stays whole.
- SelectToken: x [b, s, h] -> x[:, index] [b, h] (a slice along the sequence; Eq. 4 reads
  the class token, index 0). Linear; batch and hidden may be split, the sequence not.

Dim labels follow the elementwise ops' (`d0` the batch), so plans that split the batch on
`d0` apply unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _patch_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, w = shapes
    if len(x) != 4 or len(w) != 4 or x[1] != w[1] or w[2] != w[3]:
        raise OpError(f"PatchEmbed needs images [b,c,H,W] and a square kernel [o,c,p,p] with "
                      f"equal c, got {list(x)} and {list(w)}")
    p = w[2]
    if x[2] % p or x[3] % p:
        raise OpError(f"PatchEmbed: image {x[2]}x{x[3]} is not a whole number of {p}x{p} "
                      f"patches")
    return (x[0], (x[2] // p) * (x[3] // p), w[0])


def _patch_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    return LabelView((("d0", "c", "i2", "i3"), ("d2", "c", "p", "q")), ("d0", "s", "d2"),
                     fixed=frozenset({"i2", "i3", "p", "q", "s"}), reducible=frozenset({"c"}),
                     linear_inputs=frozenset({0, 1}))


def _patches(x: np.ndarray, p: int) -> np.ndarray:
    """[b, c, H, W] -> [b, c, H/p, p, W/p, p] (a view)."""
    b, c, h, w = x.shape
    return x.reshape(b, c, h // p, p, w // p, p)


def _patch_forward(xs, attrs, ctx):
    x, w = xs
    y = np.einsum("bcypxq,ocpq->byxo", _patches(x, w.shape[2]), w, optimize=True)
    return y.reshape(y.shape[0], -1, y.shape[-1])


def _patch_vjp(xs, y, dy, attrs, ctx):
    x, w = xs
    p = w.shape[2]
    dy4 = dy.reshape(x.shape[0], x.shape[2] // p, x.shape[3] // p, dy.shape[-1])
    dx = np.einsum("byxo,ocpq->bcypxq", dy4, w, optimize=True).reshape(x.shape)
    dw = np.einsum("bcypxq,byxo->ocpq", _patches(x, p), dy4, optimize=True)
    return [dx, dw]


def _patch_flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    """2 FLOPs per multiply-add: tokens x output channels x (c p p)."""
    return 2.0 * math.prod(out) * math.prod(shapes[1][1:])


register(OpFamily("PatchEmbed", (2, 2), _patch_infer, _patch_labels, _patch_forward,
                  _patch_vjp, _patch_flops, kind="gemm", bwd_flops_factor=2.0))


def _cls_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, t = shapes
    if len(x) != 3 or tuple(t) != (x[2],):
        raise OpError(f"ClassToken needs tokens [b,n,h] and a token [h], got {list(x)} and "
                      f"{list(t)}")
    return (x[0], x[1] + 1, x[2])


def _cls_forward(xs, attrs, ctx):
    x, t = xs
    first = np.broadcast_to(t, (x.shape[0], 1, x.shape[2]))
    return np.concatenate([first.astype(x.dtype), x], axis=1)


def _cls_vjp(xs, y, dy, attrs, ctx):
    return [dy[:, 1:], dy[:, 0].sum(axis=0)]


register(OpFamily(
    "ClassToken", (2, 2), _cls_infer,
    lambda s, a: LabelView((("d0", "i1", "d2"), ("d2",)), ("d0", "o1", "d2"),
                           fixed=frozenset({"i1", "o1"})),
    _cls_forward, _cls_vjp, lambda s, o, a: 0.0, kind="copy", saves=()))


def _index(shape: Shape, attrs: dict[str, Any]) -> int:
    i = int(attrs.get("index", 0))
    if not 0 <= i < shape[1]:
        raise OpError(f"SelectToken index {i} is outside a sequence of {shape[1]}")
    return i


def _select_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x = shapes[0]
    if len(x) != 3:
        raise OpError(f"SelectToken needs x [b,s,h], got {list(x)}")
    _index(x, attrs)
    return (x[0], x[2])


def _select_vjp(xs, y, dy, attrs, ctx):
    shape = ctx.in_shapes[0]  # the sequence is whole: the local input is [b', s, h']
    dx = np.zeros((dy.shape[0], shape[1], dy.shape[1]), dy.dtype)
    dx[:, _index(shape, attrs)] = dy
    return [dx]


register(OpFamily(
    "SelectToken", (1, 1), _select_infer,
    lambda s, a: LabelView((("d0", "i1", "d2"),), ("d0", "d2"), fixed=frozenset({"i1"}),
                           linear_inputs=frozenset({0})),
    lambda xs, a, c: np.ascontiguousarray(xs[0][:, _index(xs[0].shape, a)]), _select_vjp,
    lambda s, o, a: 0.0, kind="copy", saves=(), attrs=("index",)))
