"""The dataset strategy of an operator graph's inputs (MindSpore's `dataset_strategy`,
`simulator.config.scenario.dataset`) laid on its mesh, and the image dims it splits."""

from __future__ import annotations

import dataclasses

from simulator.config.scenario.dataset import dataset_choice
from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import dataset_layout
from simulator.sharding.placement import Shard
from simulator.sharding.rules import SignatureError

__all__ = ["image_split", "with_dataset"]


def image_split(graph: Graph, mesh: Mesh) -> dict[str, int]:
    """Mesh axis -> the image dim (H 2, W 3) its dataset strategy splits there."""
    image = graph.tensors["x"]
    layout = dataset_layout(image.load, image.shape, mesh)
    if layout is None:
        return {}
    return {name: p.dim for name, p in zip(mesh.names, layout.placements)
            if isinstance(p, Shard) and p.dim in (2, 3)}


def with_dataset(graph: Graph, s: Scenario, mesh: Mesh) -> Graph:
    """The graph with the scenario's dataset strategy on each input and label, in the
    model's order (`scenario.dataset`); InputError naming the key where it does not fit."""
    choice = dataset_choice(s.parallel)
    if choice is None:
        return graph
    key, value = choice
    loaded = [t for t in graph.tensors.values() if t.kind in ("input", "label")]
    if isinstance(value, list) and len(value) != len(loaded):
        raise InputError(s.source, key, f"{len(value)} tuples for the {len(loaded)} inputs "
                         f"and labels ({', '.join(t.name for t in loaded)}); expected one "
                         "per input and label, in the model's order")
    tensors = dict(graph.tensors)
    for i, t in enumerate(loaded):
        load = tuple(value[i]) if isinstance(value, list) else value
        try:
            dataset_layout(load, t.shape, mesh)
        except SignatureError as exc:
            where = f"{key}[{i}]" if isinstance(value, list) else key
            raise InputError(s.source, where, f"{t.name} {list(t.shape)} on mesh {mesh}: "
                             f"{exc}") from None
        tensors[t.name] = dataclasses.replace(t, load=load)
    return Graph(tensors, graph.ops)
