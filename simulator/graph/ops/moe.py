"""Mixture-of-experts routing: top-k gating with expert capacity, dispatch of tokens to expert
slots, and the weighted combine of the expert outputs (GShard, Lepikhin et al. 2021, Sec. 2.2
and Algorithm 1; Switch Transformer, Fedus et al. 2022, Sec. 2.1-2.2).

Tokens are routed in groups of one sample each (GShard's groups, Sec. 3.2: capacity is
counted per group, so the routing of a sample does not depend on which other samples share
its device or micro-batch). Each expert has `capacity` slots per group,
C = ceil(top_k * capacity_factor * seq / experts) (Switch Sec. 2.2 eq. 3 with Megatron-Core's
top-k scaling, `get_capacity(num_tokens * topk, ...)` in megatron/core/transformer/moe/
moe_utils.py); a token's j-th choice takes the next free slot of its expert, all first
choices before any second (GShard Algorithm 1, DeepSpeed `top2gating`), and a token that
finds its expert full is dropped there (its combine weight is 0: it passes through the
residual, Switch Sec. 2.2).

Routing is kept compact, as real dispatchers do (Megatron-Core's token permutation), not as
GShard's dense [S, E, C] one-hot tensors, whose size grows with seq^2:

    MoeRoute        logits [b, s, E]          -> route [b, s, k, 2]  (expert id, slot or -1)
    MoeGateWeights  logits, route             -> weights [b, s, k]
    MoeDispatch     route, x [b, s, h]        -> slots [b, E, C, h]
    MoeCombine      route, weights, y [b,E,C,h] -> [b, s, h]

Gate weights: the softmax probability of the chosen expert for top-1 (Switch eq. 2), the
probabilities of the k chosen experts renormalised to sum to 1 for k >= 2 (GShard
Algorithm 1 line 7; Mixtral's softmax over the top-k logits). The route carries no gradient.
Attributes change that: `score: sigmoid` takes each expert's sigmoid in place of the
softmax (DeepSeek-V3, arXiv:2412.19437, Sec. 2.1.2 eqs. 13-15: s = sigmoid(u e_i), the
chosen scores divided by their sum; Megatron-Core --moe-router-score-function sigmoid),
`normalize` says whether the chosen scores are renormalised (default: when k >= 2; Hugging
Face's norm_topk_prob) and `scale` multiplies the weights (DeepSeek-V3's
routed_scaling_factor; Megatron-Core --moe-router-topk-scaling-factor). Both score
functions are monotone, so the route (the top-k logits) is the same either way; DeepSeek-
V3's load-balancing bias, which shifts only the choice (eq. 16), is not modelled.

Sharding: the routing ops split only the batch (a group is one sample); dispatch splits any
output dim (a device fills only its own experts' or slots' block) and sums over tokens
(splitting them leaves a Partial result); combine sums over experts and slots the same way.
So a dispatch split on the batch followed by expert GEMMs split on the expert dim is
S(batch) -> S(expert): the all-to-all of GShard's dispatch and combine (Sec. 3.2) falls out
of the redistribution planner.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register

__all__ = ["route_tokens", "gate_weights", "expert_capacity"]


def expert_capacity(experts: int, top_k: int, capacity_factor: float, tokens: int) -> int:
    """Slots per expert for a group of `tokens`: ceil(top_k * capacity_factor * tokens /
    experts) (Switch Sec. 2.2 eq. 3; Megatron-Core moe_utils.get_capacity), at least 1."""
    return max(1, math.ceil(top_k * capacity_factor * tokens / experts))


def _top_k(attrs: dict[str, Any]) -> int:
    return int(attrs.get("top_k", 1))


def _group_limited(logits: np.ndarray, score: str, groups: int, top_groups: int
                   ) -> np.ndarray:
    """The logits with the experts outside each token's `top_groups` best groups at -inf:
    DeepSeek-V3's group-limited (node-limited) routing (arXiv:2412.19437 Sec. 2.1.2; its
    config n_group, topk_group; transformers' DeepseekV3TopkRouter: a group's score is the
    sum of its two highest expert scores; Megatron-Core --moe-router-num-groups,
    --moe-router-group-topk)."""
    b, s, experts = logits.shape
    if score == "sigmoid":
        scores = 0.5 * (1.0 + np.tanh(0.5 * logits))
    else:
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = z / z.sum(axis=-1, keepdims=True)
    per = experts // groups
    best = np.sort(scores.reshape(b, s, groups, per), axis=-1)[..., -2:].sum(axis=-1)
    keep = np.argsort(-best, axis=-1, kind="stable")[..., :top_groups]
    mask = np.zeros((b, s, groups), dtype=bool)
    np.put_along_axis(mask, keep, True, axis=-1)
    return np.where(np.repeat(mask, per, axis=-1), logits, -np.inf)


def route_tokens(logits: np.ndarray, top_k: int, capacity: int, score: str = "softmax",
                 groups: int = 1, top_groups: int = 1) -> np.ndarray:
    """[b, s, k, 2]: each token's k chosen experts (highest logits first; ties to the lower
    index; with `groups` > 1 among the experts of its `top_groups` best groups) and its slot
    there, -1 where the expert's `capacity` slots are already taken by the sample's earlier
    tokens or earlier choices."""
    b, s, experts = logits.shape
    choice = logits if groups <= 1 else _group_limited(logits, score, groups, top_groups)
    order = np.argsort(-choice, axis=-1, kind="stable")[..., :top_k]
    route = np.empty((b, s, top_k, 2), dtype=logits.dtype)
    route[..., 0] = order
    taken = np.zeros((b, 1, experts), dtype=np.int64)
    for j in range(top_k):
        onehot = order[..., j][..., None] == np.arange(experts)  # [b, s, E]
        slots = np.cumsum(onehot, axis=1) - 1 + taken
        slot = np.take_along_axis(slots, order[..., j:j + 1], axis=-1)[..., 0]
        route[..., j, 1] = np.where(slot < capacity, slot, -1)
        taken = taken + onehot.sum(axis=1, keepdims=True)
    return route


def _sample_route(b: int, s: int, k: int, experts: int, capacity: int,
                  rng: np.random.Generator) -> np.ndarray:
    """A valid route of random logits (for rule checks)."""
    return route_tokens(rng.standard_normal((b, s, experts)), k, capacity)


def _sampler(route_input: int, experts_of, capacity_of):
    """OpFamily.sample: a valid route at input `route_input`, every other input drawn."""
    def sample(shapes: list[Shape], attrs: dict[str, Any], rng: np.random.Generator
               ) -> list[np.ndarray | None]:
        b, s, k, _ = shapes[route_input]
        out: list[np.ndarray | None] = [None] * len(shapes)
        out[route_input] = _sample_route(b, s, k, experts_of(shapes, attrs),
                                         capacity_of(shapes, attrs), rng)
        return out
    return sample


def _route_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    if len(shapes[0]) != 3:
        raise OpError(f"MoeRoute takes logits [batch, seq, experts], got {list(shapes[0])}")
    if not 1 <= _top_k(attrs) <= shapes[0][2]:
        raise OpError(f"MoeRoute top_k={_top_k(attrs)} must be in 1..{shapes[0][2]} experts")
    groups, top = int(attrs.get("groups", 1)), int(attrs.get("top_groups", 1))
    if groups > 1 and (shapes[0][2] % groups or not 1 <= top <= groups
                       or top * (shapes[0][2] // groups) < _top_k(attrs)):
        raise OpError(f"MoeRoute groups={groups} top_groups={top} must split "
                      f"{shapes[0][2]} experts evenly and leave top_k={_top_k(attrs)} of them")
    return (shapes[0][0], shapes[0][1], _top_k(attrs), 2)


def _route_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    # slots are counted along the whole sample, over all experts: only the batch splits
    return LabelView((("b", "s", "e"),), ("b", "s", "k", "t"),
                     fixed=frozenset({"s", "e", "k", "t"}))


register(OpFamily(
    "MoeRoute", (1, 1), _route_infer, _route_labels,
    lambda xs, a, c: route_tokens(xs[0], _top_k(a), int(a["capacity"]),
                                  str(a.get("score", "softmax")), int(a.get("groups", 1)),
                                  int(a.get("top_groups", 1))),
    lambda xs, y, dy, a, c: [np.zeros_like(xs[0])],
    lambda s, o, a: 6.0 * math.prod(s[0]), kind="softmax", differentiable=(False,),
    saves=()))


def _normalized(attrs: dict[str, Any], k: int) -> bool:
    return bool(attrs.get("normalize", k > 1))


def _probs(logits: np.ndarray, route: np.ndarray, attrs: dict[str, Any]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q [b, s, E], chosen [b, s, k], s [b, s, E]): s the scores (softmax over the experts,
    or each one's sigmoid), q the weights a chosen expert takes at its index: s, or with
    `normalize` s restricted to the chosen experts and renormalised (a softmax over the
    chosen logits)."""
    chosen = route[..., 0].astype(np.int64)
    if attrs.get("score", "softmax") == "sigmoid":
        z = 0.5 * (1.0 + np.tanh(0.5 * logits))  # sigmoid, without exp overflow
        scores = z
    else:
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = z / z.sum(axis=-1, keepdims=True)
    if not _normalized(attrs, chosen.shape[-1]):
        return scores, chosen, scores
    mask = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(mask, chosen, True, axis=-1)
    z = np.where(mask, z, 0.0)
    return z / z.sum(axis=-1, keepdims=True), chosen, scores


def gate_weights(logits: np.ndarray, route: np.ndarray,
                 attrs: dict[str, Any] | None = None) -> np.ndarray:
    """[b, s, k]: each choice's combine weight, 0 where the token was dropped."""
    attrs = attrs or {}
    q, chosen, _ = _probs(logits, route, attrs)
    kept = route[..., 1] >= 0
    return np.take_along_axis(q, chosen, axis=-1) * kept * float(attrs.get("scale", 1.0))


def _gate_vjp(xs, y, dy, attrs, ctx):
    """dL/dlogits from G, the weight gradients (times the scale) scattered to their experts:
    q * (G - <q, G>) for softmax scores (the softmax Jacobian; over the chosen experts when
    normalised); for sigmoid scores s(1 - s) times G, or normalised (q = s / S over the
    chosen) s(1 - s) (G - <q, G>) / S."""
    logits, route = xs
    q, chosen, s = _probs(logits, route, attrs)
    g = np.zeros_like(logits)
    scale = float(attrs.get("scale", 1.0))
    np.put_along_axis(g, chosen, scale * dy * (route[..., 1] >= 0), axis=-1)
    if attrs.get("score", "softmax") != "sigmoid":
        return [q * (g - (q * g).sum(axis=-1, keepdims=True)), None]
    if not _normalized(attrs, chosen.shape[-1]):
        return [s * (1.0 - s) * g, None]
    total = np.take_along_axis(s, chosen, axis=-1).sum(axis=-1, keepdims=True)
    dq = (g - (q * g).sum(axis=-1, keepdims=True)) / total * (q > 0)  # the chosen only
    return [s * (1.0 - s) * dq, None]


def _gate_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    logits, route = shapes
    if len(logits) != 3 or tuple(route[:2]) != tuple(logits[:2]) or len(route) != 4:
        raise OpError(f"MoeGateWeights takes logits [b, s, E] and a route [b, s, k, 2], got "
                      f"{list(logits)} and {list(route)}")
    return tuple(route[:3])


register(OpFamily(
    "MoeGateWeights", (2, 2), _gate_infer,
    lambda s, a: LabelView((("b", "s", "e"), ("b", "s", "k", "t")), ("b", "s", "k"),
                           fixed=frozenset({"e", "k", "t"})),
    lambda xs, a, c: gate_weights(xs[0], xs[1], a), _gate_vjp,
    lambda s, o, a: 5.0 * math.prod(s[0]), kind="softmax", differentiable=(True, False),
    sample=_sampler(1, lambda s, a: s[0][2], lambda s, a: max(1, s[1][1] // 2))))


def _kept(route: np.ndarray, e0: int, experts: int, c0: int, slots: int):
    """(batch, token, choice, local expert, local slot) of the routed choices that land in
    this device's block of experts [e0, e0 + experts) and slots [c0, c0 + slots)."""
    e = route[..., 0].astype(np.int64) - e0
    c = route[..., 1].astype(np.int64) - c0
    ok = (route[..., 1] >= 0) & (e >= 0) & (e < experts) & (c >= 0) & (c < slots)
    bi, si, ki = np.nonzero(ok)
    return bi, si, ki, e[ok], c[ok]


def _dispatch(xs, attrs, ctx):
    route, x = xs
    out = np.zeros(ctx.out_local_shape, dtype=x.dtype)
    bi, si, _, e, c = _kept(route, ctx.out_offset[1], out.shape[1], ctx.out_offset[2],
                            out.shape[2])
    out[bi, e, c, :] = x[bi, si, :]  # one token per slot
    return out


def _dispatch_vjp(xs, y, dy, attrs, ctx):
    route, x = xs
    dx = np.zeros_like(x)
    bi, si, _, e, c = _kept(route, ctx.out_offset[1], dy.shape[1], ctx.out_offset[2],
                            dy.shape[2])
    np.add.at(dx, (bi, si), dy[bi, e, c, :])  # a token sent to k experts sums k gradients
    return [None, dx]


def _dispatch_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    route, x = shapes
    if len(route) != 4 or len(x) != 3 or tuple(route[:2]) != tuple(x[:2]):
        raise OpError(f"MoeDispatch takes a route [b, s, k, 2] and tokens [b, s, h], got "
                      f"{list(route)} and {list(x)}")
    return (x[0], int(attrs["experts"]), int(attrs["capacity"]), x[2])


register(OpFamily(
    "MoeDispatch", (2, 2), _dispatch_infer,
    lambda s, a: LabelView((("b", "s", "k", "t"), ("b", "s", "h")), ("b", "e", "c", "h"),
                           fixed=frozenset({"t"}), reducible=frozenset({"s", "k"}),
                           linear_inputs=frozenset({1})),
    _dispatch, _dispatch_vjp, lambda s, o, a: 0.0, kind="copy",
    differentiable=(False, True), saves=(0,),
    sample=_sampler(0, lambda s, a: int(a["experts"]), lambda s, a: int(a["capacity"]))))


def _combine_block(route: np.ndarray, y: np.ndarray, ctx):
    return _kept(route, ctx.in_offsets[2][1], y.shape[1], ctx.in_offsets[2][2], y.shape[2])


def _combine(xs, attrs, ctx):
    route, w, y = xs
    out = np.zeros(route.shape[:2] + (y.shape[3],), dtype=y.dtype)
    bi, si, ki, e, c = _combine_block(route, y, ctx)
    np.add.at(out, (bi, si), w[bi, si, ki, None] * y[bi, e, c, :])
    return out


def _combine_vjp(xs, out, dout, attrs, ctx):
    route, w, y = xs
    dw, dy = np.zeros_like(w), np.zeros_like(y)
    bi, si, ki, e, c = _combine_block(route, y, ctx)
    dw[bi, si, ki] = np.einsum("nh,nh->n", dout[bi, si, :], y[bi, e, c, :])
    dy[bi, e, c, :] = w[bi, si, ki, None] * dout[bi, si, :]  # one token per slot
    return [None, dw, dy]


def _combine_infer(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    route, w, y = shapes
    if len(route) != 4 or tuple(w) != tuple(route[:3]) or len(y) != 4 or y[0] != route[0]:
        raise OpError(f"MoeCombine takes a route [b, s, k, 2], weights [b, s, k] and expert "
                      f"outputs [b, E, C, h], got {list(route)}, {list(w)} and {list(y)}")
    return (route[0], route[1], y[3])


register(OpFamily(
    "MoeCombine", (3, 3), _combine_infer,
    lambda s, a: LabelView((("b", "s", "k", "t"), ("b", "s", "k"), ("b", "e", "c", "h")),
                           ("b", "s", "h"), fixed=frozenset({"t"}),
                           reducible=frozenset({"e", "c", "k"}),
                           linear_inputs=frozenset({1, 2})),
    _combine, _combine_vjp, lambda s, o, a: 2.0 * math.prod(s[1]) * o[-1],
    kind="elementwise", differentiable=(False, True, True),
    sample=_sampler(0, lambda s, a: s[2][1], lambda s, a: s[2][2])))
