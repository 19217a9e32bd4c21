"""A one-dimensional minimiser for the fits of `shardsim calibrate`: a grid over the log of
the parameter, then golden-section search around the best grid point. The grid keeps it
from settling in a local minimum where the modelled algorithm switches (NCCL's tuner picks
the fastest of several, so a fit's loss is piecewise smooth)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["minimise"]

_GRID = 24
_GOLDEN = (math.sqrt(5) - 1) / 2


def minimise(loss: Callable[[float], float], lo: float, hi: float,
             iterations: int = 30) -> float:
    """The x in [lo, hi] (lo > 0) of least `loss(x)`, searched in log(x)."""
    a, b = math.log(lo), math.log(hi)
    step = (b - a) / (_GRID - 1)
    grid = [a + i * step for i in range(_GRID)]
    best = min(range(_GRID), key=lambda i: (loss(math.exp(grid[i])), i))
    left, right = grid[max(best - 1, 0)], grid[min(best + 1, _GRID - 1)]
    c, d = right - _GOLDEN * (right - left), left + _GOLDEN * (right - left)
    fc, fd = loss(math.exp(c)), loss(math.exp(d))
    for _ in range(iterations):
        if fc <= fd:
            right, d, fd = d, c, fc
            c = right - _GOLDEN * (right - left)
            fc = loss(math.exp(c))
        else:
            left, c, fc = c, d, fd
            d = left + _GOLDEN * (right - left)
            fd = loss(math.exp(d))
    candidates = [(loss(math.exp(grid[best])), grid[best]), (min(fc, fd), c if fc <= fd else d)]
    return math.exp(min(candidates)[1])
