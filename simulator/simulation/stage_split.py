"""The StageSplit of a scenario as `run` computes it (`models.split`): the priced balance of
`lower.stages` on the scenario's hardware profile, or without one the split by count. One
function for both commands: `simulate` lowers with it and `api.verify` hands it to
`simulation.verify`, which turns it into the numeric backend's {operator: virtual stage}."""

from __future__ import annotations

from typing import Any

from simulator.config.framework.load import framework_for
from simulator.config.scenario.schema import Scenario
from simulator.lower.layout import rank_mesh
from simulator.lower.stages import split_for
from simulator.models.split import StageSplit
from simulator.simulation.simulate import run_costs, run_program

__all__ = ["stage_split"]


def stage_split(scenario: Scenario, hw: Any = None) -> StageSplit | None:
    """The split of `scenario`'s pipeline priced on the profile `hw` as `run` prices it
    (its program and cost model, `simulate.run_program` and `run_costs`); None without a
    profile or a pipeline (`verify` then splits by count, `models.split.by_count`)."""
    if hw is None or scenario.parallel.pipeline == 1:
        return None
    fw = framework_for(scenario, hw)
    prog, mesh, _, _ = run_program(scenario, hw, fw)
    return split_for(scenario, prog, rank_mesh(scenario, mesh), run_costs(hw, fw))
