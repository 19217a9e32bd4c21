"""Stacked kernels of the families that read their block's offsets (numeric.stacked): each
rank's own offsets, as a [R] column, where the family's kernel reads one rank's (a dropout
mask's global coordinates, a causal mask's first query and key, a vocabulary shard's first
row or class, FusedAttention's dropout over the probabilities it never stores)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from simulator.graph.ops.attention import masked, sink_grad, sink_softmax
from simulator.graph.ops.einsum import contract
from simulator.graph.ops.elementwise import keep_draws
from simulator.numeric.mask_rows import clear_row_masks, global_index, row_keep, row_mask
from simulator.numeric.stacked import (
    Shape,
    StackCtx,
    StackedKernel,
    col,
    is_shared,
    register_stacked,
)

# --- families that read their block's offsets: each rank's own, as a [R] column ---------

def _dropout_mask(attrs: dict[str, Any], out_shape: Shape, starts: np.ndarray,
                  batch_offset: int, local: Shape) -> np.ndarray:
    """`elementwise.dropout_mask` of every stacked rank: the same splitmix64 draw of each
    element's global coordinates (the batch dim shifted by the micro-batch's offset)."""
    rows = row_mask(int(attrs.get("seed", 0)), _p(attrs), out_shape, starts, batch_offset,
                    local)
    if rows is not None:
        return rows
    return _keep_of(attrs, out_shape, starts, batch_offset, local) / (1.0 - _p(attrs))


def _p(attrs: dict[str, Any]) -> float:
    return float(attrs.get("p", 0.1))


def _keep_of(attrs: dict[str, Any], out_shape: Shape, starts: np.ndarray, batch_offset: int,
             local: Shape) -> np.ndarray:
    return _keep(int(attrs.get("seed", 0)), _p(attrs), tuple(out_shape),
                 starts.astype(np.int64).tobytes(), len(starts), batch_offset, tuple(local))


@lru_cache(maxsize=16)
def _keep(seed: int, p: float, out_shape: Shape, starts: bytes, ranks: int,
          batch_offset: int, local: Shape) -> np.ndarray:
    """The keep-mask (bool) of every stacked rank, memoised: a pure function of its
    arguments, drawn once for an op's forward and reused by its backward (frameworks keep
    the mask from the forward too: Korthikanti et al. 2022, 4.1)."""
    first = np.frombuffer(starts, dtype=np.int64).reshape(ranks, -1).copy()
    if len(local):
        first[:, 0] += batch_offset
    keep = keep_draws(seed, global_index(out_shape, first, local), p)
    keep.flags.writeable = False
    return keep


def clear_dropout_masks() -> None:
    """Drop the memoised keep-masks (at the end of a verify run)."""
    _keep.cache_clear()
    clear_row_masks()


def _dropped(x: np.ndarray, attrs: dict[str, Any], ctx: StackCtx) -> np.ndarray:
    """x * the scaled keep-mask, as x * keep * (1 / (1 - p)): the same products (the keep
    from the row table where the ranks hold whole rows)."""
    keep = row_keep(int(attrs.get("seed", 0)), _p(attrs), ctx.out_shape, ctx.out_offset,
                    ctx.batch_offset, x.shape[1:])
    if keep is None:
        keep = _keep_of(attrs, ctx.out_shape, ctx.out_offset, ctx.batch_offset, x.shape[1:])
    y = np.multiply(x, keep, dtype=np.result_type(x, np.float64))
    y *= 1.0 / (1.0 - _p(attrs))
    return y


def _drop_forward(xs, attrs, ctx):
    return _dropped(xs[0], attrs, ctx)


def _drop_vjp(xs, y, dy, attrs, ctx):
    return [_dropped(dy, attrs, ctx)]


register_stacked(StackedKernel(_drop_forward, _drop_vjp), "Dropout")


def _future(x: np.ndarray, ctx: StackCtx) -> np.ndarray:
    """Where each rank's key index exceeds its query index (`elementwise._causal`)."""
    starts, nd = ctx.in_offsets[0], x.ndim - 1
    q = np.arange(x.shape[-2])[None, :, None] + starts[:, -2, None, None]
    k = np.arange(x.shape[-1])[None, None, :] + starts[:, -1, None, None]
    return (k > q).reshape((len(x),) + (1,) * (nd - 2) + (x.shape[-2], x.shape[-1]))


register_stacked(StackedKernel(
    lambda xs, attrs, ctx: np.where(_future(xs[0], ctx), -1e9, xs[0]),
    lambda xs, y, dy, attrs, ctx: [np.where(_future(xs[0], ctx), 0.0, dy)]), "CausalMask")


def _rows(ids: np.ndarray, start: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's ids relative to its first table row, and whether they are its rows."""
    local = ids.astype(np.int64) - col(start, ids.ndim - 1)
    inside = (local >= 0) & (local < rows)
    return np.where(inside, local, 0), inside


def _gather_forward(xs, attrs, ctx):
    table, ids = xs
    idx, inside = _rows(ids, ctx.in_offsets[0][:, 0], table.shape[1])
    if is_shared(table):
        picked = table[0][idx]
    else:
        picked = table[col(np.arange(len(table)), ids.ndim - 1), idx]
    return picked * inside[..., None]


def _gather_vjp(xs, y, dy, attrs, ctx):
    table, ids = xs
    idx, inside = _rows(ids, ctx.in_offsets[0][:, 0], table.shape[1])
    rank = np.broadcast_to(col(np.arange(len(table)), ids.ndim - 1), idx.shape)
    grad = np.zeros(table.shape, dtype=table.dtype)
    np.add.at(grad, (rank[inside], idx[inside]), dy[inside])
    return [grad, None]


register_stacked(StackedKernel(_gather_forward, _gather_vjp), "Gather")


def _by_group(a: np.ndarray, m: int) -> np.ndarray:
    """(R, ...) -> (R // m, m, ...): the m consecutive ranks of each group together."""
    return a.reshape((len(a) // m, m) + a.shape[1:])


def _to_ranks(a: np.ndarray, m: int) -> np.ndarray:
    """A value per group (G, ...) given to each of its m ranks: (G * m, ...)."""
    return a if m == 1 else np.repeat(a, m, axis=0)


def _ce_combined(xs: list[np.ndarray], ctx: StackCtx) -> tuple[np.ndarray, ...]:
    """`loss._combined` of every stacked rank: the row max, sum of exponentials and target
    logit over its group's vocabulary shards, and its own shard's exp(z - max), target
    index and whether the target is in its shard."""
    z, labels = xs
    m = ctx.group_size
    local = labels.astype(np.int64) - col(ctx.in_offsets[0][:, -1], labels.ndim - 1)
    inside = (local >= 0) & (local < z.shape[-1])
    idx = np.where(inside, local, 0)
    picked = np.take_along_axis(z, idx[..., None], axis=-1)[..., 0] * inside
    zmax = _to_ranks(_by_group(z.max(axis=-1), m).max(axis=1), m)
    exps = np.exp(z - zmax[..., None])
    sumexp = _to_ranks(_by_group(exps.sum(axis=-1), m).sum(axis=1), m)
    target = _to_ranks(_by_group(picked, m).sum(axis=1), m)
    return zmax, sumexp, target, exps, idx, inside


def _ce_forward(xs, attrs, ctx):
    zmax, sumexp, target, *_ = _ce_combined(xs, ctx)
    return np.log(sumexp) + zmax - target


def _ce_vjp(xs, y, dy, attrs, ctx):
    _, sumexp, _, exps, idx, inside = _ce_combined(xs, ctx)
    g = exps / sumexp[..., None]
    hit = np.take_along_axis(g, idx[..., None], -1) - inside[..., None]
    np.put_along_axis(g, idx[..., None], hit, -1)
    return [g * dy[..., None], None]


register_stacked(StackedKernel(_ce_forward, _ce_vjp), "SoftmaxCrossEntropy")


# --- FusedAttention: `attention._probs` with a rank label and each rank's dropout offsets -

def _attn_probs(q: np.ndarray, k: np.ndarray, attrs: dict[str, Any], ctx: StackCtx,
                sinks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """(softmax probabilities [R, b, g, r, s, t], scaled keep-mask, scale) of every rank
    (its window and its sink logits [R, g, r] as `attention._probs`)."""
    scale = float(attrs.get("scale", 1.0 / math.sqrt(q.shape[-1])))
    z = contract("nbsgrd,nbtgd->nbgrst", q, k) * scale
    sq, tk = z.shape[-2], z.shape[-1]
    z = np.where(masked(np.arange(sq)[:, None], np.arange(tk)[None, :], attrs), -1e9, z)
    probs = sink_softmax(z, None if sinks is None else sinks[:, None, :, :, None, None])
    (b, s, g, r, _), t = ctx.in_shapes[0], ctx.in_shapes[1][1]
    starts = np.zeros((len(q), 5), dtype=np.int64)  # (b, g, r) offsets; s, t are whole
    starts[:, :3] = ctx.in_offsets[0][:, [0, 2, 3]]
    keep = _dropout_mask(attrs, (b, g, r, s, t), starts, ctx.batch_offset, probs.shape[1:])
    return probs, keep, scale


def _attn_forward(xs, attrs, ctx):
    q, k, v = xs[:3]
    probs, keep, _ = _attn_probs(q, k, attrs, ctx, xs[3] if len(xs) == 4 else None)
    return contract("nbgrst,nbtgd->nbsgrd", probs * keep, v)


def _attn_vjp(xs, y, dy, attrs, ctx):
    q, k, v = xs[:3]
    probs, keep, scale = _attn_probs(q, k, attrs, ctx, xs[3] if len(xs) == 4 else None)
    dv = contract("nbgrst,nbsgrd->nbtgd", probs * keep, dy)
    dp = contract("nbsgrd,nbtgd->nbgrst", dy, v) * keep
    ds = probs * (dp - (dp * probs).sum(axis=-1, keepdims=True)) * scale
    dq = contract("nbgrst,nbtgd->nbsgrd", ds, k)
    dk = contract("nbgrst,nbsgrd->nbtgd", ds, q)
    return [dq, dk, dv] + ([sink_grad(probs, dp, (1, 4))] if len(xs) == 4 else [])


register_stacked(StackedKernel(_attn_forward, _attn_vjp), "FusedAttention")
