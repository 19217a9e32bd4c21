"""The operators of a Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs: Generalized Models
and Efficient Algorithms Through Structured State Space Duality", arXiv:2405.21060; the block
is `graph.mamba`), in the grouped layout of `graph.builders`' attention: H = g * r heads of
head dim p in g groups, each group sharing one B and one C of state size n (Mamba-2's
`ngroups`, Sec. 7.2), so that heads split by splitting g as Megatron-Core's MambaMixer does
(megatron/core/ssm/mamba_mixer.py: `nheads` and `ngroups` divided by the tensor-parallel
size, in_proj column-parallel, out_proj row-parallel).

- `SsdScan`: the selective state-space scan with a scalar decay per head (SSD, Sec. 3-6),
  dt's softplus with its bias and the D skip fused in, as mamba_ssm's
  `mamba_chunk_scan_combined(x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True)`:
      dt_t = softplus(dt_raw_t + dt_bias), A = -exp(A_log),
      h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,   y_t = h_t C_t + D x_t   (per head)
  The numpy reference computes the SSD's quadratic (attention-like) form, Sec. 5 eq. (16):
  y = (L o C B^T) (dt x) + D x, L[t, s] = exp(sum_{s<k<=t} dt_k A) for s <= t, and its
  exact VJP; tests check it against the recurrence above step by step.
  Inputs x [b,s,g,r,p], dt [b,s,g,r], A_log [g,r], B [b,s,g,n], C [b,s,g,n], D [g,r],
  dt_bias [g,r] -> y [b,s,g,r,p]. Batch and groups split; the sequence, heads in a group,
  head dim and state stay whole (the scan runs over the whole sequence).
  FLOPs: the chunked SSD algorithm of Sec. 6 with chunk length Q (attr `chunk`, Megatron-
  Core's and Nemotron-H's 128): per group the intra-chunk C B^T (s Q n multiply-adds), per
  head the intra-chunk output (s Q p), the chunk states B^T x (s n p), the state-to-output
  C h (s n p) and the state passing between chunks ((s/Q) n p). Priced as one fused tensor-
  core kernel (kind `attention`: its blocks are GEMMs of chunk size, as FlashAttention's
  are); the backward twice the forward.
- `CausalConv1d`: the depthwise causal convolution over the sequence of x, B and C (kernel
  k, Mamba-2's d_conv = 4) with its bias: y_t = bias + sum_j w[j] x_{t-k+1+j}, as
  torch's conv1d with k-1 padding cut to the first s outputs (causal_conv1d_fn). Inputs x
  [b, s, *c], w [*c, k], bias [*c]; channels and batch split, sequence and taps whole.
- `GatedRMSNorm`: Mamba-2's output norm, RMSNorm of y * silu(z) over each group's r*p
  channels (mamba_ssm RMSNormGated with norm_before_gate=False and group_size =
  d_inner / ngroups, which is what keeps it local under tensor parallelism) times a
  weight. Inputs y, z [b,s,g,r,p], w [g,r,p]; batch, sequence and groups split.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.graph.ops.base import LabelView, OpError, OpFamily, Shape, register

__all__ = ["ssd_flops", "ssd_reference", "DEFAULT_CHUNK"]

DEFAULT_CHUNK = 128  # Megatron-Core MambaMixer chunk_size; Nemotron-H config.json chunk_size

_X = ("b", "s", "g", "r", "p")
_DT = ("b", "s", "g", "r")
_BC = ("b", "s", "g", "n")
_HEAD = ("g", "r")


def _scan_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, dt, a, bm, cm, d, bias = (tuple(s) for s in shapes)
    b, s, g, r, _ = x if len(x) == 5 else (0,) * 5
    n = bm[-1] if len(bm) == 4 else 0
    if (len(x) != 5 or dt != (b, s, g, r) or a != (g, r) or d != (g, r) or bias != (g, r)
            or bm != (b, s, g, n) or cm != bm):
        raise OpError("SsdScan takes x [b,s,g,r,p], dt [b,s,g,r], A_log [g,r], B and C "
                      f"[b,s,g,n], D [g,r], dt_bias [g,r]; got {[list(s) for s in shapes]}")
    return x


def _scan_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    return LabelView((_X, _DT, _HEAD, _BC, _BC, _HEAD, _HEAD), _X,
                     fixed=frozenset({"s", "r", "p", "n"}))


def _softplus(z: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, z)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _decay(dt: np.ndarray, a: np.ndarray) -> np.ndarray:
    """L [b, t, s, g, r]: exp of the summed log-decays dt_k A over s < k <= t, 0 above the
    diagonal (t < s)."""
    c = np.cumsum(dt * a, axis=1)
    seg = c[:, :, None] - c[:, None, :]
    steps = dt.shape[1]
    lower = (np.arange(steps)[:, None] >= np.arange(steps)[None, :])[None, :, :, None, None]
    return np.where(lower, np.exp(np.where(lower, seg, 0.0)), 0.0)


def _scan_parts(xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    x, dt_raw, a_log, bm, cm, _, bias = xs
    zdt = dt_raw + bias
    dt = _softplus(zdt)
    a = -np.exp(a_log)
    lmat = _decay(dt, a)
    gram = np.einsum("btgn,bsgn->btsg", cm, bm)
    return {"zdt": zdt, "dt": dt, "a": a, "L": lmat, "G": gram,
            "M": lmat * gram[..., None], "u": dt[..., None] * x}


def _scan(xs, attrs, ctx):
    parts = _scan_parts(xs)
    y = np.einsum("btsgr,bsgrp->btgrp", parts["M"], parts["u"])
    return y + xs[5][..., None] * xs[0]


def _scan_vjp(xs, y, dy, attrs, ctx):
    x, _, _, bm, cm, d, _ = xs
    q = _scan_parts(xs)
    dt, a, lmat = q["dt"], q["a"], q["L"]
    dm = np.einsum("btgrp,bsgrp->btsgr", dy, q["u"])
    du = np.einsum("btsgr,btgrp->bsgrp", q["M"], dy)
    dx = du * dt[..., None] + d[..., None] * dy
    ddt = np.einsum("bsgrp,bsgrp->bsgr", du, x)
    dgram = np.einsum("btsgr,btsgr->btsg", dm, lmat)
    dc_mat = np.einsum("btsg,bsgn->btgn", dgram, bm)
    db_mat = np.einsum("btsg,btgn->bsgn", dgram, cm)
    dseg = dm * q["G"][..., None] * lmat  # through L = exp(c_t - c_s)
    dcum = dseg.sum(axis=2) - dseg.sum(axis=1)
    dlog = np.flip(np.cumsum(np.flip(dcum, axis=1), axis=1), axis=1)  # c = cumsum(dt A)
    ddt = ddt + dlog * a
    da_log = (dlog * dt).sum(axis=(0, 1)) * a  # dA/dA_log = A
    dz = ddt * _sigmoid(q["zdt"])
    dd = np.einsum("btgrp,btgrp->gr", dy, x)
    return [dx, dz, da_log, db_mat, dc_mat, dd, dz.sum(axis=(0, 1))]


def ssd_flops(batch: int, seq: int, groups: int, heads: int, head_dim: int, state: int,
              chunk: int = DEFAULT_CHUNK) -> float:
    """Forward FLOPs of the chunked SSD algorithm (Dao & Gu 2024, Sec. 6: the diagonal
    blocks C B^T per group and their product with x per head, the chunk states, the
    state passing and the state-to-output term), multiply-adds counted as 2."""
    q = min(chunk, seq)
    per_group = seq * q * state
    per_head = seq * (q * head_dim + 2 * state * head_dim) + (seq / q) * state * head_dim
    return 2.0 * batch * (groups * per_group + heads * per_head)


def _scan_flops(shapes: list[Shape], out: Shape, attrs: dict[str, Any]) -> float:
    b, s, g, r, p = shapes[0]
    return ssd_flops(b, s, g, g * r, p, shapes[3][-1], int(attrs.get("chunk", DEFAULT_CHUNK)))


def _scan_cost(ins: list[Shape], out: Shape, attrs: dict[str, Any], e: float, phase: str
               ) -> tuple[float, float, float]:
    flops = _scan_flops(ins, out, attrs)
    io = e * float(sum(math.prod(s) for s in ins) + math.prod(out))
    return (flops, io, 1.0) if phase == "fwd" else (2.0 * flops, 2.0 * io, 1.0)


def ssd_reference(xs: list[np.ndarray]) -> np.ndarray:
    """The recurrence step by step (h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t
    + D x_t), the ground truth `SsdScan`'s quadratic form is tested against."""
    x, dt_raw, a_log, bm, cm, d, bias = xs
    dt = _softplus(dt_raw + bias)
    a = -np.exp(a_log)
    b, s, g, r, p = x.shape
    h = np.zeros((b, g, r, p, bm.shape[-1]))
    y = np.empty_like(x)
    for t in range(s):
        decay = np.exp(dt[:, t] * a)[..., None, None]
        h = decay * h + np.einsum("bgr,bgrp,bgn->bgrpn", dt[:, t], x[:, t], bm[:, t])
        y[:, t] = np.einsum("bgrpn,bgn->bgrp", h, cm[:, t]) + d[..., None] * x[:, t]
    return y


register(OpFamily("SsdScan", (7, 7), _scan_shape, _scan_labels, _scan, _scan_vjp, _scan_flops,
                  kind="attention", cost=_scan_cost, attrs=("chunk",)), "SelectiveScan")


def _conv_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    x, w = tuple(shapes[0]), tuple(shapes[1])
    chans = x[2:]
    if len(x) < 3 or w[:-1] != chans or (len(shapes) == 3 and tuple(shapes[2]) != chans):
        raise OpError(f"CausalConv1d takes x [b, s, *c], w [*c, k] and a bias [*c]; got "
                      f"{[list(s) for s in shapes]}")
    return x


def _conv_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    chans = tuple(f"c{i}" for i in range(len(shapes[0]) - 2))
    ins = (("b", "s", *chans), (*chans, "k")) + ((chans,) if len(shapes) == 3 else ())
    return LabelView(ins, ("b", "s", *chans), fixed=frozenset({"s", "k"}))


def _flat(xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """x as [b, s + k - 1, C] zero-padded on the left, w as [C, k]."""
    x, w = xs[0], xs[1]
    k = w.shape[-1]
    x3 = x.reshape(x.shape[0], x.shape[1], -1)
    return np.pad(x3, ((0, 0), (k - 1, 0), (0, 0))), w.reshape(-1, k)


def _conv(xs, attrs, ctx):
    xp, w = _flat(xs)
    s, k = xs[0].shape[1], w.shape[1]
    y = sum(w[:, j] * xp[:, j:j + s] for j in range(k))
    y = np.asarray(y).reshape(xs[0].shape)
    return y + xs[2] if len(xs) == 3 else y


def _conv_vjp(xs, y, dy, attrs, ctx):
    xp, w = _flat(xs)
    s, k = xs[0].shape[1], w.shape[1]
    d3 = dy.reshape(dy.shape[0], s, -1)
    dxp = np.zeros_like(xp)
    dw = np.empty_like(w)
    for j in range(k):
        dxp[:, j:j + s] += w[:, j] * d3
        dw[:, j] = np.einsum("bsc,bsc->c", d3, xp[:, j:j + s])
    grads = [dxp[:, k - 1:].reshape(xs[0].shape), dw.reshape(xs[1].shape)]
    if len(xs) == 3:
        grads.append(dy.sum(axis=(0, 1)))
    return grads


register(OpFamily("CausalConv1d", (2, 3), _conv_shape, _conv_labels, _conv, _conv_vjp,
                  lambda s, o, a: 2.0 * math.prod(o) * s[1][-1], kind="elementwise",
                  saves=(0, 1)))


def _norm_shape(shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    y, z, w = (tuple(s) for s in shapes)
    if len(y) != 5 or z != y or w != y[2:]:
        raise OpError(f"GatedRMSNorm takes y and z [b,s,g,r,p] and w [g,r,p]; got "
                      f"{[list(s) for s in shapes]}")
    return y


def _norm_labels(shapes: list[Shape], attrs: dict[str, Any]) -> LabelView:
    return LabelView((_X, _X, ("g", "r", "p")), _X, fixed=frozenset({"r", "p"}))


def _norm_parts(xs, attrs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gate silu(z), gated u = y silu(z), 1 / rms of u over each group's r*p channels)."""
    y, z = xs[0], xs[1]
    gate = z * _sigmoid(z)
    u = y * gate
    eps = float(attrs.get("eps", 1e-5))
    rstd = 1.0 / np.sqrt((u * u).mean(axis=(-2, -1), keepdims=True) + eps)
    return gate, u, rstd


def _norm(xs, attrs, ctx):
    _, u, rstd = _norm_parts(xs, attrs)
    return u * rstd * xs[2]


def _norm_vjp(xs, out, dout, attrs, ctx):
    y, z, w = xs
    gate, u, rstd = _norm_parts(xs, attrs)
    n = u * rstd
    dn = dout * w
    du = rstd * (dn - n * (dn * n).mean(axis=(-2, -1), keepdims=True))
    sig = _sigmoid(z)
    dz = du * y * sig * (1.0 + z * (1.0 - sig))
    return [du * gate, dz, (dout * n).sum(axis=(0, 1))]


register(OpFamily("GatedRMSNorm", (3, 3), _norm_shape, _norm_labels, _norm, _norm_vjp,
                  lambda s, o, a: 10.0 * math.prod(o), kind="norm", saves=(0, 1, 2),
                  attrs=("eps",)))
