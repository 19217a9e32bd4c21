"""Transpose and Reshape. A reshape keeps a split only on dims that start at the same
flattened position in both shapes (equal prefix products): splitting such a dim k ways cuts
every prefix block into the same k contiguous chunks on both sides. Both ops are linear."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register


def _perm(shape: Shape, attrs: dict[str, Any]) -> tuple[int, ...]:
    perm = tuple(int(p) for p in attrs.get("perm", reversed(range(len(shape)))))
    if sorted(perm) != list(range(len(shape))):
        raise OpError(f"Transpose perm {list(perm)} is not a permutation of {len(shape)} dims")
    return perm


def _t_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs,), tuple(labs[p] for p in _perm(shapes[0], attrs)),
                     linear_inputs=frozenset({0}))


register(OpFamily(
    "Transpose", (1, 1),
    lambda s, a: tuple(s[0][p] for p in _perm(s[0], a)), _t_labels,
    lambda xs, a, c: np.transpose(xs[0], _perm(xs[0].shape, a)),
    lambda xs, y, dy, a, c: [np.transpose(dy, np.argsort(_perm(xs[0].shape, a)))],
    lambda s, o, a: 0.0, kind="copy", saves=(), attrs=("perm",)))


def _target(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    want = [int(n) for n in attrs.get("shape", ())]
    total = math.prod(shapes[0])
    if want.count(-1) == 1:
        rest = math.prod(n for n in want if n != -1)
        want[want.index(-1)] = total // rest if rest else 0
    if math.prod(want) != total or any(n <= 0 for n in want):
        raise OpError(f"cannot reshape {list(shapes[0])} to {attrs.get('shape')}")
    return tuple(want)


def _prefixes(shape: Shape) -> list[int]:
    return [math.prod(shape[:i]) for i in range(len(shape))]


def _r_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    src, dst = shapes[0], _target(shapes, attrs)
    out_by_prefix = {p: j for j, p in reversed(list(enumerate(_prefixes(dst))))}
    ins: list[str] = []
    outs = [f"o{j}" for j in range(len(dst))]
    fixed = set(outs)
    for i, p in enumerate(_prefixes(src)):
        j = out_by_prefix.get(p)
        if j is not None and src[i] > 1 and dst[j] > 1 and outs[j] == f"o{j}":
            outs[j] = f"d{i}"
            fixed.discard(f"o{j}")
            ins.append(f"d{i}")
        else:
            ins.append(f"i{i}")
            fixed.add(f"i{i}")
    return LabelView((tuple(ins),), tuple(outs), fixed=frozenset(fixed),
                     linear_inputs=frozenset({0}))


register(OpFamily(
    "Reshape", (1, 1), _target, _r_labels,
    lambda xs, a, c: xs[0].reshape(c.out_local_shape),
    lambda xs, y, dy, a, c: [dy.reshape(xs[0].shape)],
    lambda s, o, a: 0.0, kind="copy", saves=(), attrs=("shape",)), "Flatten")
