"""`simulate(scenario, hw)`: one training iteration, from a validated scenario and a hardware
profile to a `SimResult` (the plan, the trace and the metrics the reports read).

    scenario --model_program--> program --lower(costs)--> plan --engine.run--> trace
                                                               --metrics--> result

The program is derived from the planned operator graph that `verify` executes. The
framework profile (the scenario's `framework:`, else the hardware profile's
`default_framework`) gives the program its kernels and FP8 recipe, `comm_fusion.mode: auto`
its bucket rule, and the plan the stack's own memory (`simulator.lower.framework_apply`).

Repetition that changes nothing is simulated once (issue 13): when the pipeline schedule
has a steady period of P micro-batches (`budget.shortened_run`), the iteration is simulated
for a shortened run of m' micro-batches (warm-up, a few steady periods, cool-down) and for
m' + P; when the second is exactly the first with one period inserted
(`engine.steady.splice`), each further period adds the same time to every device, the same
busy and idle time to every breakdown part, the same bytes to every collective and nothing
to the memory peak, so the m-micro-batch result is the m' one plus (m - m')/P times the
difference. Otherwise every micro-batch is simulated. A sweep (`two_point=True`) also
extends GPipe, whose added micro-batch inserts a forward and a backward at two points of
every stream and whose memory peak grows by the activations each one holds (`_grown_peak`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from simulator.config.framework.load import framework_for
from simulator.config.framework.schema import FrameworkProfile
from simulator.config.scenario.schema import Scenario
from simulator.engine.blocks import cuts_needed
from simulator.engine.core import run
from simulator.engine.steady import splice
from simulator.engine.tasks import Plan
from simulator.engine.trace import Trace
from simulator.errors import InputError
from simulator.lower.costs import CostModel, eager_launch_s, eager_loop_s
from simulator.lower.framework_apply import (
    fp8_recipe,
    with_auto_fusion,
    with_fp8_gather,
    with_framework_memory,
)
from simulator.lower.iteration import FIDELITIES, Cuts, lower
from simulator.lower.layout import rank_mesh
from simulator.lower.pipeline import STEADY_PERIODS_KEPT, steady_window
from simulator.lower.stages import split_for
from simulator.models.registry import family
from simulator.program.flops import iteration_flops
from simulator.program.graph_program import graph_program
from simulator.program.model_program import transformer_program
from simulator.program.program import Program
from simulator.report.metrics import (
    MemoryPeak,
)
from simulator.sharding.graph_yaml import strategy_key
from simulator.sharding.layout import LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.rules import SignatureError
from simulator.simulation.budget import (
    DEFAULT_MAX_EVENTS,
    check_budget,
    estimate_every_micro_batch,
    shortened_run,
)
from simulator.simulation.heterogeneous import Cluster, jitter_report
from simulator.simulation.steady_runs import Measured, Steady, extend, measure

__all__ = ["SimResult", "Steady", "simulate", "run_program", "run_costs", "RunProgram"]


@dataclass(frozen=True)
class SimResult:
    """A simulated iteration. Times in seconds, sizes in bytes, FLOPs per iteration.

    slowest_device: the simulated rank that finishes last; breakdown_s is along its compute
    stream (keys of report.metrics.BREAKDOWN_KEYS, summing to iteration_time_s).
    memory: the highest allocation peak over devices; comm_device communicates the most and
    comm_bytes are its bytes per collective. wall_s: seconds simulate() took; trace.events
    counts the events of every simulation it ran (shortened runs, collapsed buckets cut).
    critical_path: who set the pace (`heterogeneous.pace_report`); jitter: the distribution
    of iteration times under `cluster.jitter` (None without); notes: what the caller should
    know about the inputs (overrides that changed nothing, ...); steady: how the steady
    state was extended (None: every micro-batch simulated).
    """

    scenario: Scenario
    fidelity: str
    program: Program
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
    steady: Steady | None = None
    hardware: str = ""  # the name of the hardware profile simulated (after --set hardware=)
    host_capacity_bytes: float = 0.0  # host DRAM of a node (hardware.host.memory_GB)
    nvme_capacity_bytes: float = 0.0  # NVMe drives of a node (hardware.host.nvme_GB)

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

    try:
        return graph_program(scenario)
    except (SignatureError, LayoutError) as exc:

        raise InputError(scenario.source, strategy_key(scenario, exc), str(exc)) from None


class RunProgram(NamedTuple):
    """The program `run` lowers, an operator graph's own mesh (None: a transformer's,
    from `parallel`), and the iteration's model and hardware FLOPs."""

    program: Program
    mesh: Mesh | None
    model_flops: float
    hardware_flops: float


def run_program(scenario: Scenario, hw: Any, fw: Any) -> RunProgram:
    """The program of `scenario` on the profile `hw` under the framework `fw`, as `run`
    derives it (the StageSplit `verify` is handed, `simulation.stage_split`, is priced on
    the same one)."""
    if family(scenario.model).layered:
        recipe = fp8_recipe(scenario, fw, hw)
        prog = with_fp8_gather(transformer_program(scenario, fw.software, hw.compute_units,
                                                   recipe), scenario, fw, recipe)
        return RunProgram(prog, None, *iteration_flops(scenario, prog))
    gp = _graph_program(scenario)
    return RunProgram(gp.program, gp.mesh, gp.model_flops, gp.model_flops)


# (id(profile), id(framework)) -> (profile, framework, cost model): the entry holds both
# (frozen) profiles, so their ids cannot be reused while it is stored
_COSTS: dict[tuple[int, int], tuple[Any, Any, CostModel]] = {}
COSTS_SIZE = 16  # entries kept at most, emptied when full


def run_costs(hw: Any, fw: Any) -> CostModel:
    """The cost model `run` prices with: the profile's, with the stack's launch cost per
    kernel. One object per profile pair, so that the simulations of a search (or the
    shortened runs of one) share its collective cache and `lower.stages.stage_work`'s."""
    hit = _COSTS.get((id(hw), id(fw)))
    if hit is not None and hit[0] is hw and hit[1] is fw:
        return hit[2]
    costs = CostModel.from_hardware(hw, fw.software.host_us_per_kernel * 1e-6,
                                    fw.moe_host_costs, fw.graph_launch_s)
    if len(_COSTS) >= COSTS_SIZE:
        _COSTS.clear()
    _COSTS[(id(hw), id(fw))] = (hw, fw, costs)
    return costs


STEADY_TRIES = 4  # shortened runs tried at most (19 to 152 micro-batches for GPT-3 175B)


def _steady(simulated: _Runs, micro: int, short: int, period: int,
            insertions: int = 1) -> Measured | None:
    """The iteration of `micro` micro-batches extended from shortened runs, or None when
    no shortened run repeats exactly (see the module docstring). A run that has not reached
    its steady state yet (a queue still filling) is retried with twice the micro-batches
    while all tries together simulate less than half of `micro`, STEADY_TRIES at most."""
    spent = 0
    for _ in range(STEADY_TRIES):
        if short + period >= micro or (spent and 2 * (spent + 2 * short + period) > micro):
            return None
        spent += 2 * short + period
        a = simulated.measure(*simulated(short))
        b = simulated.measure(*simulated(short + period))
        sp = splice(a.plan, a.trace, b.plan, b.trace, insertions)
        ext = None if sp is None else extend(a, b, sp, (micro - short) // period,
                                              simulated.cluster.capacity_bytes)
        if ext is not None:
            return ext
        short += period * -(-short // period)
    return None


COLLAPSE_ROUNDS = 8  # simulations that may cut collapsed buckets before giving up on them


class _Runs:
    """Simulates the scenario's iteration for a number of micro-batches (None: the
    scenario's), identical consecutive buckets collapsed and cut until no other transfer
    asks for the link inside a block (`engine.blocks`), or one task per bucket when that
    does not settle or saves fewer tasks than the collapsed plan has (the cutting takes a
    second simulation); `events` adds up the events of every simulation it ran."""

    def __init__(self, lowered: Callable[[int | None, Cuts | None], Plan],
                 cluster: Cluster, reports: bool = True) -> None:
        self.lowered, self.cluster, self.reports = lowered, cluster, reports
        self.events = 0

    def measure(self, plan: Plan, trace: Trace) -> Measured:
        return measure(plan, trace, self.cluster, self.reports)

    def _run(self, micro: int | None, cuts: Cuts | None) -> tuple[Plan, Trace]:
        return self._run_plan(self.lowered(micro, cuts))

    def _run_plan(self, plan: Plan) -> tuple[Plan, Trace]:
        trace = run(plan)
        self.events += trace.events
        return plan, trace

    def __call__(self, micro: int | None) -> tuple[Plan, Trace]:
        cuts: Cuts = {}
        plan = self.lowered(micro, cuts)
        saved = sum(plan.tasks[tid].units - 1 for tid, _ in plan.blocks)
        if saved <= len(plan.tasks):  # a cutting simulation would cost more than it saves
            return self._run(micro, None) if saved else self._run_plan(plan)
        for _ in range(COLLAPSE_ROUNDS):
            plan, trace = self._run_plan(plan) if not cuts else self._run(micro, cuts)
            more = cuts_needed(plan, trace)
            if more == {}:
                return plan, trace
            if more is None:
                break
            cuts = {k: tuple(sorted({*cuts.get(k, ()), *more.get(k, ())}))
                    for k in {**cuts, **more}}
        return self._run(micro, None)


def simulate(scenario: Scenario, hw: Any, fidelity: str = "representative", *,
             costs: CostModel | None = None, steady: bool | None = None,
             max_events: int = DEFAULT_MAX_EVENTS, collapse: bool = True,
             reports: bool = True, two_point: bool = False) -> SimResult:
    """Simulate one training iteration of `scenario` on hardware profile `hw`.

    `costs` replaces the cost model of `simulator.cost` (tests inject closed forms);
    `fidelity='full'` simulates every device instead of one per pipeline stage; `steady`:
    extend a shortened steady state (True: whenever the schedule has one and the scenario
    has micro-batches to spare; False: never; None: when `budget.shortened_run` says so).
    When the shortened runs were chosen by the budget but do not repeat exactly, simulating
    every micro-batch is refused (InputError) above `max_events` events. `collapse`: run
    identical consecutive gradient buckets as one task (`_Runs`); False: one each.
    `two_point=True` (with steady=True) extends GPipe's steady state too (two insertion
    points, `engine.steady`). `reports=False` leaves out what only the reports show
    (critical_path and jitter are None; a sweep's rows do not hold them); every other
    figure is the same."""
    t0 = time.perf_counter()
    _check(scenario, fidelity)
    fw = framework_for(scenario, hw)
    host_kernel_s = fw.software.host_us_per_kernel * 1e-6
    if costs is not None and costs.hardware is not None and not costs.host_kernel_s:
        # a profile's own cost model handed in (a sweep's memoised one) takes the stack's
        # launch cost as `run` does; closed forms injected by tests (no hardware) stay as given
        costs = replace(costs, host_kernel_s=eager_launch_s(hw, host_kernel_s),
                        moe_host_kernel_s=eager_launch_s(hw, fw.moe_host_costs[0]),
                        moe_dispatcher_kernels=fw.moe_host_costs[1],
                        moe_loop_s=eager_loop_s(hw, fw.moe_host_costs[2]),
                        graph_launch_s=fw.graph_launch_s)
    injected = costs
    costs = costs or run_costs(hw, fw)
    prog, mesh, model, hardware = run_program(scenario, hw, fw)
    fused = with_auto_fusion(scenario, fw, prog.grad_bytes)
    cluster = Cluster(scenario, hw, fidelity, mesh, injected,
                      (host_kernel_s, fw.moe_host_costs, fw.graph_launch_s))
    split = split_for(fused, prog, rank_mesh(fused, mesh), costs)  # once, for every lowering

    def lower_with(device_costs: Any, micro: int | None = None,
                   cuts: Cuts | None = None) -> Plan:
        return lower(fused, prog, costs, fidelity, mesh, device_costs, micro, cuts, split)

    def lowered(micro: int | None, cuts: Cuts | None) -> Plan:
        return with_framework_memory(
            lower_with(cluster.device_costs, micro, cuts if collapse else None),
            scenario, fw, prog, mesh, hw)

    simulated = _Runs(lowered, cluster, reports)
    got = None
    window = _window(scenario, fidelity, steady, two_point)
    if window is not None:
        got = _steady(simulated, scenario.grad_accum_steps, *window)
        if got is None and steady is None:
            check_budget(estimate_every_micro_batch(scenario, fidelity), max_events,
                         scenario.source, "events to simulate", "--max-events")
    if got is None:
        got = simulated.measure(*simulated(None))
    got = replace(got, trace=replace(got.trace, events=simulated.events))
    return SimResult(
        scenario=scenario, fidelity=fidelity, program=prog, plan=got.plan, trace=got.trace,
        iteration_time_s=got.iteration_time_s, slowest_device=got.slowest,
        breakdown_s=tuple(got.breakdown_s.items()), memory=got.memory,
        capacity_bytes=cluster.capacity_bytes(got.memory.device),
        comm_device=got.comm_device, comm_bytes=tuple(got.comm_bytes.items()),
        model_flops=model, hardware_flops=hardware,
        peak_flops_per_s=cluster.mean_peak_flops_per_s(scenario.model.dtype),
        wall_s=time.perf_counter() - t0, framework=fw, critical_path=got.pace,
        jitter=jitter_report(cluster, lower_with) if reports else None, steady=got.steady,
        hardware=hw.name, host_capacity_bytes=hw.host_memory_bytes,
        nvme_capacity_bytes=hw.nvme_bytes)


# GPipe (Huang et al. 2019, Fig. 2c: all forwards, then all backwards) has no period that
# one insertion point describes (lower.pipeline.STEADY_PERIODS leaves it out, so `run`
# simulates it in full), but a micro-batch more inserts one forward and one backward on
# every stage (engine.steady, insertions=2). A sweep (two_point=True) extends it from runs of
# GPIPE_SHORT and GPIPE_SHORT + 1 micro-batches; runs that do not repeat yet (a stage whose
# memory peak is still a transfer's buffer rather than the activations it holds, which
# `_grown_peak` asks for) are retried with twice as many (`_steady`).
GPIPE_SHORT = STEADY_PERIODS_KEPT


def _window(scenario: Scenario, fidelity: str, steady: bool | None, two_point: bool = False
            ) -> tuple[int, int, int] | None:
    """(shortened micro-batches, period, insertion points) to try, per the `steady` and
    `two_point` arguments of simulate."""
    if steady is False:
        return None
    if steady is None:
        window = shortened_run(scenario, fidelity)
        return None if window is None else (*window, 1)
    p, micro = scenario.parallel, scenario.grad_accum_steps
    window = steady_window(p.schedule, p.pipeline, micro, p.virtual_stages)
    if window is not None:
        return (*window, 1)
    if two_point and p.schedule == "gpipe" and micro > 2 * GPIPE_SHORT + 1:
        return GPIPE_SHORT, 1, 2
    return None
