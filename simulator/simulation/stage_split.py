"""The StageSplit of a scenario as `run` computes it (`models.split`): the priced balance of
`lower.stages` on the scenario's hardware profile, or without one the split by count. One
function for both commands: `simulate` lowers with it and `api.verify` hands it to
`simulation.verify`, which turns it into the numeric backend's {operator: virtual stage}."""

from __future__ import annotations

from typing import Any

from simulator.config.framework.load import framework_for
from simulator.config.scenario.schema import Scenario
from simulator.lower.costs import CostModel
from simulator.lower.framework_apply import fp8_recipe
from simulator.lower.layout import rank_mesh
from simulator.lower.stages import split_for
from simulator.models.registry import family
from simulator.models.split import StageSplit
from simulator.program.graph_program import graph_program
from simulator.program.model_program import transformer_program

__all__ = ["stage_split"]


def stage_split(scenario: Scenario, hw: Any = None) -> StageSplit | None:
    """The split of `scenario`'s pipeline priced on the profile `hw` as `run` prices it;
    None without a profile or a pipeline (`verify` then splits by count,
    `models.split.by_count`)."""
    if hw is None or scenario.parallel.pipeline == 1:
        return None
    fw = framework_for(scenario, hw)  # its launch cost prices the stages as `run` does
    costs = CostModel.from_hardware(hw, fw.software.host_us_per_kernel * 1e-6)
    if family(scenario.model).layered:
        prog = transformer_program(scenario, fw.software, hw.compute_units,
                                   fp8_recipe(scenario, fw))
        return split_for(scenario, prog, rank_mesh(scenario), costs)
    gp = graph_program(scenario)
    return split_for(scenario, gp.program, rank_mesh(scenario, gp.mesh), costs)
