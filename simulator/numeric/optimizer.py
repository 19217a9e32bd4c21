"""Optimizer updates on numpy blocks: SGD, momentum SGD, Adam (Kingma & Ba 2015, with bias
correction). Elementwise, so a shard updates exactly as its slice of the whole would."""

from __future__ import annotations

import numpy as np

__all__ = ["update", "updates"]

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


def updates(kind: str, param: np.ndarray, grads: list[np.ndarray], lr: float) -> np.ndarray:
    """The parameter after one step per gradient of `grads`, in that order, from zero
    optimizer state, the state carried from step to step (momentum's velocity, Adam's
    moments and bias-correction step): how a server applies pushes one after another.
    One gradient: `update`."""
    m = np.zeros_like(param, dtype=np.result_type(param, *grads))
    v = np.zeros_like(m)
    for step, g in enumerate(grads, start=1):
        if kind == "sgd":
            param = param - lr * g
        elif kind == "momentum":
            m = _MOMENTUM * m + g
            param = param - lr * m
        elif kind == "adam":
            m = _BETA1 * m + (1 - _BETA1) * g
            v = _BETA2 * v + (1 - _BETA2) * g * g
            m_hat, v_hat = m / (1 - _BETA1**step), v / (1 - _BETA2**step)
            param = param - lr * m_hat / (np.sqrt(v_hat) + _EPS)
        else:
            raise ValueError(f"unknown optimizer {kind!r} (allowed: sgd, momentum, adam)")
    return param
