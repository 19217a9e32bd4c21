"""FusedAttention: causal softmax attention (`causal: false`: bidirectional, an encoder's)
as ONE kernel (FlashAttention, Dao et al. 2022;
FlashAttention-2, Dao 2023), grouped-query layout as in `graph.builders`:
q [b, s, g, r, d], k [b, t, g, d] and v [b, t, g, e] -> context [b, s, g, r, e], where g
key/value groups serve r query heads each (e = d but in multi-head latent attention, whose
values are narrower than its queries and keys: DeepSeek-V3's 128 against 192). The numpy
reference computes exactly what the unfused chain scores -> scale -> causal mask ->
softmax -> dropout -> context computes; the kernel keeps no s x s matrix.

Sliding-window attention (`window` W > 0; Beltagy et al. 2020, "Longformer", Sec. 3.1;
Mistral 7B, Jiang et al. 2023, Sec. 2): each query attends to the last W tokens, itself
included (key t for query s when s - W < t <= s: Hugging Face's sliding-window mask,
FlashAttention's window_size=(W-1, 0)). Attention sinks (a fourth input `sinks` [g, r], one
learned logit per head: GPT-OSS, OpenAI 2025 model card Sec. 2.1; Xiao et al. 2024): a
column of the softmax that takes probability but has no value, so each row's weights sum
to less than one.

Sharding: batch (b) and heads (g, r) may be split; the sequence and head dims stay whole
(context parallelism would split s with a key/value exchange).

Cost: the model FLOPs are QK^T and PV in full (2*b*heads*s*t*(d + e), so MFU compares with
unfused attention; under a window of W < t keys t is W, the window's square as the full
causal count is the sequence's, and the kernel executes the key blocks inside it: sum over
queries of min(s+1, W) pairs, a fraction 1 - (W-1)/(2s) of s*W; FlashAttention-2 skips the
blocks outside the window, flash_attn/flash_attn_interface.py `window_size`); the kernel
executes half of them (causal blocks above the diagonal are
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
    q, k, v = shapes[:3]
    if len(shapes) == 4 and len(q) == 5 and tuple(shapes[3]) != (q[2], q[3]):
        raise OpError(f"attention sinks take one logit per head [{q[2]}, {q[3]}], got "
                      f"{list(shapes[3])}")
    if len(q) != 5 or len(k) != 4 or len(v) != 4 or tuple(k[:3]) != tuple(v[:3]):
        raise OpError(f"FusedAttention takes q [b,s,g,r,d], k [b,t,g,d] and v [b,t,g,e]; "
                      f"got {[list(s) for s in shapes]}")
    if (q[0], q[2], q[4]) != (k[0], k[2], k[3]):
        raise OpError(f"q {list(q)} and k {list(k)} disagree on batch, groups or head dim")
    return tuple(q[:4]) + (v[3],)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    sinks: tuple[tuple[str, ...], ...] = (("g", "r"),) if len(shapes) == 4 else ()
    return LabelView((("b", "s", "g", "r", "d"), ("b", "t", "g", "d"), ("b", "t", "g", "e"))
                     + sinks, ("b", "s", "g", "r", "e"), fixed=frozenset({"s", "t", "d", "e"}))


def masked(rows: np.ndarray, cols: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Where query positions `rows` [s, 1] may not attend key positions `cols` [1, t]: the
    future (causal), and keys W or more tokens back (`window` W)."""
    out = cols > rows if attrs.get("causal", True) else np.zeros(
        np.broadcast_shapes(rows.shape, cols.shape), dtype=bool)
    window = int(attrs.get("window", 0))
    return out | (rows - cols >= window) if window else out


def sink_softmax(z: np.ndarray, sink: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis with an extra column of logit `sink` (broadcast to
    z[..., :1]; None: none) that takes probability and has no value."""
    m = z.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    e = np.exp(z - m)
    den = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - m)
    return e / den


def sink_grad(probs: np.ndarray, dp: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """d loss / d sink logit, summed over `axes` (batch and queries): the sink's own
    probability 1 - sum(probs) times (0 - sum(probs * dp))."""
    rest = 1.0 - probs.sum(axis=-1)
    return -(rest * (dp * probs).sum(axis=-1)).sum(axis=axes)


def _probs_ctx(q: np.ndarray, k: np.ndarray, ctx: KernelCtx) -> KernelCtx:
    """Where this block of the (b, g, r, s, t) probability tensor sits, for the dropout mask."""
    (b, s, g, r, _), t = ctx.in_shapes[0], ctx.in_shapes[1][1]
    b0, _, g0, r0, _ = ctx.in_offsets[0]
    local = (q.shape[0], q.shape[2], q.shape[3], q.shape[1], k.shape[1])
    return KernelCtx(ctx.in_shapes, (b, g, r, s, t), ctx.in_offsets, (b0, g0, r0, 0, 0),
                     local, ctx.batch_offset)


def _probs(q, k, attrs, ctx, sinks=None) -> tuple[np.ndarray, np.ndarray]:
    """(softmax probabilities, scaled keep-mask) of the causal (windowed) scores, with a
    sink logit per head where `sinks` [g, r] is given."""
    scale = float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))
    z = np.einsum("bsgrd,btgd->bgrst", q, k) * scale
    sq, tk = z.shape[-2], z.shape[-1]
    z = np.where(masked(np.arange(sq)[:, None], np.arange(tk)[None, :], attrs), -1e9, z)
    probs = sink_softmax(z, None if sinks is None else sinks[None, :, :, None, None])
    return probs, dropout_mask(attrs, _probs_ctx(q, k, ctx), probs.shape)


def _forward(xs, attrs, ctx):
    q, k, v = xs[:3]
    probs, keep = _probs(q, k, attrs, ctx, xs[3] if len(xs) == 4 else None)
    return np.einsum("bgrst,btgd->bsgrd", probs * keep, v)


def _vjp(xs, y, dy, attrs, ctx):
    q, k, v = xs[:3]
    scale = float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))
    probs, keep = _probs(q, k, attrs, ctx, xs[3] if len(xs) == 4 else None)
    dv = np.einsum("bgrst,bsgrd->btgd", probs * keep, dy)
    dp = np.einsum("bsgrd,btgd->bgrst", dy, v) * keep
    ds = probs * (dp - (dp * probs).sum(axis=-1, keepdims=True)) * scale
    dq = np.einsum("bgrst,btgd->bsgrd", ds, k)
    dk = np.einsum("bgrst,bsgrd->btgd", ds, q)
    return [dq, dk, dv] + ([sink_grad(probs, dp, (0, 3))] if len(xs) == 4 else [])


def window_keys(t: int, attrs: dict[str, Any]) -> int:
    """Keys one query may see: the window W where it is shorter than the `t` keys."""
    window = int(attrs.get("window", 0))
    return min(window, t) if window else t


def _flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    (b, s, g, r, d), t, e = shapes[0], window_keys(shapes[1][1], attrs), shapes[2][3]
    return 2.0 * b * g * r * s * t * (d + e)


def executed(t: int, attrs: dict[str, Any]) -> float:
    """The fraction of the model FLOPs (`_flops`: t x w query-key pairs over a sequence of t
    tokens) the kernel runs: causal attention half of them (the blocks above the diagonal
    skipped), under a window of w < t keys sum_i min(i+1, w) / (t w) = 1 - (w-1)/(2t)
    (a context-parallel rank's share of the balanced ring's work is the same fraction)."""
    if not attrs.get("causal", True):
        return 1.0
    w = window_keys(t, attrs)
    if w == t:
        return 0.5
    return 1.0 - (w - 1) / (2.0 * t)


def _cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
          ) -> tuple[float, float, float]:
    flops = _flops(ins, out, attrs)
    io = e * float(sum(math.prod(s) for s in ins) + math.prod(out))
    done = executed(ins[1][1], attrs)
    if phase == "fwd":
        return flops, io, done
    return 2.0 * flops, 2.0 * io, done * 2.5 / 2.0


register(OpFamily("FusedAttention", (3, 4), _infer, _labels, _forward, _vjp, _flops,
                  kind="attention", saves=(0, 1, 2, -1),
                  saved_extra=lambda ins, out: _LSE_BYTES * math.prod(out[:-1]),
                  cost=_cost, attrs=("scale", "causal", "window")), "FlashAttention")
