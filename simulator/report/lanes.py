"""The lanes of the report's timeline: one per (pipeline stage, stream kind), whatever the
number of ranks, so that the timeline of 8 and of 8,192 devices reads alike.

Devices of one pipeline stage run the same program (data, tensor, context and expert
parallel ranks of that stage); each stage is drawn from its device that finishes last (the
one that sets the stage's pace), one lane per stream kind the plan uses anywhere
(`engine.tasks.STREAMS`: compute, pipeline sends, data-parallel reductions, offload
copies, ...): stages x kinds lanes. Consecutive tasks of one lane with the same name,
phase and micro-batch that touch in time are one span (a forward over a stage's layers is
one bar, its task count in the hover).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.engine.tasks import STREAMS

__all__ = ["Span", "Lane", "timeline_lanes", "KIND_LABELS"]

# how a stream kind is called in the report
KIND_LABELS: dict[str, str] = {
    "compute": "compute", "pp_fwd": "pipeline send (fwd)", "pp_bwd": "pipeline send (bwd)",
    "dp": "data-parallel comm", "dp_reduce": "data-parallel reduce",
    "offload": "offload host-to-device", "ps_server": "parameter server",
    "offload_d2h": "offload device-to-host", "nvme": "NVMe swap (optimizer states)"}


@dataclass(frozen=True)
class Span:
    """One bar: `tasks` consecutive tasks of one name, phase and micro-batch."""

    start: float
    end: float
    name: str
    phase: str
    micro: int
    tasks: int
    comm_s: float  # of it, critical-path (tensor-parallel) collectives inside compute tasks


@dataclass(frozen=True)
class Lane:
    stage: int
    stream: str
    device: int  # the stage's device drawn (its last to finish)
    represents: int  # real devices of the stage that device stands for (1 under full)
    spans: tuple[Span, ...]

    @property
    def label(self) -> str:
        return f"stage {self.stage} · {KIND_LABELS.get(self.stream, self.stream)}"


def _stage_devices(plan: Any, trace: Any) -> dict[int, int]:
    """{stage: its simulated device whose last task ends latest} (the lowest rank on ties)."""
    end: dict[int, float] = {}
    for task in plan.tasks:
        end[task.device] = max(end.get(task.device, 0.0), trace.end[task.tid])
    best: dict[int, int] = {}
    for device, stage in zip(plan.devices, plan.stage_of):
        if stage not in best or end.get(device, 0.0) > end.get(best[stage], 0.0):
            best[stage] = device
    return dict(sorted(best.items()))


def _merged(tasks: list[Any], trace: Any, touch: float) -> tuple[Span, ...]:
    spans: list[Span] = []
    for t in sorted(tasks, key=lambda t: (trace.start[t.tid], t.tid)):
        start, end = trace.start[t.tid], trace.end[t.tid]
        last = spans[-1] if spans else None
        if (last is not None and (last.name, last.phase, last.micro) == (t.name, t.phase,
                                                                          t.micro)
                and start - last.end <= touch):
            spans[-1] = Span(last.start, max(last.end, end), t.name, t.phase, t.micro,
                             last.tasks + 1, last.comm_s + t.comm_s)
        else:
            spans.append(Span(start, end, t.name, t.phase, t.micro, 1, t.comm_s))
    return tuple(spans)


def timeline_lanes(plan: Any, trace: Any) -> tuple[Lane, ...]:
    """Stages x stream kinds lanes (stage-major, kinds in STREAMS order), each with the
    spans of its stage's drawn device on that stream (none where that device has no task
    on it)."""

    shown = _stage_devices(plan, trace)
    used = {t.stream for t in plan.tasks if t.duration_s > 0}
    kinds = [s for s in STREAMS if s in used] + sorted(used - set(STREAMS))
    drawn = set(shown.values())
    by_lane: dict[tuple[int, str], list[Any]] = {}
    for t in plan.tasks:
        if t.device in drawn and t.duration_s > 0:
            by_lane.setdefault((t.device, t.stream), []).append(t)
    horizon = max(trace.end, default=0.0)
    touch = 1e-9 * horizon  # spans closer than this are one
    represents = dict(zip(plan.devices, plan.represents))
    stage_size = {s: sum(represents[d] for d, st in zip(plan.devices, plan.stage_of)
                         if st == s) for s in shown}
    return tuple(Lane(stage, kind, device, stage_size[stage],
                      _merged(by_lane.get((device, kind), []), trace, touch))
                 for stage, device in shown.items() for kind in kinds)
