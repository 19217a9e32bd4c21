"""A simulated iteration as the result reads it (`Measured`), and the exact extension of a
shortened run: from run A and run B (A with one steady-state period more, or for GPipe one
forward and one backward more on every stage), the run of n more periods (`extend`):
times, breakdown, bytes and the critical path grow linearly, the memory peak stays or grows
by one micro-batch's activations, or the extension is refused (None) and the caller
simulates every micro-batch (the module docstring of `simulator.simulation.simulate`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from simulator.engine.steady import Splice
from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace
from simulator.report.critical import pace
from simulator.report.metrics import (
    BREAKDOWN_KEYS,
    MemoryPeak,
    breakdown,
    by_device,
    comm_volumes,
    device_comms,
    device_end,
    device_peak,
    pick_peak,
)
from simulator.simulation.heterogeneous import Cluster, pace_report

__all__ = ["Steady", "Measured", "measure", "extend"]


@dataclass(frozen=True)
class Steady:
    """How a result was extended from two shortened runs: `plan` and `trace` of the
    SimResult are the run of `simulated` + `period` micro-batches; each of `repeats` more
    periods of `period` micro-batches took `period_s`."""

    simulated: int
    period: int
    period_s: float
    repeats: int


@dataclass(frozen=True)
class Measured:
    """What a SimResult reads from a simulated (or extended) iteration."""

    plan: Plan
    trace: Trace
    iteration_time_s: float
    slowest: int
    breakdown_s: dict[str, float]
    memory: MemoryPeak
    comm_device: int
    comm_bytes: dict[str, float]
    pace: dict[str, Any] | None  # None: not asked for (simulate's reports=False)
    steady: Steady | None = None
    # the simulated device with the most kernel time on the critical path, found whether
    # or not the pace report is asked for: extending two short runs that disagree on it is
    # refused either way, so reports=False times exactly what run does
    pacer: int | None = None
    # of a simulated run, for extending it: each device's tasks, bytes per collective,
    # memory peak and the task that reached it
    grouped: dict[int, list[Task]] | None = None
    comms: dict[int, dict[str, float]] | None = None
    peaks: dict[int, tuple[MemoryPeak, int]] | None = None


def measure(plan: Plan, trace: Trace, cluster: Cluster, reports: bool = True) -> Measured:
    grouped = by_device(plan)
    ends = device_end(plan, trace)
    slowest = max(plan.devices, key=lambda d: (ends[d], -d))
    comms = device_comms(plan, grouped)
    comm_dev, comm = comm_volumes(plan, grouped, comms)
    peaks = {d: device_peak(plan, trace, d, grouped[d]) for d in plan.devices}
    report = pace_report(cluster, plan, trace) if reports else None
    pacer = report["simulated_device"] if report is not None else pace(plan, trace).device
    return Measured(plan, trace, ends[slowest], slowest,
                     breakdown(plan, trace, slowest, ends[slowest]),
                     pick_peak([p for p, _ in peaks.values()], cluster.capacity_bytes),
                     comm_dev, comm, report, grouped=grouped, comms=comms, peaks=peaks,
                     pacer=pacer)


def _pace(a: Measured, b: Measured, n: int, time_s: float) -> dict[str, Any] | None:
    """Who set the pace of the extended run: the same device as in both short runs, its
    kernel time and the transfer time on the critical path growing by one period's each
    period; None when not asked for (`extend` refuses runs that disagree on the device)."""
    pa, pb = a.pace, b.pace
    if pa is None or pb is None:
        return None
    out = dict(pb)
    for key in ("compute_on_path_s", "comm_on_path_s", "contention_on_path_s"):
        if key in pb:
            out[key] = pa[key] + n * (pb[key] - pa[key])
    if "contention_on_path_by_link_s" in pb:
        out["contention_on_path_by_link_s"] = _line(
            pa.get("contention_on_path_by_link_s", {}), pb["contention_on_path_by_link_s"], n)
    out["share_of_iteration"] = out["compute_on_path_s"] / time_s if time_s > 0 else 0.0
    return out


def _line(a: dict[Any, float], b: dict[Any, float], n: int) -> dict[Any, float]:
    """a + n (b - a), key by key: a quantity that grows by (b - a) per period."""
    return {k: a.get(k, 0.0) + n * (b.get(k, 0.0) - a.get(k, 0.0)) for k in {**a, **b}}


def _net_bytes(plan: Plan) -> dict[tuple[int, str], float]:
    """Bytes each device still holds per category when its tasks are done."""
    out: dict[tuple[int, str], float] = {}
    get = out.get
    for task in plan.tasks:
        alloc, free = task.alloc, task.free
        if alloc != free:  # a transfer frees the buffer it allocated: nothing held
            dev = task.device
            for cat, nbytes in alloc:
                out[(dev, cat)] = get((dev, cat), 0.0) + nbytes
            for cat, nbytes in free:
                out[(dev, cat)] = get((dev, cat), 0.0) - nbytes
    return out


def _peak(a: Measured, b: Measured, sp: Splice, n: int) -> MemoryPeak | None:
    """The memory peak of the extended run: the same as both short runs' when a period
    leaves no memory behind (each repeats the same allocation levels); None otherwise."""
    pa, pb = a.memory, b.memory
    tol = 1e-9 * max(1.0, pa.peak_bytes)
    net_a, net_b = _net_bytes(a.plan), _net_bytes(b.plan)
    if any(abs(net_a.get(k, 0.0) - net_b.get(k, 0.0)) > tol for k in {**net_a, **net_b}):
        return None
    if pa.device != pb.device or abs(pa.peak_bytes - pb.peak_bytes) > tol:
        return None
    ttol = 1e-9 * max(1.0, b.iteration_time_s)
    if abs(pb.time_s - pa.time_s) <= ttol:
        return pa
    if abs(pb.time_s - pa.time_s - sp.period_s) <= ttol:  # first reached in the cool-down
        return replace(pa, time_s=pa.time_s + n * sp.period_s)
    return None


def _stash(tasks: list[Task], micro: int) -> float:
    """Bytes the forward of micro-batch `micro` leaves allocated (its activations, held
    until its backward), of a device's `tasks`."""
    return sum(sum(n for _, n in t.alloc) - sum(n for _, n in t.free) for t in tasks
               if t.micro == micro and t.phase == "fwd")


def _grown_peak(a: Measured, b: Measured, n: int,
                capacity: Callable[[int], float] | None) -> MemoryPeak | None:
    """The memory peak of GPipe's extended run: on each device, where B's peak is A's one
    (the same task, or its copy a micro-batch on) grown by exactly one micro-batch's
    activations, each further micro-batch adds them again and no other moment of the run
    grows faster (each holds at most every stash), so the peak stays at that task, its
    time moving as B's did from A's; None otherwise."""
    assert a.peaks is not None and b.peaks is not None and b.grouped is not None
    gb = b.grouped
    peaks = []
    for d in b.plan.devices:
        (pa, xa), (pb, xb) = a.peaks[d], b.peaks[d]
        ta, tb = a.plan.tasks[xa], b.plan.tasks[xb]
        grow = pb.peak_bytes - pa.peak_bytes
        stash = _stash(gb[d], a.plan.micro_batches)
        if (min(xa, xb) < 0 or ta[1:5] != tb[1:5] or tb.micro - ta.micro not in (0, 1)
                or not stash > 0 or abs(grow - stash) > 1e-9 * pb.peak_bytes):
            return None
        parts = _line(dict(pa.by_category), dict(pb.by_category), n)
        peaks.append(MemoryPeak(d, pa.time_s + n * (pb.time_s - pa.time_s),
                                pa.peak_bytes + n * grow,
                                tuple((c, parts[c]) for c, _ in pa.by_category)))
    return pick_peak(peaks, capacity)


def _breakdown(m: Measured, device: int, end: float) -> dict[str, float]:
    """`breakdown` of `device` in run m (the one `measure` took when it is m's slowest)."""
    if device == m.slowest and end == m.iteration_time_s:
        return m.breakdown_s
    return breakdown(m.plan, m.trace, device, end)


def extend(a: Measured, b: Measured, sp: Splice, n: int,
            capacity: Callable[[int], float] | None = None) -> Measured | None:
    """The run of n more periods than A, from A and B = A with one period inserted."""
    peak = _peak(a, b, sp, n) if sp.middle_s is None else _grown_peak(a, b, n, capacity)
    ends_a, ends_b = device_end(a.plan, a.trace), device_end(b.plan, b.trace)
    ends = _line(ends_a, ends_b, n)
    slowest = max(b.plan.devices, key=lambda d: (ends[d], -d))
    if peak is None or a.pacer != b.pacer:
        return None
    pace = _pace(a, b, n, ends[slowest])
    parts = _line(_breakdown(a, slowest, ends_a[slowest]),
                  _breakdown(b, slowest, ends_b[slowest]), n)
    assert a.comms is not None and b.comms is not None
    comm = {d: _line(a.comms[d], b.comms[d], n) for d in b.plan.devices}
    comm_dev = max(b.plan.devices, key=lambda d: (sum(comm[d].values()), -d))
    steady = Steady(a.plan.micro_batches, sp.micro_period, sp.period_s, n)
    return Measured(b.plan, b.trace, ends[slowest], slowest,
                     {k: parts[k] for k in BREAKDOWN_KEYS}, peak, comm_dev,
                     {k: comm[comm_dev][k] for k in b.comms[comm_dev]}, pace, steady,
                     pacer=b.pacer)
