"""Chrome / Perfetto trace JSON of a simulated iteration (the Trace Event Format, "X"
complete events): one process per simulated device, one thread per stream, times in us.
Open in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from simulator.schedule.tasks import STREAMS

__all__ = ["chrome_trace"]

_US = 1e6


def _meta(result: Any) -> list[dict[str, Any]]:
    plan = result.plan
    events: list[dict[str, Any]] = []
    for i, device in enumerate(plan.devices):
        label = f"device {device} (stage {plan.stage_of[i]}"
        label += f", stands for {plan.represents[i]})" if plan.represents[i] > 1 else ")"
        events.append({"name": "process_name", "ph": "M", "pid": device, "tid": 0,
                       "args": {"name": label}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": device, "tid": 0,
                       "args": {"sort_index": i}})
        for j, stream in enumerate(STREAMS):
            events.append({"name": "thread_name", "ph": "M", "pid": device, "tid": j,
                           "args": {"name": stream}})
    return events


def chrome_trace(result: Any) -> dict[str, Any]:
    """The trace as a JSON-ready dict (deterministic: no wall-clock values inside)."""
    plan, trace = result.plan, result.trace
    tid_of = {s: j for j, s in enumerate(STREAMS)}
    events = _meta(result)
    for task in plan.tasks:
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
            "otherData": {"scenario": result.scenario.name, "fidelity": result.fidelity}}
