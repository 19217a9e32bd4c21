"""Rotary position embedding and the last-dim concatenation that multi-head latent attention
(`graph.mla`) and multi-token prediction build on.

Rotary: RoPE (Su et al. 2021, "RoFormer", Eq. 34) in its rotate-half form (GPT-NeoX;
Megatron-Core `apply_rotary_pos_emb`, megatron/core/models/common/embeddings/rope_utils.py):
x [b, s, ..., d] (d even) -> x cos(p w) + rotate_half(x) sin(p w), rotate_half(x) =
[-x2, x1] for the halves x1, x2 of the last dim, p the token's position along dim 1 (its
global index: a sequence-split block starts at its offset), w_j = base^(-2j/d) repeated on
both halves. Linear in x (a Partial input passes through); the last dim stays whole, every
other dim may be split.

ConcatLast: [a, b] along the last dim, b either of a's shape but its last dim, or
[batch, seq, d_b] broadcast over a's head dims (MLA's key: the per-head no-position part
beside the one rotary key every head shares, Megatron-Core's `k_pos_emb.expand(...)` then
`torch.cat`, megatron/core/transformer/multi_latent_attention.py). The backward of a
broadcast input sums over the heads. The last dims stay whole; Partial inputs pass
through only together (a sum of concatenations is the concatenation of the sums).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register

__all__ = ["rotate", "rotary_angles"]


def _rot_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x = shapes[0]
    if len(x) < 3 or x[-1] % 2:
        raise OpError(f"Rotary takes x [b, s, ..., d] with an even d, got {list(x)}")
    return tuple(x)


def _rot_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs,), labs, fixed=frozenset({labs[-1]}),
                     linear_inputs=frozenset({0}))


def rotary_angles(first: int, count: int, dim: int, base: float) -> np.ndarray:
    """[count, dim] angles p * w of positions first .. first + count - 1 (RoFormer Eq. 15's
    theta_j = base^(-2(j-1)/d), the same frequency on both halves)."""
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.arange(first, first + count, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([ang, ang], axis=-1)


def rotate(x: np.ndarray, first: int, base: float, inverse: bool = False) -> np.ndarray:
    """x rotated by the angles of its positions (dim 1, from `first`); `inverse`: by minus
    them (the transpose: the backward of the rotation)."""
    ang = rotary_angles(first, x.shape[1], x.shape[-1], base)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 3) + (x.shape[-1],)
    cos, sin = np.cos(ang).reshape(shape), np.sin(ang).reshape(shape)
    if inverse:
        sin = -sin
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + turned * sin


def _rot_forward(xs, attrs, ctx: KernelCtx):
    return rotate(xs[0], ctx.in_offsets[0][1], float(attrs.get("base", 10000.0)))


def _rot_vjp(xs, y, dy, attrs, ctx: KernelCtx):
    return [rotate(dy, ctx.in_offsets[0][1], float(attrs.get("base", 10000.0)), True)]


register(OpFamily("Rotary", (1, 1), _rot_shape, _rot_labels, _rot_forward, _rot_vjp,
                  lambda s, o, a: 3.0 * math.prod(o), kind="elementwise", saves=(),
                  attrs=("base",)), "RoPE")


def _broadcast(shapes: list[Shape]) -> bool:
    a, b = shapes
    return len(b) == 3 and len(a) > 3


def _cat_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    a, b = shapes
    lead = tuple(a[:2]) if _broadcast(shapes) else tuple(a[:-1])
    if len(a) < 2 or tuple(b[:-1]) != lead:
        raise OpError(f"ConcatLast takes a [..., d_a] and b [..., d_b] of the same leading "
                      f"dims (or b [batch, seq, d_b] broadcast over a's heads); got "
                      f"{[list(s) for s in shapes]}")
    return tuple(a[:-1]) + (a[-1] + b[-1],)


def _cat_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    a = shapes[0]
    lead = tuple(f"d{i}" for i in range(len(a) - 1))
    b = lead[:2] if _broadcast(shapes) else lead
    return LabelView((lead + ("ca",), b + ("cb",)), lead + ("c",),
                     fixed=frozenset({"ca", "cb", "c"}), partial_all=True)


def _cat_forward(xs, attrs, ctx):
    a, b = xs
    if b.ndim < a.ndim:
        b = np.broadcast_to(b.reshape(b.shape[:2] + (1,) * (a.ndim - 3) + b.shape[-1:]),
                            a.shape[:-1] + b.shape[-1:])
    return np.concatenate([a, b], axis=-1)


def _cat_vjp(xs, y, dy, attrs, ctx):
    a, b = xs
    da, db = dy[..., :a.shape[-1]], dy[..., a.shape[-1]:]
    if b.ndim < a.ndim:
        db = db.sum(axis=tuple(range(2, a.ndim - 1)))
    return [np.ascontiguousarray(da), np.ascontiguousarray(db)]


register(OpFamily("ConcatLast", (2, 2), _cat_shape, _cat_labels, _cat_forward, _cat_vjp,
                  lambda s, o, a: 0.0, kind="elementwise", saves=()))
