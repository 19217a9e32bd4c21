"""Conv2D, NCHW, stride 1, 'same' padding (odd kernels). Batch and output channels may be
split; a split input-channel dim leaves a Partial result; the spatial dims (labels y, x) may
be split too: the op then exchanges a halo of kh//2 rows / kw//2 columns with its
neighbouring devices before the convolution and sends the halo's gradient back after it
(`graph.ops.halo`: its group kernel and bytes). Linear in each input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from simulator.graph.ops import halo
from simulator.graph.ops.base import GroupKernel, LabelView, OpError, OpFamily, Shape, register


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, w = shapes
    if len(x) != 4 or len(w) != 4 or x[1] != w[1] or w[2] % 2 == 0 or w[3] % 2 == 0:
        raise OpError(f"Conv2D needs x [N,C,H,W] and odd w [O,C,kh,kw] with equal C, got "
                      f"{list(x)} and {list(w)}")
    return (x[0], w[0], x[2], x[3])


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    return LabelView((("n", "c", "y", "x"), ("o", "c", "p", "q")), ("n", "o", "y", "x"),
                     fixed=frozenset({"p", "q"}), reducible=frozenset({"c"}),
                     linear_inputs=frozenset({0, 1}), internal=frozenset({"y", "x"}))


def _windows(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
    pad = ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2))
    return sliding_window_view(np.pad(x, pad), (kh, kw), axis=(2, 3))  # n c y x p q


def _forward(xs, attrs, ctx):
    x, w = xs
    return np.einsum("ncyxpq,ocpq->noyx", _windows(x, w.shape[2], w.shape[3]), w,
                     optimize=True)


def _vjp(xs, y, dy, attrs, ctx):
    x, w = xs
    kh, kw = w.shape[2], w.shape[3]
    dw = np.einsum("ncyxpq,noyx->ocpq", _windows(x, kh, kw), dy, optimize=True)
    flipped = w[:, :, ::-1, ::-1]
    dx = np.einsum("noyxpq,ocpq->ncyx", _windows(dy, kh, kw), flipped, optimize=True)
    return [dx, dw]


def _flops(shapes, out, attrs):
    return 2.0 * math.prod(out) * math.prod(shapes[1][1:])


register(OpFamily("Conv2D", (2, 2), _infer, _labels, _forward, _vjp, _flops, kind="gemm",
                  bwd_flops_factor=2.0,
                  group=GroupKernel(halo.group_forward, halo.group_vjp,
                                    label_comm=halo.halo_steps)))
