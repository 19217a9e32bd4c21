"""From a scenario to a verification case: the graph with its strategies, the mesh, the data
(`models.family.VerifyCase`). A family may build its own (the transformer shrinks large
scenarios to small dimensions with the same parallel configuration, and says so); an
operator graph is verified as planned."""

from __future__ import annotations

import numpy as np

from simulator.config.scenario.schema import Scenario
from simulator.models.family import VerifyCase
from simulator.models.model_graph import planned_graph, unplanned_graph
from simulator.models.registry import family

__all__ = ["VerifyCase", "build_case"]


def _dtype(s: Scenario) -> type:
    return np.float32 if s.model.dtype == "fp32" else np.float64


def build_case(s: Scenario, fused_attention: bool = False) -> VerifyCase:
    """The verification case of a scenario; InputError for graphs that cannot be planned.
    `fused_attention`: the hardware profile's default for `model.attention: auto`."""
    own = family(s.model).case
    if own is not None:
        return own(s, fused_attention)
    sharded, mesh = planned_graph(s)
    micro = min(s.grad_accum_steps, 2)
    rows = sharded.tensors[next(t.name for t in sharded.of_kind("input"))].shape[0]
    written = family(s.model).writes_ops  # its batch is in its inputs: run it again
    whole = sharded if micro == 1 or written else unplanned_graph(s, rows * micro)
    notes = (f"{micro} of {s.grad_accum_steps} micro-batches run",) \
        if micro < s.grad_accum_steps else ()
    return VerifyCase(sharded, whole, sharded, mesh, micro, notes, _dtype(s),
                      separate=written and micro > 1)
