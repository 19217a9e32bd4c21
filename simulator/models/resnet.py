"""The `resnet` family: convolutions then fully connected layers
(`graph.builders.build_resnet`), a unit per convolution, the flatten and each fully
connected layer; its plan splits batch and, under a dataset strategy, the image
(`models.model_plans.plan_resnet`)."""

from __future__ import annotations

import re
from typing import Any

from simulator.graph.builders import build_resnet
from simulator.graph.graph import Graph
from simulator.models.dataset import image_split, with_dataset
from simulator.models.family import ModelFamily
from simulator.models.model_plans import plan_resnet, written_builtin
from simulator.sharding.mesh import Mesh

__all__ = ["FAMILY"]


def _graph(s: Any, batch: int) -> Graph:
    m = s.model
    return build_resnet(batch, m.in_channels, m.channels, m.image_size, m.kernel_size,
                        m.conv_layers, m.fc_layers, m.hidden_size, m.num_classes)


def _written(s: Any) -> tuple[Graph, Mesh]:
    p = s.parallel
    graph = _graph(s, s.training.micro_batch_size * p.data)
    mesh = Mesh.of(dp=p.data, tp=p.tensor)
    planned = plan_resnet(graph, image_split(with_dataset(graph, s, mesh), mesh))
    return written_builtin(s, graph, planned, mesh)


FAMILY = ModelFamily(
    "resnet", layered=False, unplanned=_graph, written=_written,
    unit_start=lambda name: re.fullmatch(r"conv\d+|flatten|fc[1-9]\d*", name) is not None)
