"""Gather (embedding lookup): table [V, h] and integer ids [...] -> [..., h].

Splitting the vocabulary dim leaves each device the rows it owns: ids outside its block look
up zeros, so the output is Partial (Megatron's vocab-parallel embedding). The op is linear in
the table. The ids carry no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    if len(shapes[0]) != 2:
        raise OpError(f"Gather table must be 2-D [vocab, hidden], got {list(shapes[0])}")
    return tuple(shapes[1]) + (shapes[0][1],)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    ids = tuple(f"i{k}" for k in range(len(shapes[1])))
    return LabelView((("v", "h"), ids), ids + ("h",), reducible=frozenset({"v"}),
                     linear_inputs=frozenset({0}))


def _local(ids: np.ndarray, start: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    local = ids.astype(np.int64) - start
    inside = (local >= 0) & (local < rows)
    return np.where(inside, local, 0), inside


def _forward(xs, attrs, ctx):
    table, ids = xs
    idx, inside = _local(ids, ctx.in_offsets[0][0], table.shape[0])
    return table[idx] * inside[..., None]


def _vjp(xs, y, dy, attrs, ctx):
    table, ids = xs
    idx, inside = _local(ids, ctx.in_offsets[0][0], table.shape[0])
    grad = np.zeros_like(table)
    np.add.at(grad, idx[inside], dy[inside])
    return [grad, None]


def _cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
          ) -> tuple[float, float, float]:
    """A lookup reads the rows it gathers, not the table: one read and one write per output
    element; its backward scatters the gradient rows (twice the FLOPs, 1.5x the bytes)."""
    n = float(math.prod(out))
    return (n, 2.0 * e * n, 1.0) if phase == "fwd" else (2.0 * n, 3.0 * e * n, 1.0)


register(OpFamily("Gather", (2, 2), _infer, _labels, _forward, _vjp,
                  lambda s, o, a: float(math.prod(o)), kind="gather",
                  differentiable=(True, False), saves=(1,), cost=_cost), "EmbeddingLookup")
