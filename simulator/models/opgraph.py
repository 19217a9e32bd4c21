"""The `graph` family: tensors and operators written out in the scenario (`type: graph`,
`sharding.graph_yaml`), each operator a unit, on the model's own mesh (each pipeline stage
on devices of its own)."""

from __future__ import annotations

from typing import Any

from simulator.config.scenario.schema import GraphModel
from simulator.graph.graph import Graph
from simulator.models.dataset import with_dataset
from simulator.models.family import ModelFamily
from simulator.models.manual_split import check_manual_splits
from simulator.sharding.graph_yaml import graph_from_model, mesh_for_graph
from simulator.sharding.mesh import Mesh

__all__ = ["FAMILY", "graph_model"]


def graph_model(m: Any) -> GraphModel:
    """`m`, the model section of a `type: graph` scenario (for code of written graphs)."""
    assert isinstance(m, GraphModel), f"a written operator graph, not {m.type!r}"
    return m


def _graph(s: Any, batch: int) -> Graph:
    return graph_from_model(s.model, s.source)  # its batch is its input tensors'


def _written(s: Any) -> tuple[Graph, Mesh]:
    p = s.parallel
    mesh = mesh_for_graph(s.model, s.devices // p.pipeline, s.source, p.pipeline)
    graph = with_dataset(graph_from_model(s.model, s.source), s, mesh)
    check_manual_splits(s.model, graph, mesh, s.source)
    return graph, mesh


FAMILY = ModelFamily("graph", layered=False, unplanned=_graph, written=_written,
                     unit_start=lambda name: True, writes_ops=True)
