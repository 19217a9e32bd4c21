"""The random inputs and parameters of a `verify` run (seeded: the same for the sharded
and the single-device runs)."""

from __future__ import annotations

import numpy as np

from simulator.graph.graph import Graph

__all__ = ["_data", "_params", "_split_batch"]


def _data(graph: Graph, rng: np.random.Generator, dtype: type) -> dict[str, np.ndarray]:
    """Random inputs: floats, or integer ids/labels in range of the op that reads them."""
    out = {}
    for t in graph.tensors.values():
        if t.kind not in ("input", "label"):
            continue
        high = _index_range(graph, t.name)
        out[t.name] = (rng.integers(0, high, t.shape) if high
                       else rng.standard_normal(t.shape).astype(dtype))
    return out


def _index_range(graph: Graph, name: str) -> int | None:
    for op in graph.consumers(name):
        if op.type == "Gather" and op.inputs[1] == name:
            return graph.tensors[op.inputs[0]].shape[0]
        if op.type == "SoftmaxCrossEntropy" and op.inputs[1] == name:
            return graph.tensors[op.inputs[0]].shape[-1]
    return None


def _params(graph: Graph, rng: np.random.Generator, dtype: type) -> dict[str, np.ndarray]:
    return {t.name: (rng.standard_normal(t.shape) * 0.5).astype(dtype)
            for t in graph.of_kind("parameter")}


def _split_batch(data: dict[str, np.ndarray], parts: int) -> list[dict[str, np.ndarray]]:
    return [{k: np.split(v, parts, axis=0)[i] for k, v in data.items()} for i in range(parts)]
