"""Chrome / Perfetto trace JSON of a simulated iteration (the Trace Event Format,
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
one process per simulated device, one thread per stream, times in microseconds.
Open in https://ui.perfetto.dev or chrome://tracing.

- "X" complete events: every task of the plan on its stream's thread.
- "X" slices on a `tp collectives` thread: the tensor-parallel collectives a compute task
  runs on its critical path (`Task.comm_s`, Megatron's all-reduce / all-gather /
  reduce-scatter around its GEMMs). The plan keeps their total per task, not when each one
  runs inside it, so the slice starts with its task and lasts the total (cat `tp_comm`).
- "C" counter events: allocated memory per device by category (a stacked `memory (GB)`
  track per process), from report.metrics.memory_timeline.
- "s"/"f" flow events: an arrow from each pipeline send to the compute task of the next
  stage that waited for it (binding point "e": the enclosing slice at the arrow's end).
- with `parallel.comm_subgraph` given (`lower.comm_graph`): every communication slice
  has args `comm_op` (its operator class: kind, group, bytes) and `compiled_as` (`subgraph
  call` under reuse, else `own operator`), and `otherData.comm_subgraph` the counts and the
  graph-build time.

Devices whose tasks are identical (same names, streams, starts and durations: the
data-parallel replicas of a full-fidelity run) are written once, labelled with how many they
stand for, and at most MAX_DEVICES distinct devices are written; `otherData.devices` says so.
A 1024-device full-fidelity GPT-3 trace was 229 MB; it is 3.5 MB this way.
"""

from __future__ import annotations

from typing import Any

from simulator.engine.tasks import STREAMS
from simulator.report.metrics import memory_timeline

__all__ = ["chrome_trace", "TP_THREAD", "MAX_DEVICES"]

_US = 1e6
MAX_DEVICES = 256  # distinct devices written; more makes a trace the viewers cannot open
TP_THREAD = "tp collectives"
_TP_TID = len(STREAMS)


def _shown(result: Any) -> tuple[dict[int, int], str]:
    """{device: identical devices it stands for} of the devices written, and a note."""
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
        for j, stream in enumerate((*STREAMS, TP_THREAD)):
            events.append({"name": "thread_name", "ph": "M", "pid": device, "tid": j,
                           "args": {"name": stream}})
    return events


_GROUP = {"dp": "dp", "dp_reduce": "dp", "pp_fwd": "pp", "pp_bwd": "pp"}


def _compiled(task: Any, reuse: bool | None) -> dict[str, Any]:
    """Args of a communication slice under `parallel.comm_subgraph` (None: not given)."""
    if reuse is None or not task.comm:
        return {}
    coll, nbytes = task.comm[0]
    group = _GROUP.get(task.stream, "tp")
    return {"comm_op": f"{coll}[{group}] {nbytes / task.units:.0f} B",
            "compiled_as": "subgraph call" if reuse else "own operator"}


def _task_args(task: Any, reuse: bool | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"phase": task.phase}
    if task.micro >= 0:
        args["micro_batch"] = task.micro
    if task.chunk >= 0:
        args["virtual_stage"] = task.chunk
    if task.comm_s:
        args["tp_comm_s"] = task.comm_s
    for coll, nbytes in task.comm:
        args[f"{coll}_bytes"] = nbytes
    if task.phase == "comm":
        args.update(_compiled(task, reuse))
    return args


def _tp_slice(task: Any, ts: float, reuse: bool | None = None) -> dict[str, Any]:
    colls = [c for c, _ in task.comm if c != "send_recv"]
    args: dict[str, Any] = {f"{c}_bytes": b for c, b in task.comm}
    if reuse is not None:
        args["compiled_as"] = "subgraph calls" if reuse else "own operators"
    return {"name": "tp " + "+".join(colls or ["collectives"]), "cat": "tp_comm", "ph": "X",
            "pid": task.device, "tid": _TP_TID, "ts": ts, "dur": task.comm_s * _US,
            "args": args}


def _memory_counters(result: Any, kept: dict[int, int]) -> list[dict[str, Any]]:
    """A "C" event per allocation change of each device, bytes by category in GB."""
    plan, trace = result.plan, result.trace
    grouped: dict[int, list[Any]] = {d: [] for d in plan.devices}
    for task in plan.tasks:
        grouped[task.device].append(task)
    events = []
    for device in kept:
        times, states = memory_timeline(plan, trace, device, grouped[device])
        for when, state in zip(times, states):
            events.append({"name": "memory (GB)", "ph": "C", "pid": device, "ts": when * _US,
                           "args": {c: round(v / 1e9, 6) for c, v in state.items()}})
    return events


def _flows(result: Any, kept: dict[int, int]) -> list[dict[str, Any]]:
    """Flow arrows from each pipeline send to the other device's task that depends on it."""
    plan, trace = result.plan, result.trace
    sends = {t.tid: t for t in plan.tasks if t.name in ("send_fwd", "send_bwd")}
    tid_of = {s: j for j, s in enumerate(STREAMS)}
    events: list[dict[str, Any]] = []
    for task in plan.tasks:
        for dep in task.deps:
            send = sends.get(dep)
            if send is None or send.device == task.device or not (
                    send.device in kept and task.device in kept):
                continue
            flow = len(events) // 2
            events.append({"name": send.name, "cat": "pipeline", "ph": "s", "id": flow,
                           "pid": send.device, "tid": tid_of[send.stream],
                           "ts": trace.start[send.tid] * _US})
            events.append({"name": send.name, "cat": "pipeline", "ph": "f", "bp": "e",
                           "id": flow, "pid": task.device, "tid": tid_of[task.stream],
                           "ts": trace.start[task.tid] * _US})
    return events


def chrome_trace(result: Any) -> dict[str, Any]:
    """The trace as a JSON-ready dict (deterministic: no wall-clock values inside)."""
    plan, trace = result.plan, result.trace
    tid_of = {s: j for j, s in enumerate(STREAMS)}
    kept, note = _shown(result)
    events = _meta(result, kept)
    graph = dict(plan.extras).get("comm_subgraph")
    reuse = graph["reuse"] if graph else None
    for task in plan.tasks:
        if task.device not in kept:
            continue
        ts = trace.start[task.tid] * _US
        name = f"{task.name}{task.micro}" if task.micro >= 0 else task.name
        events.append({"name": name, "cat": task.phase, "ph": "X", "pid": task.device,
                       "tid": tid_of[task.stream], "ts": ts,
                       "dur": (trace.end[task.tid] - trace.start[task.tid]) * _US,
                       "args": _task_args(task, reuse)})
        if task.comm_s > 0 and task.stream == "compute":
            events.append(_tp_slice(task, ts, reuse))
    events += _memory_counters(result, kept) + _flows(result, kept)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"scenario": result.scenario.name, "fidelity": result.fidelity,
                          "devices": note, **({"comm_subgraph": graph} if graph else {})}}
