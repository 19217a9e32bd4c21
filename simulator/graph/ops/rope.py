"""Rotary: rotary position embedding (RoPE; Su et al. 2021, "RoFormer", Sec. 3.4.2, Eq. 34)
of queries or keys, x [b, s, ..., d] -> same shape: each pair (x_i, x_{i+d/2}) of the head
dim rotated by the angle pos * base^(-2i/d), pos the token's position in its sample (the
half-split pairing of GPT-NeoX, Hugging Face's `rotate_half` and Megatron-Core's
`apply_rotary_pos_emb` without interleave). `base`: rope_theta (10000 in RoFormer, 500000
in Llama 3). Positions are global: a rank holding tokens from offset o on (sequence or
context parallel) rotates them by their own positions.

Linear in x (a rotation): its VJP rotates dy back by -angle and reads no input, so it saves
nothing and passes Partial values through. Every dim may be split but the head dim `d`.
Cost: one fused elementwise kernel (Megatron-Core / Transformer Engine's fused RoPE):
3 FLOPs per element, x read and y written (the cos/sin table is O(s d), not counted).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register

__all__ = ["rope_angles"]


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x = shapes[0]
    if len(x) < 3 or x[-1] % 2:
        raise OpError(f"Rotary takes [b, s, ..., d] with an even head dim d, got {list(x)}")
    return tuple(x)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    labs = tuple(f"d{i}" for i in range(len(shapes[0])))
    return LabelView((labs,), labs, fixed=frozenset({labs[-1]}),
                     linear_inputs=frozenset({0}))


def rope_angles(positions: np.ndarray, d: int, base: float) -> np.ndarray:
    """[len(positions), d/2] angles pos * base^(-2i/d)."""
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    return positions[:, None].astype(np.float64) * inv[None, :]


def _rotate(x: np.ndarray, attrs: dict[str, Any], ctx: KernelCtx, sign: float) -> np.ndarray:
    s0, d = ctx.in_offsets[0][1], x.shape[-1]
    ang = rope_angles(np.arange(s0, s0 + x.shape[1]), d, float(attrs.get("base", 10000.0)))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 3) + (d // 2,)
    cos, sin = np.cos(ang).reshape(shape), sign * np.sin(ang).reshape(shape)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


register(OpFamily("Rotary", (1, 1), lambda s, a: _infer(s, a), _labels,
                  lambda xs, a, c: _rotate(xs[0], a, c, 1.0),
                  lambda xs, y, dy, a, c: [_rotate(dy, a, c, -1.0)],
                  lambda s, o, a: 3.0 * math.prod(o), kind="elementwise", saves=(),
                  attrs=("base",)), "RoPE")
