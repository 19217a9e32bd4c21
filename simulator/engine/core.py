"""The SimPy model: `run(plan) -> Trace`. The only module of shardsim that imports simpy.

Each (device, stream) of the plan is one generator process that runs its tasks in order. A
task starts when its stream is free, its dependencies have finished, every member of its
collective has arrived (rendezvous, full fidelity only), and the link it needs is free.

Links are shared FIFO servers, one per device and kind: 'fabric' (the device's port into
the node's NVLink/HCCS switch) and 'nic' (the device's share of its node's NICs, which the
cost model prices). A transfer holds its link for its whole duration, so a device's
pipeline sends and its gradient buckets queue behind one another on the same NIC. A link is
kept as the time it next falls free: reserving it needs no SimPy event, and requests are
served in the order they are made, which SimPy's (time, priority, sequence) heap makes
deterministic.

With `Plan.link_sharing = 'fair'` a link is shared instead of queued (processor sharing,
the max-min fair share of equal flows: Bertsekas & Gallager, "Data Networks", 2nd ed.,
Sec. 6.5.2): every transfer starts as soon as it may, and while n of them hold one link each
progresses at 1/n of its rate, so two equal flows that start together both end after twice
the time one takes alone. A flow's end is recomputed whenever a flow joins or leaves its
link (the others are interrupted, as compute is under a slowdown below).

Events are created lazily: a finished dependency costs nothing to wait for, and a task of
zero duration schedules no timeout, so the event count stays close to one per task.

Overlap is not free where the profile says so (`Plan.slowdown`, the hardware's
`efficiency.overlap_compute_slowdown` s): while a collective or pipeline transfer of a
device runs on one of its communication streams, the kernels of its compute stream progress
at 1/(1+s) of their rate (the communication kernels hold SMs and memory bandwidth: Lee et
al. 2025, arXiv 2507.03114, measure an 18.9% mean slowdown of overlapped compute on A100
and H100). A running compute task is interrupted when the device's communication starts or
stops and resumes at the new rate with the work it has left, so it ends at
start + work + s * (overlapped seconds at the slow rate). Those streams then record when
each transfer starts (one more event where it waits for its link).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import simpy

from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace

__all__ = ["run", "simpy_event_rate"]

# streams whose tasks are communication kernels on the device (NCCL/HCCL collectives and
# pipeline sends), and the compute-stream phases that are kernels they slow down
COMM_STREAMS = frozenset({"dp", "dp_reduce", "pp_fwd", "pp_bwd"})
KERNEL_PHASES = frozenset({"fwd", "bwd", "recompute", "optimizer"})


class _Model:
    """Per-simulation state: the clock, finish times, waiters, links, rendezvous."""

    def __init__(self, plan: Plan) -> None:
        n = len(plan.tasks)
        self.plan = plan
        self.env = simpy.Environment()
        # events scheduled: each process's start and end, every timeout and succeed (the
        # only ways this model schedules one), counted here rather than by overriding
        # Environment.schedule, which every event would pay a Python call for
        self.scheduled = 2 * len(plan.streams)
        self.done: list[float | None] = [None] * n
        self.ready = [0.0] * n
        self.start = [0.0] * n
        self.blocker = [-1] * n
        self.waiters: dict[int, simpy.Event] = {}
        self.link_free: dict[tuple[int, str], float] = {}
        self.arrivals: dict[int, list] = {}
        # overlap slowdown per device (empty: none), communication tasks running per
        # device, and the compute task running on each: [process, work left, since, rate]
        self.slowdown = {d: s for d, s in zip(plan.devices, plan.slowdown) if s > 0}
        self.talking: dict[int, int] = {}
        self.running: dict[int, list] = {}
        # fair link sharing: the flows holding each link, [process, work left, since]
        self.fair = plan.link_sharing == "fair"
        self.flows: dict[tuple, list[list[Any]]] = {}
        # NICs shared by the devices that use them (fair): device -> (resource, transfers
        # each of its own stands for, how much slower than alone it was priced); resource ->
        # device-alone transfers it carries at full rate at once
        self.nic: dict[int, tuple[tuple, int, float]] = {
            d: (("nic", r), w, k) for d, r, w, k in zip(plan.devices, plan.nic_of,
                                                         plan.nic_weight, plan.nic_priced)
            if self.fair and r >= 0}
        self.slots: dict[tuple, float] = {("nic", r): s for r, s in plan.nic_slots}

    def _rendezvous(self, task: Task) -> Generator:
        """Wait until all group_size members of the collective have arrived."""
        entry = self.arrivals.setdefault(task.group, [0, self.env.event()])
        entry[0] += 1
        if entry[0] == task.group_size:
            self.scheduled += 1
            entry[1].succeed()
            del self.arrivals[task.group]
        else:
            yield entry[1]

    def stream(self, tids: tuple[int, ...]) -> Generator:
        # the hot loop of every simulation: attributes bound to locals, no helper call
        # where nothing waits (each task records when it was ready and which dependency,
        # finishing last after that, held it back: -1 for none)
        env, tasks, done, ready = self.env, self.plan.tasks, self.done, self.ready
        link_free, waiters, blocker, starts = self.link_free, self.waiters, self.blocker, \
            self.start
        timeout, event_of = env.timeout, env.event
        scheduled = 0
        for tid in tids:
            task = tasks[tid]
            latest = ready[tid] = env.now
            deps = task.deps
            if deps:
                for dep in deps:  # wait for each one not finished yet
                    if done[dep] is None:
                        event = waiters.get(dep)
                        if event is None:
                            event = waiters[dep] = event_of()
                        yield event
                held = -1
                for dep in deps:
                    if done[dep] > latest:  # type: ignore[operator]
                        latest, held = done[dep], dep  # type: ignore[assignment]
                blocker[tid] = held
            if task.group >= 0:
                yield from self._rendezvous(task)
            now = start = env.now
            duration = task.duration_s
            if task.link and self.fair:
                starts[tid] = now
                done[tid] = yield from self._flow(task, duration)
                event = waiters.pop(tid, None)
                if event is not None:
                    scheduled += 1
                    event.succeed()
                continue
            if task.link:
                key = (task.device, task.link)
                start = max(start, link_free.get(key, 0.0))
                link_free[key] = start + duration
            starts[tid] = start
            end = start + duration
            if task.device in self.slowdown and end > now:
                end = yield from self._shared(task, start, duration)
            elif end > now:
                scheduled += 1
                yield timeout(end - now)
            done[tid] = end
            event = waiters.pop(tid, None)
            if event is not None:
                scheduled += 1
                event.succeed()
        self.scheduled += scheduled


    def _shared(self, task: Task, start: float, duration: float
                ) -> Generator[simpy.Event, object, float]:
        """Run `task` on a device whose compute and communication share it (module
        docstring); returns its end."""
        env, dev = self.env, task.device
        if task.stream in COMM_STREAMS:
            if start > env.now:  # waits for its link first
                self.scheduled += 1
                yield env.timeout(start - env.now)
            self._talk(dev, +1)
            self.scheduled += 1
            yield env.timeout(duration)
            self._talk(dev, -1)
            return start + duration
        if task.stream != "compute" or task.phase not in KERNEL_PHASES:
            self.scheduled += 1
            yield env.timeout(start + duration - env.now)
            return start + duration
        if start > env.now:
            self.scheduled += 1
            yield env.timeout(start - env.now)
        slow = 1.0 + self.slowdown[dev]
        state = self.running[dev] = [env.active_process, duration, env.now, 1.0]
        while True:
            state[2], state[3] = env.now, (1.0 / slow if self.talking.get(dev) else 1.0)
            self.scheduled += 1
            try:
                yield env.timeout(state[1] / state[3])
                break
            except simpy.Interrupt:  # the device's communication started or stopped
                state[1] = max(0.0, state[1] - (env.now - state[2]) * state[3])
        del self.running[dev]
        return env.now

    def _flow(self, task: Task, duration: float) -> Generator[simpy.Event, object, float]:
        """A transfer on a fairly shared link (module docstring): `duration` seconds of work
        at the link's full rate, done at 1/n of it while n flows hold the link; returns
        its end. A NIC its node's devices share (`Plan.nic_of`) carries `slots` transfers
        of a device alone at full rate: while flows of total weight W hold it, each runs
        at min(1, slots / W) of its rate alone, its work alone its priced duration over
        `Plan.nic_priced`."""
        env, key, weight, priced = self.env, (task.device, task.link), 1, 1.0
        if task.link == "nic" and task.device in self.nic:
            key, weight, priced = self.nic[task.device]
        flows = self.flows.setdefault(key, [])
        slots = self.slots.get(key, 1.0)
        talks = task.device in self.slowdown and task.stream in COMM_STREAMS
        self._reshare(flows, slots)
        me: list[Any] = [env.active_process, duration / priced, env.now, weight]
        flows.append(me)
        if talks:
            self._talk(task.device, +1)
        while True:
            self.scheduled += 1
            try:
                yield env.timeout(me[1] / _rate(flows, slots))
                break
            except simpy.Interrupt:  # a flow joined or left: `_reshare` settled our work
                pass
        self._reshare(flows, slots)  # (settled at the shares they had with this flow)
        flows.remove(me)
        if talks:
            self._talk(task.device, -1)
        return env.now

    def _reshare(self, flows: list[list], slots: float = 1.0) -> None:
        """Before the flows of one link change: each one's work left settled at the share
        it had since it last changed, and each one interrupted to wait anew."""
        now, share = self.env.now, _rate(flows, slots)
        for flow in flows:
            flow[1] = max(0.0, flow[1] - (now - flow[2]) * share)
            flow[2] = now
            if flow[0] is not self.env.active_process:
                self.scheduled += 1
                flow[0].interrupt()

    def _talk(self, dev: int, step: int) -> None:
        """One communication task of `dev` more (+1) or less (-1); the compute task running
        there changes rate when the count leaves or reaches zero."""
        before = self.talking.get(dev, 0)
        self.talking[dev] = before + step
        if (before == 0) != (before + step == 0) and dev in self.running:
            self.scheduled += 1
            self.running[dev][0].interrupt()


def _rate(flows: list[list], slots: float) -> float:
    """The rate (of its own alone) of each of `flows` on a link carrying `slots` of them at
    full rate: processor sharing over their total weight."""
    total = sum(f[3] for f in flows)
    return min(1.0, slots / total) if total > 0 else 1.0


def run(plan: Plan) -> Trace:
    """Simulate one iteration of `plan`; the returned Trace holds no SimPy object."""
    t0 = time.perf_counter()
    model = _Model(plan)
    for _device, _name, tids in plan.streams:
        model.env.process(model.stream(tids))
    model.env.run()
    if None in model.done:
        unfinished = [t for t, d in enumerate(model.done) if d is None]
        raise AssertionError(f"deadlock: {len(unfinished)} tasks never ran, first "
                             f"{unfinished[0]}")
    return Trace(start=tuple(model.start), end=tuple(model.done),  # type: ignore[arg-type]
                 ready=tuple(model.ready), blocker=tuple(model.blocker),
                 events=model.scheduled, wall_s=time.perf_counter() - t0)


def simpy_event_rate(events: int = 100_000) -> float:
    """Events per second of a bare SimPy loop (one process, unit timeouts) on this machine,
    the ceiling any SimPy model can reach."""
    env = simpy.Environment()

    def loop() -> Generator:
        for _ in range(events):
            yield env.timeout(1.0)

    env.process(loop())
    t0 = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - t0)
