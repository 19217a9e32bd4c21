"""FusedAttention: causal softmax attention (`causal: false`: bidirectional, an encoder's)
as ONE kernel (FlashAttention, Dao et al. 2022;
FlashAttention-2, Dao 2023), grouped-query layout as in `graph.builders`:
q [b, s, g, r, d], k [b, t, g, d] and v [b, t, g, e] -> context [b, s, g, r, e], where g
key/value groups serve r query heads each (e = d but in multi-head latent attention, whose
values are narrower than its queries and keys: DeepSeek-V3's 128 against 192). The numpy
reference computes exactly what the unfused chain scores -> scale -> causal mask ->
softmax -> dropout -> context computes; the kernel keeps no s x s matrix.

Sharding: batch (b) and heads (g, r) may be split; the sequence and head dims stay whole
(context parallelism would split s with a key/value exchange).

Cost: the model FLOPs are QK^T and PV in full (2*b*heads*s*t*(d + e), so MFU compares with
unfused attention); the kernel executes half of them (causal blocks above the diagonal are
skipped; all of them without the mask) and its backward recomputes the scores (5 GEMM-sized
passes against the forward's 2, FA-2 Sec. 3.1.2). Memory traffic is Q, K, V and O; the
backward keeps Q, K, V, O and the fp32 log-sum-exp of every row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import KernelCtx, LabelView, OpError, OpFamily, Shape, register
from simulator.graph.ops.elementwise import dropout_mask

_LSE_BYTES = 4.0  # fp32 log-sum-exp per query row


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    q, k, v = shapes
    if len(q) != 5 or len(k) != 4 or len(v) != 4 or tuple(k[:3]) != tuple(v[:3]):
        raise OpError(f"FusedAttention takes q [b,s,g,r,d], k [b,t,g,d] and v [b,t,g,e]; "
                      f"got {[list(s) for s in shapes]}")
    if (q[0], q[2], q[4]) != (k[0], k[2], k[3]):
        raise OpError(f"q {list(q)} and k {list(k)} disagree on batch, groups or head dim")
    return tuple(q[:4]) + (v[3],)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    return LabelView((("b", "s", "g", "r", "d"), ("b", "t", "g", "d"), ("b", "t", "g", "e")),
                     ("b", "s", "g", "r", "e"), fixed=frozenset({"s", "t", "d", "e"}))


def _probs_ctx(q: np.ndarray, k: np.ndarray, ctx: KernelCtx) -> KernelCtx:
    """Where this block of the (b, g, r, s, t) probability tensor sits, for the dropout mask."""
    (b, s, g, r, _), t = ctx.in_shapes[0], ctx.in_shapes[1][1]
    b0, _, g0, r0, _ = ctx.in_offsets[0]
    local = (q.shape[0], q.shape[2], q.shape[3], q.shape[1], k.shape[1])
    return KernelCtx(ctx.in_shapes, (b, g, r, s, t), ctx.in_offsets, (b0, g0, r0, 0, 0),
                     local, ctx.batch_offset)


def _probs(q, k, attrs, ctx) -> tuple[np.ndarray, np.ndarray]:
    """(softmax probabilities, scaled keep-mask) of the causal scores."""
    scale = float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))
    z = np.einsum("bsgrd,btgd->bgrst", q, k) * scale
    sq, tk = z.shape[-2], z.shape[-1]
    if attrs.get("causal", True):
        z = np.where(np.arange(tk)[None, :] > np.arange(sq)[:, None], -1e9, z)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    probs = z / z.sum(axis=-1, keepdims=True)
    return probs, dropout_mask(attrs, _probs_ctx(q, k, ctx), probs.shape)


def _forward(xs, attrs, ctx):
    q, k, v = xs
    probs, keep = _probs(q, k, attrs, ctx)
    return np.einsum("bgrst,btgd->bsgrd", probs * keep, v)


def _vjp(xs, y, dy, attrs, ctx):
    q, k, v = xs
    scale = float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))
    probs, keep = _probs(q, k, attrs, ctx)
    dv = np.einsum("bgrst,bsgrd->btgd", probs * keep, dy)
    dp = np.einsum("bsgrd,btgd->bgrst", dy, v) * keep
    ds = probs * (dp - (dp * probs).sum(axis=-1, keepdims=True)) * scale
    dq = np.einsum("bgrst,btgd->bsgrd", ds, k)
    dk = np.einsum("bgrst,bsgrd->btgd", ds, q)
    return [dq, dk, dv]


def _flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    (b, s, g, r, d), t, e = shapes[0], shapes[1][1], shapes[2][3]
    return 2.0 * b * g * r * s * t * (d + e)


def _cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
          ) -> tuple[float, float, float]:
    flops = _flops(ins, out, attrs)
    io = e * float(sum(math.prod(s) for s in ins) + math.prod(out))
    done = 0.5 if attrs.get("causal", True) else 1.0  # causal: the blocks above skipped
    if phase == "fwd":
        return flops, io, done
    return 2.0 * flops, 2.0 * io, done * 2.5 / 2.0


register(OpFamily("FusedAttention", (3, 3), _infer, _labels, _forward, _vjp, _flops,
                  kind="attention", saves=(0, 1, 2, -1),
                  saved_extra=lambda ins, out: _LSE_BYTES * math.prod(out[:-1]),
                  cost=_cost, attrs=("scale", "causal")), "FlashAttention")
