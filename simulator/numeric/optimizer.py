"""Optimizer updates on numpy blocks: SGD, momentum SGD, Adam (Kingma & Ba 2015, with bias
correction). Elementwise, so a shard updates exactly as its slice of the whole would."""

from __future__ import annotations

import numpy as np

__all__ = ["update"]

_BETA1, _BETA2, _EPS, _MOMENTUM = 0.9, 0.999, 1e-8, 0.9


def update(kind: str, param: np.ndarray, grad: np.ndarray, lr: float, step: int = 1
           ) -> np.ndarray:
    """The parameter after one step from zero optimizer state (`step` 1-based)."""
    if kind == "sgd":
        return param - lr * grad
    if kind == "momentum":
        velocity = grad  # zero initial velocity: v = 0.9*0 + g
        return param - lr * velocity
    if kind == "adam":
        m = (1 - _BETA1) * grad
        v = (1 - _BETA2) * grad * grad
        m_hat = m / (1 - _BETA1**step)
        v_hat = v / (1 - _BETA2**step)
        return param - lr * m_hat / (np.sqrt(v_hat) + _EPS)
    raise ValueError(f"unknown optimizer {kind!r} (allowed: sgd, momentum, adam)")
