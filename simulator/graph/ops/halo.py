"""The halo exchange of a convolution split along H and/or W (spatial parallelism).

A stride-1 'same' convolution with a kh x kw kernel computes output row y from input rows
y - kh//2 .. y + kh//2. With the image's rows split over n devices (contiguous blocks), each
device holds rows [y0, y1) and needs kh//2 rows on each side that its neighbours hold: the
halo. Before the convolution every device sends its first and last kh//2 rows to the device
above and below (point-to-point), then runs the convolution on its block extended by the
received halo ('valid' over the extension: no zero padding except at the image's own
border). Backward, the input gradient of the extended block spills kh//2 rows into each
neighbour's block: those halo contributions are sent back and added by the owner; the
weight gradient is each device's local sum (a Partial, reduced like data parallel). The
same holds for columns with kw//2; with both split, the rows are exchanged first and the
column halo then carries the corner blocks (Dryden et al. 2019, "Improving Strong-Scaling of
CNN Training by Exploiting Finer-Grained Parallelism", IPDPS, Sec. III-A spatial
parallelism and halo exchange; Jin et al. 2018, "Spatially Parallel Convolutions", ICLR
workshop; MindSpore's dataset split along H/W for large images, seeds
mindspore-other-features.md "Dataset Splitting").

Bytes one device sends per pass on the axis of n devices splitting H, interior devices
having two neighbours (edge devices one, n = 2 gives every device one):

    halo_H = neighbours(n) * (kh//2) * W_local * C_local * N_local * e
    halo_W = neighbours(n) * (kw//2) * H_ext * C_local * N_local * e,
             H_ext = H_local + 2 (kh//2) when H is split too (the corners), else H_local

priced as one point-to-point message of that size on the axis (`send_recv`), forward (the
input halo) and backward (the halo gradient contributions) alike.

`halo_width` is the number of rows or columns actually exchanged; a mutation test sets it
to 0 (no exchange: each device zero-pads its own block, the error of a naive split) and
`verify` must fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from simulator.graph.ops.base import KernelCtx, Shape

__all__ = ["halo_width", "neighbours", "halo_bytes", "halo_steps", "group_forward",
           "group_vjp"]

_SPATIAL = {"y": 2, "x": 3}  # label -> dim of the NCHW input


def halo_width(kernel: int) -> int:
    """Rows (columns) exchanged with each neighbour for a kernel of `kernel` (odd, stride 1,
    'same' padding): kernel // 2. Mutation tests replace it."""
    return kernel // 2


def neighbours(n: int) -> int:
    """Neighbours of the busiest device in a non-periodic split of n blocks."""
    return min(2, n - 1)


def halo_bytes(label: str, ins: list[Shape], ins_local: list[Shape], n: int, e: float
               ) -> float:
    """Bytes one (interior) device sends per pass for the split of `label` on n devices
    (module docstring); 0 for a label other than y or x."""
    if label not in _SPATIAL or n < 2:
        return 0.0
    (nb, c, h, w), (_, _, kh, kw) = ins_local[0], ins[1]
    if label == "y":
        return float(neighbours(n) * halo_width(kh) * w * c * nb) * e
    rows = h + 2 * halo_width(kh) if h < ins[0][2] else h
    return float(neighbours(n) * halo_width(kw) * rows * c * nb) * e


def halo_steps(label: str, ins: list[Shape], ins_local: list[Shape], n: int, e: float,
               phase: str) -> tuple[tuple[str, float], ...]:
    """The exchange one device runs on an axis splitting `label`, in either pass."""
    nbytes = halo_bytes(label, ins, ins_local, n, e)
    return (("send_recv", nbytes),) if nbytes > 0 else ()


def _region(ctx: KernelCtx, block: np.ndarray) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the rows and columns of the image a rank's block holds."""
    _, _, y0, x0 = ctx.in_offsets[0]
    return y0, y0 + block.shape[2], x0, x0 + block.shape[3]


def _extension(ctx: KernelCtx, block: np.ndarray, kh: int, kw: int
               ) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The extended block a rank convolves (own block and kh//2, kw//2 each side), and the
    part of it that the exchange fills (the halo_width rows/columns each side)."""
    y0, y1, x0, x1 = _region(ctx, block)
    ph, pw = kh // 2, kw // 2
    hh, hw = halo_width(kh), halo_width(kw)
    return (y0 - ph, y1 + ph, x0 - pw, x1 + pw), (y0 - hh, y1 + hh, x0 - hw, x1 + hw)


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]
             ) -> tuple[int, int, int, int] | None:
    y0, y1 = max(a[0], b[0]), min(a[1], b[1])
    x0, x1 = max(a[2], b[2]), min(a[3], b[3])
    return (y0, y1, x0, x1) if y0 < y1 and x0 < x1 else None


def _pieces(xs_by_rank, ctxs: list[KernelCtx], group: list[int], r: int, kh: int, kw: int):
    """For rank r: its extended region and, per group member m, the overlap of m's block
    with the rows/columns r receives (its own block included)."""
    ext, reach = _extension(ctxs[r], xs_by_rank[r][0], kh, kw)
    out = []
    for m in group:
        common = _overlap(_region(ctxs[m], xs_by_rank[m][0]), reach)
        if common is not None:
            out.append((m, common))
    return ext, out


def _local(region: tuple[int, int, int, int], origin: tuple[int, int, int, int]
           ) -> tuple[slice, slice, slice, slice]:
    """`region` (image coordinates) as an index into a block starting at `origin`."""
    return (slice(None), slice(None), slice(region[0] - origin[0], region[1] - origin[0]),
            slice(region[2] - origin[2], region[3] - origin[2]))


def _extended(xs_by_rank, ctxs, group, r, kh, kw) -> np.ndarray:
    """Rank r's block with the received halo (zeros where nothing is received: beyond the
    image border, or beyond `halo_width`)."""
    x = xs_by_rank[r][0]
    ext, pieces = _pieces(xs_by_rank, ctxs, group, r, kh, kw)
    out = np.zeros(x.shape[:2] + (ext[1] - ext[0], ext[3] - ext[2]), dtype=x.dtype)
    for m, common in pieces:
        out[_local(common, ext)] = xs_by_rank[m][0][_local(common, _region(ctxs[m],
                                                                         xs_by_rank[m][0]))]
    return out


def _windows(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
    return sliding_window_view(x, (kh, kw), axis=(2, 3))  # n c y x p q


def group_forward(xs_by_rank, attrs: dict[str, Any], ctxs: list[KernelCtx],
                  groups: list[list[int]]) -> list[np.ndarray]:
    """Every rank's output block: the 'valid' convolution of its extended block."""
    out: list[Any] = [None] * len(xs_by_rank)
    for group in groups:
        for r in group:
            w = xs_by_rank[r][1]
            ext = _extended(xs_by_rank, ctxs, group, r, w.shape[2], w.shape[3])
            out[r] = np.einsum("ncyxpq,ocpq->noyx", _windows(ext, w.shape[2], w.shape[3]), w,
                               optimize=True)
    return out


def group_vjp(xs_by_rank, ys, dys, attrs: dict[str, Any], ctxs: list[KernelCtx],
              groups: list[list[int]]) -> list[list[np.ndarray | None]]:
    """dw: each rank's local sum over its extended block; dx: the gradient of each rank's
    extended block, its own rows kept and its halo rows sent back to and added by their
    owners."""
    grads: list[list[np.ndarray | None]] = [
        [np.zeros_like(xs[0]), None] for xs in xs_by_rank]
    for group in groups:
        for r in group:
            w, dy = xs_by_rank[r][1], dys[r]
            kh, kw = w.shape[2], w.shape[3]
            ext = _extended(xs_by_rank, ctxs, group, r, kh, kw)
            grads[r][1] = np.einsum("ncyxpq,noyx->ocpq", _windows(ext, kh, kw), dy,
                                    optimize=True)
            padded = np.pad(dy, ((0, 0), (0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1)))
            dext = np.einsum("noyxpq,ocpq->ncyx", _windows(padded, kh, kw),
                             w[:, :, ::-1, ::-1], optimize=True)
            region, pieces = _pieces(xs_by_rank, ctxs, group, r, kh, kw)
            for m, common in pieces:
                dx = grads[m][0]
                assert dx is not None
                dx[_local(common, _region(ctxs[m], xs_by_rank[m][0]))] += \
                    dext[_local(common, region)]
    return grads
