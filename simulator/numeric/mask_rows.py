"""Dropout keep-masks drawn once per global row (numeric.stacked_offsets).

A dropout mask is a pure function of (seed, p, each element's global coordinates)
(`elementwise.dropout_mask`: a splitmix64 hash of the row-major flat index, the batch dim
shifted by the micro-batch's offset), and the flat index of an element does not depend on
the logical size of the first dim. So the scaled mask of global rows [lo, hi) of an op
whose ranks hold whole rows (data parallel, where every rank's block spans every dim but
the batch) is the same array in the sharded run of every micro-batch, in the single-device
run of the whole batch and in that of the first micro-batch: it is drawn once, kept as
one table of rows per (seed, p, trailing shape), and each stack of ranks reads its rows
from it (a view where the ranks' rows are consecutive). Ranks are still masked at their
own global rows: a wrong offset reads another row's mask. Blocks that split a trailing dim
are drawn as before (`stacked_offsets._keep`).

The table holds the keep-mask as booleans (one byte an element, an eighth of the scaled
mask as floats: at 1024 data-parallel devices 36 MB instead of 288 MB in each process of
verify), and dropout multiplies twice: x * keep * (1 / (1 - p)) rounds exactly as the
family's x * (keep / (1 - p)), since x * keep is exact.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.graph.ops.elementwise import keep_draws

__all__ = ["row_mask", "row_keep", "clear_row_masks", "global_index"]

Shape = tuple[int, ...]
_Key = tuple[int, float, Shape]

# (seed, p, trailing shape) -> disjoint [(first row, keep-mask of its rows)]
_TABLES: dict[_Key, list[tuple[int, np.ndarray]]] = {}
_CHUNK = 1 << 16  # elements hashed at a time


def global_index(out_shape: Shape, starts: np.ndarray, local: Shape) -> np.ndarray:
    """Row-major global flat index of every element of each rank's block (`starts`
    [R, ndim]), as `elementwise.dropout_mask` numbers them."""
    nd = len(local)
    flat = np.zeros((len(starts),) + (1,) * nd, dtype=np.int64)
    for axis, (n, full) in enumerate(zip(local, out_shape)):
        coord = np.arange(n, dtype=np.int64).reshape((1,) * (axis + 1) + (n,)
                                                     + (1,) * (nd - axis - 1))
        flat = flat * (full if axis else 1) + coord + starts[:, axis].reshape(
            (len(starts),) + (1,) * nd)
    return flat


def _draw(key: _Key, lo: int, out: np.ndarray) -> None:
    """Write the keep-mask of rows [lo, lo + len(out)) into `out`, hashed a block of
    about _CHUNK elements at a time: the hash's passes over a block stay in the cache
    (4x faster than one pass after another over a 64 MB array)."""
    seed, p, trail = key
    step = max(1, _CHUNK // max(1, math.prod(trail)))
    starts = np.zeros((1, 1 + len(trail)), dtype=np.int64)
    for a in range(0, len(out), step):
        n = min(step, len(out) - a)
        starts[0, 0] = lo + a
        out[a:a + n] = keep_draws(seed, global_index((lo + a + n,) + trail, starts,
                                                     (n,) + trail), p)[0]


def _rows(key: _Key, lo: int, hi: int) -> tuple[int, np.ndarray]:
    """A kept table (first row, rows) that covers [lo, hi): an existing one, or the union
    of [lo, hi) with the tables it overlaps or touches, the missing rows drawn."""
    tables = _TABLES.setdefault(key, [])
    for first, arr in tables:
        if first <= lo and hi <= first + len(arr):
            return first, arr
    near = sorted((t for t in tables if t[0] <= hi and lo <= t[0] + len(t[1])),
                  key=lambda t: t[0])
    u_lo = min([lo] + [f for f, _ in near])
    u_hi = max([hi] + [f + len(a) for f, a in near])
    out = np.empty((u_hi - u_lo,) + key[2], dtype=bool)
    pos = u_lo
    for first, arr in near:
        if first > pos:
            _draw(key, pos, out[pos - u_lo:first - u_lo])
        out[first - u_lo:first - u_lo + len(arr)] = arr
        pos = first + len(arr)
    if pos < u_hi:
        _draw(key, pos, out[pos - u_lo:])
    out.flags.writeable = False
    gone = {id(a) for _, a in near}
    tables[:] = [t for t in tables if id(t[1]) not in gone] + [(u_lo, out)]
    return u_lo, out


def row_mask(seed: int, p: float, out_shape: Shape, starts: np.ndarray, batch_offset: int,
             local: Shape) -> np.ndarray | None:
    """The scaled keep-mask (R, *local: 0 or 1 / (1 - p)) of `row_keep`, or None."""
    keep = row_keep(seed, p, out_shape, starts, batch_offset, local)
    return None if keep is None else keep / (1.0 - p)


def row_keep(seed: int, p: float, out_shape: Shape, starts: np.ndarray, batch_offset: int,
             local: Shape) -> np.ndarray | None:
    """The keep-mask (R, *local) of ranks whose blocks (`starts` [R, ndim]) hold whole
    rows, from the row table; None where a block splits a trailing dim (or p is not a
    probability the table can hold: NaN draws no keep)."""
    trail = tuple(out_shape[1:])
    if (not len(local) or tuple(local[1:]) != trail or starts[:, 1:].any()
            or math.isnan(p) or p >= 1.0):
        return None
    rows = starts[:, 0].astype(np.int64) + batch_offset
    n, lo = local[0], int(rows.min())
    hi = int(rows.max()) + n
    first, table = _rows((seed, p, trail), lo, hi)
    if np.array_equal(rows, lo + n * np.arange(len(rows))):  # consecutive: a view
        return table[lo - first:hi - first].reshape((len(rows),) + tuple(local))
    return table[(rows[:, None] + np.arange(n)[None, :]) - first]


def clear_row_masks() -> None:
    """Drop the kept tables (at the end of a verify run)."""
    _TABLES.clear()
