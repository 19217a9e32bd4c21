"""The random inputs and parameters of a `verify` run (seeded: the same for the sharded
and the single-device runs)."""

from __future__ import annotations

import numpy as np

from simulator.graph.graph import Graph
from simulator.sharding.placement import Shard

__all__ = ["_data", "_params", "_split_batch"]


def _data(graph: Graph, rng: np.random.Generator, dtype: type) -> dict[str, np.ndarray]:
    """Random inputs: floats, or integer ids/labels in range of the op that reads them."""
    out = {}
    for t in graph.tensors.values():
        if t.kind not in ("input", "label"):
            continue
        blocks = _manual_blocks(graph, t.name)
        high = _index_range(graph, t.name)
        out[t.name] = (_block_ids(rng, t.shape, blocks) if blocks
                       else rng.integers(0, high, t.shape) if high
                       else rng.standard_normal(t.shape).astype(dtype))
    return out


def _manual_blocks(graph: Graph, name: str) -> tuple[int, ...] | None:
    """The table's row blocks where `name` is the ids of a Gather with MindSpore's
    manual_split (`Strategy.manual_split`, or the explicit blocks of the table in a
    resolved signature, `Shard.sizes`), else None."""
    for op in graph.consumers(name):
        if op.type != "Gather" or op.inputs[1] != name or op.strategy is None:
            continue
        blocks = getattr(op.strategy, "manual_split", None)
        sig = getattr(op.strategy, "signature", None)
        if not blocks and sig is not None:
            blocks = next((p.sizes for p in sig.input_layout(0).placements
                           if isinstance(p, Shard) and p.sizes), None)
        if blocks:
            return tuple(blocks)
    return None


def _block_ids(rng: np.random.Generator, shape: tuple[int, ...], blocks: tuple[int, ...]
               ) -> np.ndarray:
    """Ids whose column block k (the last dim cut into len(blocks) equal slices) indexes
    rows of block k only: the data a manual_split Gather is written for ("each column of
    the dataset corresponds to a subtable", MindSpore "Other Features"; ManualImpl in
    mindspore/ccsrc/frontend/parallel/ops_info/gather_info.cc subtracts block k's first
    row from column block k and gathers from block k alone)."""
    width = shape[-1] // len(blocks)
    starts = np.cumsum((0, *blocks[:-1]))
    cols = np.arange(shape[-1]) // width
    low, rows = starts[cols], np.asarray(blocks)[cols]
    return low + (rng.random(shape) * rows).astype(np.int64)


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
