"""A one-dimensional minimiser for the fits of `shardsim calibrate`: a grid over the log of
the parameter, then golden-section search around the best grid point. The grid keeps it
from settling in a local minimum where the modelled algorithm switches (NCCL's tuner picks
the fastest of several, so a fit's loss is piecewise smooth)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["minimise", "simplex"]

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


_Scored = list[tuple[float, list[float]]]


def simplex(loss: Callable[[list[float]], float], start: list[float], lo: list[float],
            hi: list[float], evaluations: int = 600) -> list[float]:
    """The point of least `loss` near `start`, each coordinate kept in [lo, hi] (lo > 0):
    Nelder and Mead's simplex (1965, "A simplex method for function minimization", The
    Computer Journal 7(4)) in the logs of the coordinates, from a simplex of steps of a
    factor 1.5, with the usual reflection 1, expansion 2, contraction and shrink 1/2."""
    a, b = [math.log(x) for x in lo], [math.log(x) for x in hi]

    def inside(y: list[float]) -> list[float]:
        return [math.exp(min(max(v, a[i]), b[i])) for i, v in enumerate(y)]

    def f(y: list[float]) -> float:
        return loss(inside(y))

    first = [math.log(x) for x in start]
    points = [first] + [[v + (math.log(1.5) if i == j else 0.0) for j, v in enumerate(first)]
                        for i in range(len(first))]
    scored = sorted(((f(p), p) for p in points), key=lambda s: s[0])
    used = len(scored)
    while used < evaluations and scored[-1][0] - scored[0][0] > 1e-12 * (1 + abs(scored[0][0])):
        used += _step(scored, f)
        scored.sort(key=lambda s: s[0])
    return inside(scored[0][1])


def _step(scored: _Scored, f: Callable[[list[float]], float]) -> int:
    """One Nelder-Mead step on the sorted simplex `scored` (changed in place); returns the
    evaluations it took."""
    worst_f, worst = scored[-1]
    centre = [sum(p[i] for _, p in scored[:-1]) / (len(scored) - 1) for i in range(len(worst))]
    trial = [c + (c - w) for c, w in zip(centre, worst)]
    ft = f(trial)
    if ft < scored[0][0]:
        wide = [c + 2 * (c - w) for c, w in zip(centre, worst)]
        fw = f(wide)
        scored[-1] = (fw, wide) if fw < ft else (ft, trial)
        return 2
    if ft < scored[-2][0]:
        scored[-1] = (ft, trial)
        return 1
    inner = [c + 0.5 * (w - c) for c, w in zip(centre, worst)]
    fi = f(inner)
    if fi < worst_f:
        scored[-1] = (fi, inner)
        return 2
    best = scored[0][1]
    for k in range(1, len(scored)):
        q = [bv + 0.5 * (v - bv) for bv, v in zip(best, scored[k][1])]
        scored[k] = (f(q), q)
    return 2 + len(scored) - 1
