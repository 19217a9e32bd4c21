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


register(OpFamily("Gather", (2, 2), _infer, _labels, _forward, _vjp,
                  lambda s, o, a: float(math.prod(o)), kind="gather",
                  differentiable=(True, False)), "EmbeddingLookup")
