"""MindSpore's parallel modes as `parallel.mode` values (mindspore.context.ParallelMode):
what each allows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario.rule_helpers import Problem

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

__all__ = ["parallel_modes"]


def parallel_modes(s: Scenario) -> Iterator[Problem]:
    """MindSpore's parallel modes (mindspore.context.ParallelMode): DATA_PARALLEL
    "distributes the data across different processors" -- every operator data parallel,
    so nothing splits a model (`data`: semi_auto with no strategy and no model-parallel
    degree); HYBRID_PARALLEL "achieves data parallelism and model parallelism manually" --
    the network's own code slices its tensors and calls the collectives, which a scenario
    cannot state: refused, pointing at the strategies that say the same split."""
    p = s.parallel
    if p.mode == "hybrid":
        yield "parallel.mode", (
            "hybrid (MindSpore's HYBRID_PARALLEL: the network's own code slices the tensors "
            "and calls the collectives) is not simulated; write the same split as operator "
            "strategies under semi_auto, which inserts those collectives (allowed: "
            "semi_auto, auto, parameter_server, data)")
    if p.mode != "data":
        return
    for key in ("tensor", "pipeline", "context", "expert"):
        if getattr(p, key, 1) != 1:
            yield f"parallel.{key}", (f"{getattr(p, key)} does not apply with parallel.mode: "
                                      f"data, where every operator is data parallel "
                                      f"(allowed: 1)")
    for i, op in enumerate(getattr(s.model, "ops", None) or ()):
        for key in ("strategy", "placements", "out_strategy"):
            if getattr(op, key, None) is not None:
                yield f"model.ops[{i}].{key}", (
                    "does not apply with parallel.mode: data, where every operator is data "
                    "parallel (remove it, or use semi_auto)")
                return
