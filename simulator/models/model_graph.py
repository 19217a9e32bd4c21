"""The planned operator graph of a non-transformer scenario (mlp, resnet, graph): the graph
with every op's strategy set, and the device mesh it runs on. Shared by `verify` (numeric)
and `run` (schedule), so both see the same plan, propagated or as written."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from simulator.config.scenario.schema import (
    DTYPE_BYTES,
    Scenario,
)
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.models.registry import family
from simulator.sharding.graph_yaml import strategy_key
from simulator.sharding.layout import LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.rules import SignatureError

if TYPE_CHECKING:
    from simulator.sharding.propagate.search import Propagation

__all__ = ["planned_graph", "unplanned_graph", "written_graph", "propagated"]


def unplanned_graph(s: Scenario, batch: int) -> Graph:
    """The model's graph for `batch` samples (mlp, resnet) or as written (graph)."""
    return family(s.model).unplanned(s, batch)


def written_graph(s: Scenario) -> tuple[Graph, Mesh]:
    """The graph with the strategies as written (graph) or built in (mlp, resnet; under
    `parallel.mode: auto` only the weight operators keep theirs), and its mesh."""
    written = family(s.model).written
    assert written is not None, "an operator-graph family writes its strategies"
    return written(s)


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
    if getattr(s.model, "mesh", None) is not None:  # an operator graph's own mesh
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
