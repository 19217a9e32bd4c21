"""Metrics of a simulated iteration, as pure functions of the Plan and its Trace.

- iteration time: the latest end of any task (the slowest device).
- breakdown (CONTRACT section 3) along the compute stream of the slowest device: busy time
  is `compute` (fwd/bwd kernels), `recompute`, `optimizer`, and `comm_exposed` (the
  critical-path tensor-parallel collectives inside compute tasks, `Task.comm_s`, and the time
  kernels ran slower beside the device's own transfers, engine.core); an idle gap
  before a task is charged by walking back the chain of what it waited for
  (`Trace.blocker`): the time a transfer ran (or waited for its link or its peers) is
  comm_exposed, or offload_exposed for host copies (nvme_exposed for NVMe reads and writes
  of the optimizer states); the rest of the gap, spent waiting for
  another stage's compute, is bubble. What the device does after its compute stream ends
  (the parameter all-gather) is comm_exposed. The parts add up to the iteration time exactly.
- memory: each device's allocation timeline (model states at t=0, then task allocs at
  their start and frees at their end; frees first at equal times).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from simulator.engine.tasks import CATEGORIES as TASK_CATEGORIES
from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace

# the tasks' categories and the stack's own constant memory (simulator.lower.framework_apply)
CATEGORIES: tuple[str, ...] = (*TASK_CATEGORIES, "framework_overhead")

__all__ = ["BREAKDOWN_KEYS", "MemoryPeak", "iteration_time", "slowest_device", "breakdown",
           "by_device", "device_end", "memory_timeline", "memory_peak", "device_peak",
           "pick_peak", "device_comm", "device_comms", "comm_volumes"]

BREAKDOWN_KEYS = ("compute", "recompute", "comm_exposed", "bubble", "offload_exposed",
                  "optimizer", "nvme_exposed")
_BUSY = {"fwd": "compute", "bwd": "compute", "recompute": "recompute",
         "optimizer": "optimizer", "offload": "offload_exposed", "comm": "comm_exposed",
         "nvme": "nvme_exposed"}


def iteration_time(trace: Trace) -> float:
    return max(trace.end, default=0.0)


def by_device(plan: Plan) -> dict[int, list[Task]]:
    """The tasks of each simulated device, in tid order."""
    out: dict[int, list[Task]] = {d: [] for d in plan.devices}
    for task in plan.tasks:
        out[task.device].append(task)
    return out


def device_end(plan: Plan, trace: Trace) -> dict[int, float]:
    """Latest end of any task, per simulated device: the end of the last task of one of
    its streams (a stream runs its tasks one after another)."""
    out = dict.fromkeys(plan.devices, 0.0)
    end = trace.end
    for device, _, tids in plan.streams:
        if tids and end[tids[-1]] > out[device]:
            out[device] = end[tids[-1]]
    return out


def slowest_device(plan: Plan, trace: Trace) -> int:
    """The simulated device that finishes last (lowest rank among equals)."""
    ends = device_end(plan, trace)
    return max(plan.devices, key=lambda d: (ends[d], -d))


def _kind(task: Task) -> str:
    """What a wait for `task` is charged to (a server's update is the optimizer's time)."""
    return {"offload": "offload_exposed", "optimizer": "optimizer",
            "nvme": "nvme_exposed"}.get(task.phase, "comm_exposed")


def _charge_wait(parts: dict[str, float], plan: Plan, trace: Trace, prev: dict[int, int],
                 blocker: int, ready: float, start: float) -> None:
    """Charge the idle gap [ready, start] of a compute stream by walking back the chain of
    blockers: a transfer's running time (and its wait for a link or its peers) is charged
    to its kind; reaching a compute task on another device means waiting for that device:
    bubble."""
    until, b, kind = start, blocker, "comm_exposed"
    while b >= 0 and until > ready:
        task = plan.tasks[b]
        if task.stream == "compute":
            parts["bubble"] += until - ready
            return
        kind = _kind(task)
        lo = max(trace.start[b], ready)
        parts[kind] += until - lo
        until, nb = lo, trace.blocker[b]
        if nb < 0:  # it waited for the task before it on its own stream
            nb = prev.get(b, -1)
        if nb >= 0:  # from its blocker's end to its start it waited for a link or peers
            lo = max(min(trace.end[nb], until), ready)
            parts[kind] += until - lo
            until = lo
        b = nb
    if until > ready:
        parts[kind] += until - ready  # a link or a rendezvous held the first transfer


def breakdown(plan: Plan, trace: Trace, device: int,
              end: float | None = None) -> dict[str, float]:
    """Seconds per BREAKDOWN_KEYS along `device`'s compute stream (see module docstring)."""
    parts = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    tids = next(t for d, name, t in plan.streams if d == device and name == "compute")
    prev = {b: a for _, name, ts in plan.streams if name != "compute"
            for a, b in zip(ts, ts[1:])}
    clock = 0.0
    slowed = bool(plan.slowdown) and plan.slowdown[plan.devices.index(device)] > 0
    for tid in tids:
        task = plan.tasks[tid]
        _charge_wait(parts, plan, trace, prev, trace.blocker[tid], clock, trace.start[tid])
        parts[_BUSY[task.phase]] += task.duration_s - task.comm_s
        # its critical-path collectives, and the time it ran slower beside the device's own
        # communication (engine.core: overlap is not free)
        parts["comm_exposed"] += task.comm_s + (
            max(0.0, trace.end[tid] - trace.start[tid] - task.duration_s) if slowed else 0.0)
        clock = trace.end[tid]
    if end is None:
        end = device_end(plan, trace)[device]
    parts["comm_exposed"] += max(0.0, end - clock)
    return parts


def memory_timeline(plan: Plan, trace: Trace, device: int,
                    tasks: list[Task] | None = None) -> tuple[list[float], list[dict]]:
    """(times, bytes per category after each change) of one device, starting at t=0 with
    its model states. `tasks`: the device's tasks when the caller has them grouped."""
    index = plan.devices.index(device)
    current = dict.fromkeys(CATEGORIES, 0.0)
    for cat, nbytes in plan.static_memory[index]:
        current[cat] += nbytes
    changes: list[tuple[float, int, int, str, float]] = []
    if tasks is None:
        tasks = [t for t in plan.tasks if t.device == device]
    for task in tasks:
        for cat, nbytes in task.alloc:
            changes.append((trace.start[task.tid], 1, task.tid, cat, nbytes))
        for cat, nbytes in task.free:
            changes.append((trace.end[task.tid], 0, task.tid, cat, -nbytes))
    changes.sort()
    times, states = [0.0], [dict(current)]
    for when, _, _, cat, delta in changes:
        current[cat] += delta
        times.append(when)
        states.append(dict(current))
    return times, states


@dataclass(frozen=True)
class MemoryPeak:
    """The largest peak over the devices: which device, when, and its composition."""

    device: int
    time_s: float
    peak_bytes: float
    by_category: tuple[tuple[str, float], ...]


def device_peak(plan: Plan, trace: Trace, device: int, tasks: list[Task]
                ) -> tuple[MemoryPeak, int]:
    """The first time `device` reaches its highest allocation, its composition then, and
    the task whose allocation or free reached it (-1: the model states at t=0)."""
    index = plan.devices.index(device)
    slot = {c: i for i, c in enumerate(CATEGORIES)}
    current = [0.0] * len(CATEGORIES)
    for cat, nbytes in plan.static_memory[index]:
        current[slot[cat]] += nbytes
    changes = []
    start, end = trace.start, trace.end
    for task in tasks:
        for cat, nbytes in task.alloc:
            changes.append((start[task.tid], 1, task.tid, slot[cat], nbytes))
        for cat, nbytes in task.free:
            changes.append((end[task.tid], 0, task.tid, slot[cat], -nbytes))
    changes.sort()
    # the running total (added up in the same order as the composition), its first maximum
    totals = list(accumulate([c[4] for c in changes], initial=sum(current)))
    best = max(totals)
    at = totals.index(best)
    for _, _, _, i, delta in changes[:at]:
        current[i] += delta
    when, tid = (changes[at - 1][0], changes[at - 1][2]) if at else (0.0, -1)
    return MemoryPeak(device, when, best, tuple(zip(CATEGORIES, current))), tid


def pick_peak(peaks: list[MemoryPeak], capacity: Callable[[int], float] | None = None
              ) -> MemoryPeak:
    """The highest of the devices' `peaks` (the first among equals); with `capacity` (bytes
    of each device, where they differ), the peak that fills its device the most."""
    best: MemoryPeak | None = None
    best_fill = 0.0
    for peak in peaks:
        fill = peak.peak_bytes / capacity(peak.device) if capacity else peak.peak_bytes
        if best is None or fill > best_fill:
            best, best_fill = peak, fill
    assert best is not None
    return best


def memory_peak(plan: Plan, trace: Trace, grouped: dict[int, list[Task]],
                capacity: Callable[[int], float] | None = None) -> MemoryPeak:
    """The highest allocation peak over the simulated devices (lowest rank among equals);
    with `capacity` (bytes of each device, where they differ), the peak that fills its
    device the most."""
    return pick_peak([device_peak(plan, trace, d, grouped[d])[0] for d in plan.devices],
                     capacity)


def device_comms(plan: Plan, grouped: dict[int, list[Task]]) -> dict[int, dict[str, float]]:
    """`device_comm` of every simulated device."""
    return {d: device_comm(grouped[d]) for d in plan.devices}


def device_comm(tasks: list[Task]) -> dict[str, float]:
    """Bytes per collective kind in `tasks` (nccl-tests buffer sizes)."""
    out: dict[str, float] = {}
    for task in tasks:
        for coll, nbytes in task.comm:
            out[coll] = out.get(coll, 0.0) + nbytes
    return out


def comm_volumes(plan: Plan, grouped: dict[int, list[Task]],
                 per: dict[int, dict[str, float]] | None = None
                 ) -> tuple[int, dict[str, float]]:
    """(device, its bytes per collective) for the device that communicates the most;
    `per`: `device_comms` when the caller has it."""
    if per is None:
        per = device_comms(plan, grouped)
    device = max(plan.devices, key=lambda d: (sum(per[d].values()), -d))
    return device, per[device]
