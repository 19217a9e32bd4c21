"""The planned operator graph of a non-transformer scenario (mlp, resnet, graph): the graph
with every op's strategy set, and the device mesh it runs on. Shared by `verify` (numeric)
and `run` (schedule), so both see the same plan, propagated or as written."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from simulator.config.scenario.dataset import dataset_choice
from simulator.config.scenario.schema import (
    DTYPE_BYTES,
    GraphModel,
    MlpModel,
    ResnetModel,
    Scenario,
)
from simulator.errors import InputError
from simulator.graph.builders import build_mlp, build_resnet
from simulator.graph.graph import Graph
from simulator.models.model_plans import plan_mlp, plan_resnet
from simulator.sharding.graph_yaml import graph_from_model, mesh_for_graph, strategy_key
from simulator.sharding.layout import LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import dataset_layout
from simulator.sharding.placement import Shard
from simulator.sharding.rules import SignatureError

if TYPE_CHECKING:
    from simulator.sharding.propagate.search import Propagation

__all__ = ["planned_graph", "unplanned_graph", "written_graph", "propagated", "with_dataset"]


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


def written_graph(s: Scenario) -> tuple[Graph, Mesh]:
    """The graph with the strategies as written (graph) or built in (mlp, resnet; under
    `parallel.mode: auto` only the weight operators keep theirs), and its mesh."""
    m, p = s.model, s.parallel
    if isinstance(m, GraphModel):
        # each pipeline stage runs the graph's mesh on devices of its own
        mesh = mesh_for_graph(m, s.devices // p.pipeline, s.source, p.pipeline)
        return with_dataset(graph_from_model(m, s.source), s, mesh), mesh
    graph = unplanned_graph(s, s.training.micro_batch_size * p.data)
    mesh = Mesh.of(dp=p.data, tp=p.tensor)
    planned = (plan_mlp(graph) if isinstance(m, MlpModel) else
               plan_resnet(graph, _image_split(with_dataset(graph, s, mesh), mesh)))
    if p.mode == "auto":  # the weight operators keep the built-in plan (key operators)
        params = {t.name for t in graph.of_kind("parameter")}
        planned = Graph(planned.tensors, tuple(
            op if params & set(op.inputs) else dataclasses.replace(op, strategy=None)
            for op in planned.ops))
    return with_dataset(planned, s, mesh), mesh


def _image_split(graph: Graph, mesh: Mesh) -> dict[str, int]:
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


def propagated(s: Scenario) -> Propagation:
    """Sharding propagation over the scenario's graph with `parallel.search`; InputError for
    a configured strategy no rule allows, or when dynamic_programming meets a graph that is
    not chains and trees. One propagation per scenario (its JSON), however many callers
    ask (verify's work estimate, then its run): the result is a function of the scenario's
    fields, `source` among them."""
    key = s.model_dump_json()
    if key not in _PROPAGATED:
        if len(_PROPAGATED) >= 8:
            _PROPAGATED.pop(next(iter(_PROPAGATED)))
        _PROPAGATED[key] = _propagate(s)
    return _PROPAGATED[key]


_PROPAGATED: dict[str, Propagation] = {}


def _propagate(s: Scenario) -> Propagation:
    from simulator.sharding.propagate.search import propagate
    from simulator.sharding.propagate.solvers import NotATree

    graph, mesh = written_graph(s)
    try:
        return propagate(graph, mesh, DTYPE_BYTES[s.model.dtype], s.parallel.search,
                         check=_work_check(s, graph, mesh))
    except NotATree as exc:
        raise InputError(s.source, "parallel.search", f"dynamic_programming: {exc}; "
                         "use ilp (exact on any graph) or sharding_propagation") from None
    except (SignatureError, LayoutError) as exc:
        raise InputError(s.source, strategy_key(s, exc), str(exc)) from None


_REMEDY = ("give model.mesh with fewer, larger axes (each of more than one device "
           "multiplies the count), use fewer devices, or write the strategies "
           "(parallel.mode=semi_auto)")


def _mesh_key(s: Scenario, mesh_shape: tuple[int, ...]) -> tuple[str, str]:
    """The key that sets a graph's mesh, and the mesh in words."""
    axes = "*".join(str(n) for n in mesh_shape)
    if isinstance(s.model, GraphModel) and s.model.mesh is not None:
        return "model.mesh", f"the mesh {axes} of model.mesh"
    return "cluster.nodes", (f"the mesh {axes} of the {math.prod(mesh_shape)} devices, one "
                             "axis per prime factor")


def _work_check(s: Scenario, graph: Graph, mesh: Mesh
                ) -> Callable[[dict[tuple[int, ...], int]], None]:
    """InputError naming the key that drives it when propagation would enumerate more
    signatures than `limits.DEFAULT_MAX_SIGNATURES`; else `propagate`'s check, the same
    when its searches would visit more layouts than `limits.DEFAULT_MAX_LAYOUT_PAIRS`
    (both grow with the number of mesh axes)."""
    from simulator.limits import (
        DEFAULT_MAX_LAYOUT_PAIRS,
        DEFAULT_MAX_SIGNATURES,
        Estimate,
        estimate_propagation,
        estimate_signatures,
    )
    from simulator.sharding.rules import signatures_1d

    def refuse(est: Estimate, limit: int, what: str) -> None:
        if est.count > limit:
            raise InputError(s.source, est.key, f"parallel.mode=auto: about {est.count:,} "
                             f"{what} ({est.detail}), above the limit of {limit:,}; {_REMEDY}")

    per_axis = [len(signatures_1d(graph.labels(op))) for op in graph.ops if op.strategy is None]
    key = _mesh_key(s, mesh.shape)
    refuse(estimate_signatures(key, per_axis, mesh.shape), DEFAULT_MAX_SIGNATURES,
           "signatures for sharding propagation to enumerate")

    def check(sources: dict[tuple[int, ...], int]) -> None:
        refuse(estimate_propagation(key, sources, mesh.shape), DEFAULT_MAX_LAYOUT_PAIRS,
               "layouts for sharding propagation to search")

    return check


def planned_graph(s: Scenario) -> tuple[Graph, Mesh]:
    """One micro-batch's graph (global across data parallel) with strategies, and the mesh:
    (dp, tp) for mlp and resnet, the model's own mesh for graph. With `parallel.mode: auto`
    every operator without a strategy gets the signature sharding propagation chooses
    (for mlp and resnet, every operator but the weight operators)."""
    if s.parallel.mode == "auto":
        prop = propagated(s)
        return prop.graph(), prop.problem.mesh
    return written_graph(s)
