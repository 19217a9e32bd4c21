"""Chrome / Perfetto trace JSON of a simulated iteration (the Trace Event Format, "X"
complete events): one process per simulated device, one thread per stream, times in us.
Open in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from simulator.schedule.tasks import STREAMS

__all__ = ["chrome_trace", "MAX_DEVICES"]

_US = 1e6
MAX_DEVICES = 256  # distinct devices written; more makes a trace the viewers cannot open


def _meta(result: Any, kept: dict[int, int]) -> list[dict[str, Any]]:
    plan = result.plan
    events: list[dict[str, Any]] = []
    for i, device in enumerate(plan.devices):
        if device not in kept:
            continue
        label = f"device {device} (stage {plan.stage_of[i]}"
        label += f", stands for {plan.represents[i]}" if plan.represents[i] > 1 else ""
        label += f", {kept[device]} identical devices" if kept[device] > 1 else ""
        label += ")"
        events.append({"name": "process_name", "ph": "M", "pid": device, "tid": 0,
                       "args": {"name": label}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": device, "tid": 0,
                       "args": {"sort_index": i}})
        for j, stream in enumerate(STREAMS):
            events.append({"name": "thread_name", "ph": "M", "pid": device, "tid": j,
                           "args": {"name": stream}})
    return events


def _shown(result: Any) -> tuple[dict[int, int], str]:
    """{device: identical devices it stands for} of the devices written, and a note.

    Devices whose tasks have the same names, streams, starts and durations are written once
    (a full-fidelity run of a large cluster repeats each data-parallel replica); past
    MAX_DEVICES distinct ones the rest are left out and the note says how many."""
    plan, trace = result.plan, result.trace
    sig: dict[int, list[tuple]] = {d: [] for d in plan.devices}
    for task in plan.tasks:
        sig[task.device].append((task.name, task.micro, task.stream, trace.start[task.tid],
                                 task.duration_s))
    first: dict[tuple, int] = {}
    count: dict[int, int] = {}
    for d in plan.devices:
        rep = first.setdefault(tuple(sig[d]), d)
        count[rep] = count.get(rep, 0) + 1
    kept = dict(list(count.items())[:MAX_DEVICES])
    left = len(count) - len(kept)
    note = (f"{len(plan.devices)} simulated devices written as {len(kept)} distinct ones"
            + (f"; {left} distinct devices left out (at most {MAX_DEVICES} are written)"
               if left else ""))
    return kept, note


def chrome_trace(result: Any) -> dict[str, Any]:
    """The trace as a JSON-ready dict (deterministic: no wall-clock values inside)."""
    plan, trace = result.plan, result.trace
    tid_of = {s: j for j, s in enumerate(STREAMS)}
    kept, note = _shown(result)
    events = [e for e in _meta(result, kept) if e["pid"] in kept]
    for task in plan.tasks:
        if task.device not in kept:
            continue
        args: dict[str, Any] = {"phase": task.phase}
        if task.micro >= 0:
            args["micro_batch"] = task.micro
        if task.chunk >= 0:
            args["virtual_stage"] = task.chunk
        if task.comm_s:
            args["tp_comm_s"] = task.comm_s
        for coll, nbytes in task.comm:
            args[f"{coll}_bytes"] = nbytes
        name = f"{task.name}{task.micro}" if task.micro >= 0 else task.name
        events.append({"name": name, "cat": task.phase, "ph": "X", "pid": task.device,
                       "tid": tid_of[task.stream], "ts": trace.start[task.tid] * _US,
                       "dur": task.duration_s * _US, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"scenario": result.scenario.name, "fidelity": result.fidelity,
                          "devices": note}}
