"""The `mlp` family: fully connected layers (`graph.builders.build_mlp`), each unit one
layer, Megatron-style column/row plans on a (dp, tp) mesh (`models.model_plans.plan_mlp`)."""

from __future__ import annotations

import re
from typing import Any

from simulator.graph.builders import build_mlp
from simulator.graph.graph import Graph
from simulator.models.family import ModelFamily
from simulator.models.model_plans import plan_mlp, written_builtin
from simulator.sharding.mesh import Mesh

__all__ = ["FAMILY"]


def _graph(s: Any, batch: int) -> Graph:
    m = s.model
    return build_mlp(batch, m.layers, m.hidden_size, m.input_size or m.hidden_size,
                     m.num_classes or m.hidden_size, m.activation)


def _written(s: Any) -> tuple[Graph, Mesh]:
    p = s.parallel
    graph = _graph(s, s.training.micro_batch_size * p.data)
    return written_builtin(s, graph, plan_mlp(graph), Mesh.of(dp=p.data, tp=p.tensor))


FAMILY = ModelFamily("mlp", layered=False, unplanned=_graph,
                     unit_start=lambda name: re.fullmatch(r"fc\d+", name) is not None,
                     written=_written)
