"""`verify`'s recompute of an operator graph (mlp, resnet, `type: graph`): the runs that
`schedule.graph_recompute` times, as `numeric.execute.Recompute` executes them."""

from __future__ import annotations

from simulator.config.scenario.schema import Scenario
from simulator.graph.graph import Graph
from simulator.numeric.execute import Recompute
from simulator.program.graph_recompute import recomputed, verify_runs
from simulator.program.graph_stages import graph_units

__all__ = ["graph_recompute"]


def graph_recompute(s: Scenario, graph: Graph, stage_of: dict[str, int] | None
                    ) -> Recompute | None:
    """The recompute of `graph` (the verify case's, in plan order) under `s`; None where
    nothing is recomputed. `stage_of`: operator -> pipeline stage, when the stages run on
    devices of their own."""
    names = [op.name for op in graph.ops]
    rc = recomputed(s, graph, graph_units(s.model.type, names), stage_of)
    if rc is None:
        return None
    consumers: dict[str, tuple[str, ...]] = {}
    for op in graph.ops:
        for t in dict.fromkeys(op.inputs):
            consumers[t] = consumers.get(t, ()) + (op.name,)
    runs = verify_runs(names, consumers, {op.name: op.output for op in graph.ops}, rc,
                       stage_of)
    if not runs:  # (`recomputed` refuses a recompute without runs; an empty `runs` would
        return None  # fall back to Recompute's transformer blocks)
    return Recompute(rc.__contains__, s.parallel.recompute_comm.tensor,
                     runs=tuple((k, run, readers) for k, (run, readers) in
                                sorted(runs.items())))
