"""How `verify` compares a tensor of the sharded run with the single-device reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Check", "compare"]


@dataclass(frozen=True)
class Check:
    tensor: str
    max_abs_error: float
    max_rel_error: float
    ok: bool


def compare(name: str, got: np.ndarray, want: np.ndarray, tol: float,
            floor: float = 1e-12) -> Check:
    """Error relative to the largest reference value, or to `floor` where that is smaller
    (a gradient that is zero in exact arithmetic, such as a key bias's under softmax, holds
    rounding noise of the size of the other gradients' rounding)."""
    if not want.size:
        return Check(name, 0.0, 0.0, True)
    err, top, bottom = _peaks(got, want)
    scale = max(top, -bottom, floor)
    return Check(name, err, err / scale, err / scale <= tol)


_BLOCK = 1 << 16  # elements compared at a time


def _peaks(got: np.ndarray, want: np.ndarray) -> tuple[float, float, float]:
    """(max |got - want|, max want, min want), a cache-sized block at a time: one pass
    over memory instead of five. NaN propagates as through np.max of the whole arrays."""
    g, w = np.ravel(got), np.ravel(want)
    if g.shape != w.shape:  # (shapes that only broadcast: compared whole)
        g, w = (np.ravel(a) for a in np.broadcast_arrays(got, want))
    errs, tops, bottoms = [], [], []
    for a in range(0, w.size, _BLOCK):
        wb = w[a:a + _BLOCK]
        errs.append(np.max(np.abs(np.subtract(g[a:a + _BLOCK], wb))))
        tops.append(np.max(wb))
        bottoms.append(np.min(wb))
    return float(np.max(errs)), float(np.max(tops)), float(np.min(bottoms))
