"""SoftmaxCrossEntropy: logits [..., C] and integer labels [...] -> per-sample loss [...].

Every leading dim may be split. The class dim may be split too (`internal` label): that is
Megatron-LM's vocabulary-parallel cross-entropy (megatron/core/tensor_parallel/
cross_entropy.py), in which each shard holds a slice of the vocabulary and three all-reduces
over the shards combine the row maximum, the sum of exponentials and the target logit; every
shard then holds the whole loss, and its gradient (softmax - one-hot) stays sharded.

Kernel cost (Megatron's fp32 passes over the logits, one by one): forward casts to fp32
(read e, write 4), takes the max (read 4), subtracts it (4 + 4), exponentiates (4 + 4),
sums (4) and divides into the softmax kept for the backward (4 + 4): e + 36 bytes and about
5 FLOPs per logit; the backward scales the saved softmax by the incoming gradient (4 + 4)
and casts for the LM head's GEMM (4 + e).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import GroupKernel, LabelView, OpError, OpFamily, Shape, register

_STAT_BYTES = 4.0  # the max, sum-exp and target logit are fp32, one per row
CE_FWD_FLOPS = 5.0  # FLOPs per logit of the forward (max, subtract, exp, sum, divide)
CE_BWD_FLOPS = 2.0  # FLOPs per logit of the backward (scale, subtract the one-hot)


def _infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    logits, labels = shapes
    if tuple(logits[:-1]) != tuple(labels):
        raise OpError(f"labels shape {list(labels)} must equal logits shape without the "
                      f"class dim {list(logits[:-1])}")
    return tuple(labels)


def _labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    lead = tuple(f"d{i}" for i in range(len(shapes[1])))
    return LabelView((lead + ("c",), lead), lead, internal=frozenset({"c"}))


def _stats(z: np.ndarray, labels: np.ndarray, start: int) -> tuple[np.ndarray, ...]:
    """Local (max, target logit or 0 when the target is in another shard, local index,
    whether it is local) of a vocabulary shard starting at class `start`."""
    local = labels.astype(np.int64) - start
    inside = (local >= 0) & (local < z.shape[-1])
    idx = np.where(inside, local, 0)
    if z.shape[-1] == 0:  # an empty shard (torch.chunk of fewer classes than shards)
        return np.full(z.shape[:-1], -np.inf, z.dtype), np.zeros(z.shape[:-1], z.dtype), \
            idx, inside
    picked = np.take_along_axis(z, idx[..., None], axis=-1)[..., 0] * inside
    return z.max(axis=-1), picked, idx, inside


def _forward(xs, attrs, ctx):
    return _group_forward([xs], attrs, [ctx], [[0]])[0]


def _vjp(xs, y, dy, attrs, ctx):
    return _group_vjp([xs], [y], [dy], attrs, [ctx], [[0]])[0]


def _combined(xs_by_rank, ctxs, groups):
    """Per rank: the row max, sum of exponentials and target logit over its group's shards,
    and its own shard's (exp(z - max), target index, inside) for the gradient."""
    local = [_stats(xs[0], xs[1], ctx.in_offsets[0][-1]) for xs, ctx in zip(xs_by_rank, ctxs)]
    out: list[Any] = [None] * len(xs_by_rank)
    for group in groups:
        zmax = np.max([local[r][0] for r in group], axis=0)
        exps = {r: np.exp(xs_by_rank[r][0] - zmax[..., None]) for r in group}
        sumexp = np.sum([exps[r].sum(axis=-1) for r in group], axis=0)
        target = np.sum([local[r][1] for r in group], axis=0)
        for r in group:
            out[r] = (zmax, sumexp, target, exps[r], local[r][2], local[r][3])
    return out


def _group_forward(xs_by_rank, attrs, ctxs, groups):
    return [np.log(s) + m - t for m, s, t, *_ in _combined(xs_by_rank, ctxs, groups)]


def _group_vjp(xs_by_rank, ys, dys, attrs, ctxs, groups):
    out = []
    for (_, s, _, e, idx, inside), dy in zip(_combined(xs_by_rank, ctxs, groups), dys):
        g = e / s[..., None]
        if g.shape[-1]:  # an empty shard has no target to subtract
            hit = np.take_along_axis(g, idx[..., None], -1) - inside[..., None]
            np.put_along_axis(g, idx[..., None], hit, -1)
        out.append([g * dy[..., None], None])
    return out


def _comm(out_local: Shape) -> tuple[tuple[str, float], ...]:
    rows = float(math.prod(out_local)) * _STAT_BYTES
    return (("all_reduce", rows), ("all_reduce", rows), ("all_reduce", rows))


def _cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
          ) -> tuple[float, float, float]:
    logits = float(math.prod(ins[0]))
    if phase == "fwd":
        return CE_FWD_FLOPS * logits, (e + 36.0) * logits, 1.0
    return CE_BWD_FLOPS * logits, (12.0 + e) * logits, 1.0


register(OpFamily("SoftmaxCrossEntropy", (2, 2), _infer, _labels, _forward, _vjp,
                  lambda s, o, a: CE_FWD_FLOPS * math.prod(s[0]), kind="softmax",
                  differentiable=(True, False), saves=(),
                  saved_extra=lambda ins, out: _STAT_BYTES * math.prod(ins[0]),
                  cost=_cost, group=GroupKernel(_group_forward, _group_vjp, _comm)),
         "CrossEntropy")
