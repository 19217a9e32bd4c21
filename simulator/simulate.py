"""`simulate(scenario, hw)`: one training iteration, from a validated scenario and a hardware
profile to a `SimResult` (the plan, the trace and the metrics the reports read).

    scenario --model_program--> program --lower(costs)--> plan --engine.run--> trace
                                                               --metrics--> result

The program is derived from the planned operator graph that `verify` executes. The
framework profile (the scenario's `framework:`, else the hardware profile's
`default_framework`) gives the program its kernels and FP8 recipe, `comm_fusion.mode: auto`
its bucket rule, and the plan the stack's own memory (`simulator.framework.apply`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from simulator.engine.core import run
from simulator.engine.trace import Trace
from simulator.errors import InputError
from simulator.framework.apply import fp8_recipe, with_auto_fusion, with_framework_memory
from simulator.framework.load import framework_for
from simulator.framework.schema import FrameworkProfile
from simulator.heterogeneous import Cluster, jitter_report, pace_report
from simulator.report.metrics import (
    MemoryPeak,
    breakdown,
    by_device,
    comm_volumes,
    device_end,
    memory_peak,
)
from simulator.scenario.schema import Scenario, TransformerModel
from simulator.schedule.costs import CostModel
from simulator.schedule.flops import iteration_flops
from simulator.schedule.lowering import FIDELITIES, lower
from simulator.schedule.model_program import transformer_program
from simulator.schedule.program import TransformerProgram
from simulator.schedule.tasks import Plan

__all__ = ["SimResult", "simulate"]


@dataclass(frozen=True)
class SimResult:
    """A simulated iteration. Times in seconds, sizes in bytes, FLOPs per iteration.

    slowest_device: the simulated rank that finishes last; breakdown_s is along its compute
    stream (keys of report.metrics.BREAKDOWN_KEYS, summing to iteration_time_s).
    memory: the highest allocation peak over devices; comm_device communicates the most and
    comm_bytes are its bytes per collective. wall_s: seconds simulate() took.
    critical_path: who set the pace (`heterogeneous.pace_report`); jitter: the distribution
    of iteration times under `cluster.jitter` (None without); notes: what the caller should
    know about the inputs (overrides that changed nothing, ...).
    """

    scenario: Scenario
    fidelity: str
    program: TransformerProgram
    plan: Plan
    trace: Trace
    iteration_time_s: float
    slowest_device: int
    breakdown_s: tuple[tuple[str, float], ...]
    memory: MemoryPeak
    capacity_bytes: float
    comm_device: int
    comm_bytes: tuple[tuple[str, float], ...]
    model_flops: float
    hardware_flops: float
    peak_flops_per_s: float
    wall_s: float
    framework: FrameworkProfile | None = None
    critical_path: dict[str, Any] | None = None
    jitter: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return (f"SimResult({self.scenario.name}: {self.iteration_time_s:.4g} s/iteration, "
                f"{len(self.plan.devices)} simulated devices, {self.trace.events} events)")


def _check(scenario: Scenario, fidelity: str) -> None:
    if fidelity not in FIDELITIES:
        raise InputError("--fidelity", "", f"'{fidelity}' is not one of "
                         f"{', '.join(FIDELITIES)}")


def _graph_program(scenario: Scenario):
    """The program of an mlp, resnet or graph model, from its sharding plan; plan errors
    become input errors naming the strategy."""
    from simulator.schedule.model_program import graph_program
    from simulator.sharding.layout import LayoutError
    from simulator.sharding.rules import SignatureError

    try:
        return graph_program(scenario)
    except (SignatureError, LayoutError) as exc:
        from simulator.sharding.graph_yaml import strategy_key

        raise InputError(scenario.source, strategy_key(scenario, exc), str(exc)) from None


def simulate(scenario: Scenario, hw: Any, fidelity: str = "representative", *,
             costs: CostModel | None = None) -> SimResult:
    """Simulate one training iteration of `scenario` on hardware profile `hw`.

    `costs` replaces the cost model of `simulator.cost` (tests inject closed forms);
    `fidelity='full'` simulates every device instead of one per pipeline stage."""
    t0 = time.perf_counter()
    _check(scenario, fidelity)
    injected = costs
    costs = costs or CostModel.from_hardware(hw)
    fw = framework_for(scenario, hw)
    if isinstance(scenario.model, TransformerModel):
        prog = transformer_program(scenario, fw.software, hw.compute_units,
                                   fp8_recipe(scenario, fw))
        mesh = None
        model, hardware = iteration_flops(scenario, prog)
    else:
        gp = _graph_program(scenario)
        prog, mesh, model, hardware = gp.program, gp.mesh, gp.model_flops, gp.model_flops
    lowered = with_auto_fusion(scenario, fw, prog.grad_bytes)
    cluster = Cluster(scenario, hw, fidelity, mesh, injected)

    def lower_with(device_costs: Any) -> Plan:
        return lower(lowered, prog, costs, fidelity, mesh, device_costs)

    plan = with_framework_memory(lower_with(cluster.device_costs), scenario, fw, prog, mesh)
    trace = run(plan)
    grouped = by_device(plan)
    ends = device_end(plan, trace)
    slowest = max(plan.devices, key=lambda d: (ends[d], -d))
    parts = breakdown(plan, trace, slowest, ends[slowest])
    comm_dev, comm = comm_volumes(plan, grouped)
    peak = memory_peak(plan, trace, grouped, cluster.capacity_bytes)
    return SimResult(
        scenario=scenario, fidelity=fidelity, program=prog, plan=plan, trace=trace,
        iteration_time_s=ends[slowest], slowest_device=slowest,
        breakdown_s=tuple(parts.items()), memory=peak,
        capacity_bytes=cluster.capacity_bytes(peak.device), comm_device=comm_dev,
        comm_bytes=tuple(comm.items()), model_flops=model, hardware_flops=hardware,
        peak_flops_per_s=cluster.mean_peak_flops_per_s(scenario.model.dtype),
        wall_s=time.perf_counter() - t0, framework=fw,
        critical_path=pace_report(cluster, plan, trace),
        jitter=jitter_report(cluster, lower_with))
