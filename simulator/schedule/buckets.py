"""Gradient buckets (communication fusion) for the data-parallel reduction.

Gradients become ready piece by piece as the backward runs (LM head, the layers from last to
first, the embedding). Fusion packs them, in that order, into buckets that are reduced as
soon as they are full (PyTorch DDP and Megatron-LM `bucket_size`; MindSpore
`comm_fusion`): a bucket is ready when the piece holding its last gradient has finished.

Modes: 'size' and 'auto' cut buckets of `bucket_mb` MB (10^6 bytes); 'index' makes one
bucket per piece (a fusion index per layer); 'none' reduces every parameter tensor alone
(`tensors` per piece).
"""

from __future__ import annotations

__all__ = ["grad_buckets"]


def _by_size(piece_bytes: list[float], bucket: float) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    filled = 0.0
    for i, nbytes in enumerate(piece_bytes):
        left = nbytes
        while filled + left >= bucket:
            left -= bucket - filled
            out.append((i, bucket))
            filled = 0.0
        filled += left
    if filled > 0.0:
        out.append((len(piece_bytes) - 1, filled))
    return out


def grad_buckets(piece_params: tuple[int, ...], bytes_per_param: float, mode: str,
                 bucket_mb: float, tensors: int = 1) -> tuple[tuple[int, float], ...]:
    """(index of the backward piece after which the bucket is ready, bucket bytes), in launch
    order. The bytes add up to all gradients of the pieces."""
    piece_bytes = [n * bytes_per_param for n in piece_params]
    if mode in ("size", "auto"):
        return tuple(_by_size(piece_bytes, bucket_mb * 1e6))
    if mode == "index":
        return tuple((i, b) for i, b in enumerate(piece_bytes) if b > 0)
    k = max(1, tensors)
    return tuple((i, b / k) for i, b in enumerate(piece_bytes) if b > 0 for _ in range(k))
