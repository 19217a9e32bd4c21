"""The planned operator graph of a non-transformer scenario (mlp, resnet, graph): the graph
with every op's strategy set, and the device mesh it runs on. Shared by `verify` (numeric)
and `run` (schedule), so both see the same plan."""

from __future__ import annotations

from simulator.graph.builders import build_mlp, build_resnet
from simulator.graph.graph import Graph
from simulator.scenario.schema import GraphModel, MlpModel, ResnetModel, Scenario
from simulator.sharding.graph_yaml import graph_from_model, mesh_for_graph
from simulator.sharding.mesh import Mesh
from simulator.sharding.model_plans import plan_mlp, plan_resnet

__all__ = ["planned_graph", "unplanned_graph"]


def unplanned_graph(s: Scenario, batch: int) -> Graph:
    """The model's graph for `batch` samples (mlp, resnet) or as written (graph)."""
    m = s.model
    if isinstance(m, MlpModel):
        return build_mlp(batch, m.layers, m.hidden_size, m.input_size or m.hidden_size,
                         m.num_classes or m.hidden_size, m.activation)
    if isinstance(m, ResnetModel):
        return build_resnet(batch, m.in_channels, m.channels, m.image_size, m.kernel_size,
                            m.conv_layers, m.fc_layers, m.hidden_size, m.num_classes)
    if isinstance(m, GraphModel):
        return graph_from_model(m, s.source)
    raise TypeError(f"no operator graph for model type {m.type!r}")


def planned_graph(s: Scenario) -> tuple[Graph, Mesh]:
    """One micro-batch's graph (global across data parallel) with strategies, and the mesh:
    (dp, tp) for mlp and resnet, the model's own mesh for graph."""
    m, p = s.model, s.parallel
    if isinstance(m, GraphModel):
        return graph_from_model(m, s.source), mesh_for_graph(m, s.devices, s.source)
    graph = unplanned_graph(s, s.training.micro_batch_size * p.data)
    planned = plan_mlp(graph) if isinstance(m, MlpModel) else plan_resnet(graph)
    return planned, Mesh.of(dp=p.data, tp=p.tensor)
