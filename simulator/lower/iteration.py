"""`lower(scenario, program, costs, fidelity) -> Plan`: one training iteration of a program
as the engine's task streams (`lower.lowering` describes the streams and emits them per
device; this module builds the Plan from them)."""

from __future__ import annotations

from collections.abc import Callable

from simulator.config.scenario.schema import Scenario
from simulator.engine.tasks import Plan, Task
from simulator.errors import InputError
from simulator.lower import comm_graph
from simulator.lower.costs import CostModel
from simulator.lower.device_states import host_extras
from simulator.lower.layout import rank_mesh
from simulator.lower.lowering import FIDELITIES, Cuts, Lowering
from simulator.lower.nics import nic_fields
from simulator.models.split import StageSplit
from simulator.program.program import Program
from simulator.sharding.mesh import Mesh

__all__ = ["lower", "FIDELITIES", "Cuts"]


def _check(scenario: Scenario, prog: Program) -> None:
    """What the program cannot do (the scenario rules refuse it first; this guards callers
    that lower a program of their own)."""
    if scenario.parallel.pipeline > 1 and len(prog.sequence()) < 2:
        raise InputError(scenario.source, "parallel.pipeline",
                         f"{scenario.parallel.pipeline} needs a model the pipeline can "
                         f"partition into stages; a model of type "
                         f"'{scenario.model.type}' is one block (allowed: 1)")


def lower(scenario: Scenario, program: Program, costs: CostModel,
          fidelity: str = "representative", model_mesh: Mesh | None = None,
          device_costs: Callable[[int], CostModel] | None = None, micro: int | None = None,
          cuts: Cuts | None = None, split: StageSplit | None = None) -> Plan:
    """The task streams of one training iteration of `scenario` (see the module docstring).
    `model_mesh`: an operator graph's own device mesh (default: (dp, tp) of `parallel`).
    `device_costs(rank)`: the cost model of each simulated device where they differ
    (`lower.device_costs`; default `costs` for all). `micro`: micro-batches per replica
    instead of the scenario's (a shortened run of the steady state,
    `simulator.simulation.simulate`); `cuts`: collapse identical buckets, cut there.
    `split`: the StageSplit (`models.split`) computed once for the run (default: the one
    `lower.stages.split_for` prices on `costs`)."""
    assert fidelity in FIDELITIES, f"fidelity must be one of {FIDELITIES}"
    _check(scenario, program)
    low = Lowering(scenario, program, costs, fidelity, rank_mesh(scenario, model_mesh),
                   micro=micro, cuts=cuts, split=split)
    devices, represents = low.ranks.simulated(fidelity)
    views: dict[int, Lowering] = {}

    def view(dev: int) -> Lowering:
        if device_costs is None:
            return low
        c = device_costs(dev)
        if id(c) not in views:
            views[id(c)] = Lowering(scenario, program, c, fidelity, low.ranks, share=low)
        return views[id(c)]

    static = tuple(view(dev).device(dev) for dev in devices)
    tasks: tuple[Task, ...] = low.b.tasks()
    streams = tuple((dev, name, tuple(tids)) for (dev, name), tids in low.b.streams.items())
    plan = Plan(tasks=tasks, streams=streams, devices=devices, represents=represents,
                stage_of=tuple(low.ranks.stage(d) for d in devices), static_memory=static,
                total_devices=low.ranks.devices, micro_batches=low.micro,
                stage_layers=tuple(w.layers for w in low.work),
                extras=low.dp.extras() + low.off.extras() + comm_graph.extras(low)
                + program.extras + host_extras(low),
                blocks=tuple(low.block_of),
                slowdown=tuple(view(dev).costs.overlap_slowdown for dev in devices),
                link_sharing=_link_sharing(costs),
                **nic_fields(costs.hardware, low.ranks, devices, fidelity),
                **(low.routes.fields() if low.routes else {}))
    for each in (low, *views.values()):
        each.release()
    return plan


def _link_sharing(costs: CostModel) -> str:
    """How the engine shares a link among concurrent transfers: the profile's
    `inter_node.flow_sharing` (fifo without a profile)."""
    hw = costs.hardware
    return str(hw.inter_node.flow_sharing) if hw is not None else "fifo"
