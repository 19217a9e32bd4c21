"""Which parameters live on the parameter servers: MindSpore's `Parameter.set_param_ps`,
`parallel.parameter_server.parameters` here. MindSpore "provides the hybrid training mode
of parameter server and AllReduce. Some weights can be stored and updated through the
parameter server", the rest all-reduced (MindSpore docs "Parameter Server Mode", r1.7
design/parameter_server_training; r2.4 "Parameter Server", Overview; `Cell.set_param_ps`
sets every weight of a cell, `Parameter.set_param_ps` one). One decision for `run` (the
program's elements the workers all-reduce and update, `worker_elements`) and `verify` (the
parameters pushed and pulled, `served`), by name on the model's own graph."""

from __future__ import annotations

import math
from collections.abc import Iterable

from simulator.config.scenario.schema import Scenario
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError
from simulator.models.recompute import layer_role
from simulator.sharding.plan import ShardingPlan

__all__ = ["served", "worker_elements"]

KEY = "parallel.parameter_server.parameters"


def served(scenario: Scenario, names: Iterable[str]) -> frozenset[str]:
    """The parameters of `names` (a graph's, full names) on the servers: none outside
    `parallel.mode: parameter_server`, all of them without a `parameters` list, else those
    whose name, a transformer layer's without its `lN.` prefix, is listed. InputError
    naming the first listed name no parameter has."""
    names = tuple(names)
    if scenario.parallel.mode != "parameter_server":
        return frozenset()
    listed = scenario.parallel.parameter_server.parameters
    if listed is None:
        return frozenset(names)
    roles = tuple(dict.fromkeys(layer_role(n) for n in names))
    for i, want in enumerate(listed):
        if want not in roles:
            shown = ", ".join(roles[:24]) + (", ..." if len(roles) > 24 else "")
            raise InputError(scenario.source, f"{KEY}[{i}]", (
                f"'{want}' is no parameter of the model{did_you_mean(want, roles)} "
                f"(its parameters: {shown})"))
    return frozenset(n for n in names if layer_role(n) in listed)


def worker_elements(scenario: Scenario, plan: ShardingPlan) -> dict[str, int]:
    """{parameter: local elements} of the parameters the workers all-reduce and update
    themselves (those not on the servers), in parallel.mode parameter_server with a
    `parameters` list; empty otherwise (every parameter on the servers, or no servers)."""
    if scenario.parallel.mode != "parameter_server" or \
            scenario.parallel.parameter_server.parameters is None:
        return {}
    graph, mesh = plan.graph, plan.mesh
    params = [n for n, t in graph.tensors.items() if t.kind == "parameter"]
    on = served(scenario, params)
    return {n: math.prod(plan.layouts[n].local_shape(graph.tensors[n].shape, mesh))
            for n in params if n not in on}
