"""The `graph` family: tensors and operators written out in the scenario (`type: graph`,
`sharding.graph_yaml`), each operator a unit, on the model's own mesh (each pipeline stage
on devices of its own), with `parallel.data` replicas of that mesh around it as an outer
axis `dp` (`sharding.outer_axis`) and its batch rescaled to `training.global_batch_size`
where given (`models.graph_batch`)."""

from __future__ import annotations

from typing import Any

from simulator.config.scenario.schema import GraphModel
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.models.dataset import with_dataset
from simulator.models.family import ModelFamily
from simulator.models.graph_batch import resolved
from simulator.models.manual_split import check_manual_splits, check_no_repeat
from simulator.sharding.graph_yaml import graph_from_model, mesh_for_graph, strategy_key
from simulator.sharding.mesh import Mesh
from simulator.sharding.outer_axis import with_outer_axis
from simulator.sharding.rules import SignatureError

__all__ = ["FAMILY", "graph_model"]


def graph_model(m: Any) -> GraphModel:
    """`m`, the model section of a `type: graph` scenario (for code of written graphs)."""
    assert isinstance(m, GraphModel), f"a written operator graph, not {m.type!r}"
    return m


def _graph(s: Any, batch: int) -> Graph:
    s = resolved(s)
    return graph_from_model(s.model, s.source)  # its batch is its input tensors'


def _written(s: Any) -> tuple[Graph, Mesh]:
    s = resolved(s)
    p = s.parallel
    mesh = mesh_for_graph(s.model, s.devices // (p.pipeline * p.data), s.source,
                          p.pipeline, p.data)
    graph = graph_from_model(s.model, s.source)
    check_no_repeat(s.model, mesh.size, s.source)
    if p.data > 1:
        try:
            graph, mesh = with_outer_axis(graph, mesh, p.data)
        except SignatureError as exc:
            raise InputError(s.source, strategy_key(s, exc), f"{exc} (on model.mesh "
                             f"{mesh}, inside each of parallel.data={p.data} "
                             f"replicas)") from None
    graph = with_dataset(graph, s, mesh)
    check_manual_splits(s.model, graph, mesh, s.source)
    return graph, mesh


FAMILY = ModelFamily("graph", layered=False, unplanned=_graph, written=_written,
                     unit_start=lambda name: True, writes_ops=True)
