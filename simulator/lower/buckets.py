"""Gradient buckets (communication fusion) for the data-parallel reduction.

Gradients become ready piece by piece as the backward runs (LM head, the layers from last to
first, the embedding). Fusion packs them, in that order, into buckets that are reduced as
soon as they are full (PyTorch DDP and Megatron-LM `bucket_size`; MindSpore
`comm_fusion`): a bucket is ready when the piece holding its last gradient has finished.

Modes: 'size' and 'auto' cut buckets of `bucket_mb` MB (10^6 bytes); 'index' makes one
bucket per piece (a fusion index per layer); 'none' reduces every parameter tensor alone
(`tensors` per piece). `auto_fusion` turns 'auto' into the framework's own rule before the
lowering reads (mode, bucket_mb).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["grad_buckets", "grad_bucket_runs", "auto_fusion", "COLLAPSE_MIN"]

# identical buckets of one piece run as one task from this many on (`lower.lowering`;
# `simulator.simulation.simulate` still simulates one task per bucket when collapsing saves fewer
# tasks than a second simulation, to cut the runs, would cost); fewer stay one task each
COLLAPSE_MIN = 64


def auto_fusion(framework: Any, dp: int, bytes_per_param: float, shard: int,
                bucket_mb: float = 25.0) -> tuple[str, float]:
    """(mode, bucket_mb) of `comm_fusion.mode: auto` under a framework profile:

    - parameters fully sharded (`optimizer_shard: 3`) by a stack with a wrap unit (FSDP,
      ZeRO-3): one reduction per unit, i.e. per layer ('index'; FSDP reduce-scatters each
      wrapped block's gradients in its post-backward hook);
    - a byte rule (`grad_reduction.bucket_bytes`: PyTorch DDP bucket_cap_mb 25 -> 26,214,400,
      NeMo distributed_fused_adam bucket_cap_mb): buckets of that size;
    - a parameter rule: max(bucket_params, bucket_params_per_dp_rank x dp) elements of
      `bytes_per_param` each (Megatron-Core distributed_data_parallel.py: 'bucket_size =
      max(40000000, 1000000 * dp_group.size())'; DeepSpeed reduce_bucket_size 5e8);
    - no rule and a reduction that does not overlap the backward (`overlap.grad_reduce:
      false`; Megatron-LM 2021 local DDP): one reduction of the whole gradient buffer after
      the backward;
    - no rule found in public sources (MindSpore's default fusion threshold): the scenario's
      `bucket_mb`.
    """
    g = framework.grad_reduction
    if shard >= 3 and framework.sharding.wrap_unit is not None:
        return "index", math.inf
    if g.bucket_bytes is not None:
        return "size", g.bucket_bytes / 1e6
    if g.bucket_params is not None:
        params = max(g.bucket_params, (g.bucket_params_per_dp_rank or 0) * dp)
        return "size", params * bytes_per_param / 1e6
    if framework.overlap.grad_reduce is False:
        return "size", math.inf
    return "size", bucket_mb


def _by_size(piece_bytes: list[float], bucket: float) -> list[tuple[int, float, int]]:
    """Runs of (piece, bytes, count): a bucket is cut whenever `bucket` bytes are filled; the
    full buckets of one piece are counted, not listed (0.01 MB buckets of a 175B model are
    half a million per device)."""
    out: list[tuple[int, float, int]] = []
    filled = 0.0
    for i, nbytes in enumerate(piece_bytes):
        left = nbytes
        if filled + left >= bucket:
            left -= bucket - filled
            full = 1 + int(left // bucket)
            left -= (full - 1) * bucket
            out.append((i, bucket, full))
            filled = 0.0
        filled += left
    if filled > 0.0:
        out.append((len(piece_bytes) - 1, filled, 1))
    return out


def _by_group(piece_bytes: list[float], starts: tuple[int, ...]) -> list[tuple[int, float, int]]:
    """One bucket per group of consecutive pieces; a group starts at each piece in
    `starts` (backward positions), and is ready after its last piece."""
    out: list[tuple[int, float, int]] = []
    total = 0.0
    for i, nbytes in enumerate(piece_bytes):
        if i in starts and total > 0:
            out.append((i - 1, total, 1))
            total = 0.0
        total += nbytes
    if total > 0:
        out.append((len(piece_bytes) - 1, total, 1))
    return out


def grad_bucket_runs(piece_params: tuple[int, ...], bytes_per_param: float, mode: str,
                     bucket_mb: float, tensors: int = 1, starts: tuple[int, ...] | None = None
                     ) -> tuple[tuple[int, float, int], ...]:
    """Consecutive identical gradient buckets as runs (index of the backward piece after
    which they are ready, bytes of each, how many), in launch order. The bytes add up to
    all gradients of the pieces. `starts`: with mode 'index', the backward positions of
    the pieces that start a fusion group (None: every piece is its own group)."""
    piece_bytes = [n * bytes_per_param for n in piece_params]
    if mode in ("size", "auto"):
        return tuple(_by_size(piece_bytes, bucket_mb * 1e6))
    if mode == "index" and starts is not None:
        return tuple(_by_group(piece_bytes, starts))
    if mode == "index":
        return tuple((i, b, 1) for i, b in enumerate(piece_bytes) if b > 0)
    k = max(1, tensors)
    return tuple((i, b / k, k) for i, b in enumerate(piece_bytes) if b > 0)


def grad_buckets(piece_params: tuple[int, ...], bytes_per_param: float, mode: str,
                 bucket_mb: float, tensors: int = 1) -> tuple[tuple[int, float], ...]:
    """(index of the backward piece after which the bucket is ready, bucket bytes), in launch
    order, one per bucket (`grad_bucket_runs` expanded)."""
    runs = grad_bucket_runs(piece_params, bytes_per_param, mode, bucket_mb, tensors)
    return tuple((i, b) for i, b, n in runs for _ in range(n))
