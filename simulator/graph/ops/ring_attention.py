"""RingAttention: causal FlashAttention with the sequence split across the devices of a
context-parallel ring (Liu, Zaharia & Abbeel 2023, "Ring Attention with Blockwise
Transformers for Near-Infinite Context", Sec. 3 and Alg. 1; Megatron-Core context parallel,
transformer_engine/pytorch/attention.py `AttnFuncWithCPAndKVP2P` /
`attn_forward_func_with_cp`). Same layout and reference value as `FusedAttention`:
q [b, s, g, r, d], k and v [b, s, g, d] -> context [b, s, g, r, d].

Sharding: the sequence label `s` (queries, keys and values alike) is `internal`: split on a
mesh axis of n devices, each holds s/n queries and s/n keys and values, and the op runs its
own exchange (a GroupKernel): at step j = 0 .. n-1 rank i attends its queries to the key and
value block of rank i - j (its own at step 0), received from its ring neighbour, folding
each block in with the online softmax (running row max and sum; FlashAttention, Dao et al.
2022, Alg. 1); the output stays split on `s`. Backward: each rank's dK and dV contributions
travel the ring back to the block's owner (TE passes dKV with the KV blocks).

Traffic per device per layer (n ranks, one K block of b * s/n * g * d elements of e bytes):
forward n-1 steps of its K and V blocks, 2 (n-1) b (s/n) g d e bytes sent, the bytes of a
ring all-gather of K and V (nccl-tests all_gather buffer: n blocks); backward the KV ring
again and the dK/dV ring back, a reduce-scatter's bytes: 4 (n-1) b (s/n) g d e in all.
Listed as all_gather / reduce_scatter on the ring's axis (same bytes per device as the
cp-1 send/recv steps; TE overlaps them with the blockwise compute, not modelled here).

Cost: causal load balancing (Megatron-Core's `get_batch_on_this_cp_rank`: the sequence in
2n chunks, rank i holding chunks i and 2n-1-i) gives every rank the same causal work, 1/n
of the whole: the model FLOPs over the full key length, half of them executed. The numeric
proof keeps contiguous chunks (the balanced split reorders tokens while the causal mask
keeps their original positions, so no token's value changes); the timing prices the
balanced ranks. `ring`: the size of the ring the op is built for, the key/value blocks its
FLOPs and cost count per rank (ring * the local key length: the whole sequence).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.attention import _LSE_BYTES, masked, window_keys
from simulator.graph.ops.attention import _cost as _flash_cost
from simulator.graph.ops.attention import _forward as _flash_forward
from simulator.graph.ops.attention import _infer as _flash_infer
from simulator.graph.ops.attention import _vjp as _flash_vjp
from simulator.graph.ops.base import GroupKernel, KernelCtx, LabelView, OpFamily, Shape, register
from simulator.graph.ops.elementwise import dropout_mask

__all__ = ["ring_steps", "ring_kv_bytes"]

_NEG = -1e9


def ring_steps(n: int) -> range:
    """The key/value blocks a rank folds in: step j uses the block of the rank j places
    before it on the ring (step 0: its own). A mutation test drops one."""
    return range(n)


def window_blocks(s_local: int, n: int, window: int) -> int:
    """Key/value blocks of s_local tokens a rank's queries can see (its own included) under
    a window of `window` tokens (0: every block, n): the blocks that start less than W-1
    tokens before its first query, at most n. A windowed ring passes only those (the
    blocks further back are masked whole: Brandon et al. 2023, "Striped Attention", Sec. 2
    on ring attention's work; TE's P2P ring stops at the window, `window_size`)."""
    if not window:
        return n
    return min(n, 1 + -(-(window - 1) // s_local))


def ring_kv_bytes(out_local: Shape, n: int, e: float, phase: str, window: int = 0) -> float:
    """Bytes one device sends per layer: its K and V blocks to the n-1 ranks after it
    (under a window, to those whose queries it reaches: `window_blocks` - 1) forward; the
    KV ring again and the dK/dV ring back in the backward."""
    b, s, g, _, d = out_local
    block = float(b * s * g * d) * e
    steps = window_blocks(s, n, window) - 1
    return (2.0 if phase == "fwd" else 4.0) * steps * block


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    kv = ("b", "s", "g", "d")
    return LabelView((("b", "s", "g", "r", "d"), kv, kv), ("b", "s", "g", "r", "d"),
                     fixed=frozenset({"d"}), internal=frozenset({"s"}))


def _block(q, k, attrs, ctx: KernelCtx, kctx: KernelCtx, scale: float):
    """Scaled, causally masked scores of q's block against k's block [b, g, r, s, t], and
    the dropout keep-mask of that block of the global probabilities."""
    z = np.einsum("bsgrd,btgd->bgrst", q, k) * scale
    qs, ks = ctx.in_offsets[0][1], kctx.in_offsets[1][1]
    rows = np.arange(qs, qs + q.shape[1])[:, None]
    cols = np.arange(ks, ks + k.shape[1])[None, :]
    z = np.where(masked(rows, cols, attrs), _NEG, z)
    (b, s, g, r, _), t = ctx.in_shapes[0], ctx.in_shapes[1][1]
    b0, _, g0, r0, _ = ctx.in_offsets[0]
    pctx = KernelCtx(ctx.in_shapes, (b, g, r, s, t), ctx.in_offsets, (b0, g0, r0, qs, ks),
                     z.shape, ctx.batch_offset)
    return z, dropout_mask(attrs, pctx, z.shape)


def _scale(q: np.ndarray, attrs: dict[str, Any]) -> float:
    return float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))


def _ring(group: list[int], pos: int) -> list[int]:
    return [group[(pos - j) % len(group)] for j in ring_steps(len(group))]


def _rank_forward(xs_by_rank, attrs, ctxs, group, pos):
    """Rank group[pos]'s output and row log-sum-exp, folding the ring's blocks in order."""
    i = group[pos]
    q = xs_by_rank[i][0]
    scale = _scale(q, attrs)
    m = l = acc = None
    for j in _ring(group, pos):
        z, keep = _block(q, xs_by_rank[j][1], attrs, ctxs[i], ctxs[j], scale)
        m_new = z.max(-1) if m is None else np.maximum(m, z.max(-1))
        p = np.exp(z - m_new[..., None])
        pv = np.einsum("bgrst,btgd->bsgrd", p * keep, xs_by_rank[j][2])
        if m is None:
            l, acc = p.sum(-1), pv
        else:
            corr = np.exp(m - m_new)
            l = l * corr + p.sum(-1)
            acc = acc * np.moveaxis(corr, -1, 1)[..., None] + pv
        m = m_new
    return acc / np.moveaxis(l, -1, 1)[..., None], m + np.log(l)


def _group_forward(xs_by_rank, attrs, ctxs, groups):
    out: list[Any] = [None] * len(xs_by_rank)
    for group in groups:
        for pos, r in enumerate(group):
            out[r] = _rank_forward(xs_by_rank, attrs, ctxs, group, pos)[0]
    return out


def _group_vjp(xs_by_rank, ys, dys, attrs, ctxs, groups):
    """FlashAttention's backward block by block (FA-2 Sec. 3.1.2): with the row log-sum-exp
    and D = rowsum(dO * O), dS = P * (dP - D); dK and dV of block j summed over the ranks."""
    grads = [[np.zeros_like(x) for x in xs] for xs in xs_by_rank]
    for group in groups:
        for pos, i in enumerate(group):
            q, dy = xs_by_rank[i][0], dys[i]
            o, lse = _rank_forward(xs_by_rank, attrs, ctxs, group, pos)
            dd = np.einsum("bsgrd,bsgrd->bgrs", dy, o)
            scale = _scale(q, attrs)
            for j in _ring(group, pos):
                k, v = xs_by_rank[j][1], xs_by_rank[j][2]
                z, keep = _block(q, k, attrs, ctxs[i], ctxs[j], scale)
                p = np.exp(z - lse[..., None])
                grads[j][2] += np.einsum("bgrst,bsgrd->btgd", p * keep, dy)
                dp = np.einsum("bsgrd,btgd->bgrst", dy, v) * keep
                ds = p * (dp - dd[..., None]) * scale
                grads[i][0] += np.einsum("bgrst,btgd->bsgrd", ds, k)
                grads[j][1] += np.einsum("bgrst,bsgrd->btgd", ds, q)
    return grads


def _axis_comm(out_local: Shape, n: int, e: float, phase: str, attrs: dict[str, Any]
               ) -> tuple[tuple[str, float], ...]:
    """(collective, nccl-tests bytes) per phase: forward an all-gather of K and one of V
    (n blocks each), backward those again and a reduce-scatter of dK and one of dV. Under
    a window that reaches m < n blocks, the m-1 ring steps are listed as all-gathers among
    m ranks (the same bytes sent per device: (m-1) blocks of K and of V)."""
    b, s, g, _, d = out_local
    m = window_blocks(s, n, int(attrs.get("window", 0)))
    if m <= 1:
        return ()
    buffer = float(m * b * s * g * d) * e
    fwd = (("all_gather", buffer), ("all_gather", buffer))
    return fwd if phase == "fwd" else fwd + (("reduce_scatter", buffer),) * 2


def _cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
          ) -> tuple[float, float, float]:
    """FlashAttention's kernel cost over this rank's queries and ALL `ring` key blocks
    (load-balanced causal work, see the module doc)."""
    n = int(attrs.get("ring", 1))
    kv = tuple(ins[1][:1]) + (ins[1][1] * n,) + tuple(ins[1][2:])
    return _flash_cost([ins[0], kv, kv], out, attrs, e, phase)


def _flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    (b, s, g, r, d) = shapes[0]
    t = window_keys(shapes[1][1] * int(attrs.get("ring", 1)), attrs)
    return 4.0 * b * g * r * s * t * d


register(OpFamily("RingAttention", (3, 3), _flash_infer, _labels, _flash_forward, _flash_vjp,
                  _flops, kind="attention", saves=(0, 1, 2, -1),
                  saved_extra=lambda ins, out: _LSE_BYTES * math.prod(out[:-1]),
                  cost=_cost, attrs=("scale", "ring", "window"),
                  group=GroupKernel(_group_forward, _group_vjp, attrs_comm=_axis_comm)),
         "ContextParallelAttention")
